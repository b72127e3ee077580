r"""Training the ``schwarz_attention`` coarse space (:mod:`.schwarz_attention`) once, offline,
on seeded coefficient families, distributed over MPI ranks, resumable.

Data: fields of the families (each field's contrast log-uniform in ``[1, contrast_max]`` from
its seed, :func:`~.local_training.field_contrast`) on an ``n^dim`` grid cut into ``N`` boxes
with overlap ``overlap``; training, validation and test seeds disjoint
(:data:`~.local_training.SEEDS`). A field is one :class:`~.spectrum.Spectrum` (its matrix, the
one-level part's factors) with its tokens (:mod:`.subdomain_tokens`).

Loss: :meth:`.spectrum.Spectrum.loss`, :math:`-\frac1p\sum_{j\le p}\log\lambda_j` of the
two-level additive :math:`M^{-1}A` at the current network, its ``p = ritz`` smallest Ritz pairs
from ``lanczos`` Lanczos steps (seeded by the step), differentiated through the Galerkin coarse
solve; validation: the same loss on the validation fields (Lanczos seed 0). The run (batches
of ``fields_per_step`` fields whatever the number of ranks, gradients summed over ranks,
atomic checkpoints resumed, the best validation state kept) is
:func:`~.local_training.fit_on_fields`. The command line (:func:`main`) never overwrites an
existing model without ``--force``; its record carries the command, the training subdomain
sizes and the CG iterations of the test fields (:func:`check_iterations`).
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict, dataclass

import numpy as np
import scipy.sparse.linalg as spla
import torch
from mpi4py import MPI

from ...classical import reference
from ...decomposition import Decomposition
from ...decomposition.timing import Timer
from ...nn.schwarz import ATTENTIONS
from ...nn.subdomain_basis import KIND, SubdomainBasisNet
from .local_training import (SEEDS, _check_batch, _jobs, _owner, _recorded_command,
                             family_problem, field_contrast, fit_on_fields)
from .model_file import MODEL_KINDS, load_model, update_record
from .schwarz_attention import serial_basis
from .spectrum import Spectrum, orthonormal_bases, subspace_gap
from .subdomain_tokens import feature_count, subdomain_tokens

__all__ = ["AttentionTrainConfig", "field_data", "train_attention_coarse", "check_iterations",
           "main"]

MODULE = MODEL_KINDS[KIND][1]


@dataclass
class AttentionTrainConfig:
    """What the model is trained on and how."""

    families: tuple = ("channels", "inclusions", "lognormal")
    fields_per_family: int = 32
    validation_per_family: int = 2
    fields_per_step: int = 2  # the global batch of every step, split over the ranks
    n: int = 127
    N: int = 16
    overlap: int = 1
    dim: int = 2
    contrast_max: float = 1e6
    k: int = 4  # vectors per subdomain, the constant included
    width: int = 32
    depth: int = 3
    heads: int = 4
    coarse: bool = True  # the coarse level of the attention (among subdomains)
    coordinates: bool = False  # the subdomain-relative coordinates as input
    pieces: bool = False  # the coefficient pieces' features as input
    attention: str = "softmax"  # inside each subdomain: softmax or galerkin (linear)
    ritz: int = 8  # p: the smallest eigenvalues in the loss
    lanczos: int = 48
    pretrain: int = 0  # first steps on the subspace gap to the spectral vectors (a curriculum)
    lr: float = 3e-3
    lr_final: float = 1e-4
    iterations: int = 600
    eval_every: int = 50
    seed: int = 0


def field_data(cfg: AttentionTrainConfig, family: str, seed: int, contrast: float | None = None):
    """``(A, dec, weights, coordinates)`` of one field (its contrast from its seed unless
    given)."""
    problem = family_problem(family, cfg.n, cfg.dim, seed=seed,
                             contrast=field_contrast(seed, cfg.contrast_max)
                             if contrast is None else contrast)
    A = problem.matrix().tocsr()
    dec = Decomposition((cfg.n,) * cfg.dim, cfg.N, cfg.overlap)
    coords = problem.coordinates() if cfg.coordinates else None
    return A, dec, [dec.D(i) for i in range(dec.N)], coords


def _fields(cfg: AttentionTrainConfig, split: str, comm) -> dict:
    """This rank's fields of ``split`` by global index: ``(Spectrum, tokens, sizes)``."""
    out = {}
    for index, (family, seed) in enumerate(_jobs(cfg, split)):
        if _owner(cfg, split, index, comm.Get_size()) != comm.Get_rank():
            continue
        A, dec, weights, coords = field_data(cfg, family, seed)
        blocks = [A[I][:, I].tocsr() for I in dec.subdomains]
        X = subdomain_tokens(blocks, weights, None if coords is None else
                             [coords[I] for I in dec.subdomains], pieces=cfg.pieces)
        targets = _targets(A, dec, weights, cfg.k) if cfg.pretrain and split == "train" else None
        out[index] = (Spectrum(A, dec.subdomains, weights), torch.as_tensor(X), dec.sizes,
                      targets)
    return out


def _targets(A, dec, weights, k: int) -> list:
    """Per subdomain an orthonormal basis of the spectral space's ``k`` vectors
    (:func:`~ddlearn.classical.reference.spectral_basis`, the Neumann pencil)."""
    Phi = reference.spectral_basis(A, dec.subdomains, weights, k).toarray()
    out = []
    for i, (I, D) in enumerate(zip(dec.subdomains, weights)):
        V = Phi[I, i * k:(i + 1) * k] / D[:, None]
        out.append(torch.as_tensor(np.linalg.qr(V)[0]))
    return out


def _network(cfg: AttentionTrainConfig) -> SubdomainBasisNet:
    return SubdomainBasisNet(feature_count(cfg.dim if cfg.coordinates else 0, cfg.pieces),
                             cfg.k - 1, cfg.width, cfg.depth, cfg.heads, cfg.coarse, cfg.seed,
                             cfg.attention)


def train_attention_coarse(cfg: AttentionTrainConfig, path: str, comm=MPI.COMM_WORLD,
                           resume: bool = True, progress: bool = True,
                           until: int | None = None) -> dict:
    """Train (or resume) the Schwarz-attention coarse model and save the best validation state
    to ``path`` (atomically, with its record); ``until``: stop after that step, leaving the
    checkpoint ``path + '.last'`` to resume from. Returns the training record.

    Raises
    ------
    ValueError
        When ``fields_per_step`` is not between 1 and the number of training fields, or ``k``
        is below 2.
    """
    _check_batch(cfg)
    if cfg.k < 2:
        raise ValueError(f"k = {cfg.k}: the coarse space needs k >= 2 vectors per subdomain "
                         f"(the constant and at least one learned vector)")
    timer = Timer()
    train, val = _fields(cfg, "train", comm), _fields(cfg, "validation", comm)
    timer.lap("data_s")
    model = _network(cfg)
    sizes = [int(s) for f in (*train.values(), *val.values()) for s in f[2]]
    meta = {"kind": KIND, "train_config": asdict(cfg), "ranks": comm.Get_size(),
            "fields": comm.allreduce(len(train)),
            "sizes": [comm.allreduce(min(sizes, default=1 << 62), op=MPI.MIN),
                      comm.allreduce(max(sizes, default=0), op=MPI.MAX)]}

    def vectors(field):
        model.set_subdomains(field[2])
        return list(torch.split(model(field[1]), list(field[2])))

    def field_loss(field, step):
        if step < cfg.pretrain:
            return subspace_gap(orthonormal_bases(vectors(field))[0], field[3])
        return field[0].loss(vectors(field), cfg.ritz, cfg.lanczos, seed=step)[0]

    def evaluate():  # always the spectrum (Lanczos seed 0)
        with torch.no_grad():
            local = sum(float(f[0].loss(vectors(f), cfg.ritz, cfg.lanczos, seed=0)[0])
                        for f in val.values())
        return {"validation": comm.allreduce(local) / max(comm.allreduce(len(val)), 1)}

    return fit_on_fields(cfg, path, model, KIND, train, field_loss, evaluate, meta,
                         timer.slowest(comm)["data_s"], comm, resume, progress, until,
                         "Schwarz-attention coarse space")


def check_iterations(path: str, cases=None) -> list[dict]:
    """CG iterations (rtol 1e-8, random right-hand side of seed 0) of two-level additive
    Schwarz with the model's coarse space on each ``(family, contrast, seed)`` field at the
    training grid (default: each family at contrast 1e6, the first test seed)."""
    model, meta, _ = load_model(path, KIND)
    cfg = AttentionTrainConfig(**{**meta["train_config"],
                                  "families": tuple(meta["train_config"]["families"])})
    out = []
    for family, contrast, seed in cases or [(f, 1e6, SEEDS["test"]) for f in cfg.families]:
        A, dec, weights, coords = field_data(cfg, family, seed, contrast)
        Phi, fallback = serial_basis(model, A, dec.subdomains, weights, coords, cfg.pieces)
        b = np.random.default_rng(0).uniform(-1, 1, A.shape[0])
        count = []
        spla.cg(A, b, M=reference.two_level(A, dec, Phi), rtol=1e-8, maxiter=2000,
                callback=lambda x: count.append(1))
        out.append({"family": family, "n": cfg.n, "N": cfg.N, "contrast": contrast,
                    "seed": seed, "iterations": len(count), "fallback": len(fallback)})
    return out


def main(argv: list[str] | None = None) -> dict:
    """``mpiexec -n P python -m ddlearn.learned.coarse.attention_training [--out FILE]
    [--force] [options]``: train the Schwarz-attention coarse space on the coefficient families
    and write it with its record. An existing ``--out`` is refused unless ``--force``."""
    defaults = AttentionTrainConfig()
    ap = argparse.ArgumentParser(description=main.__doc__.split(":")[0], allow_abbrev=False)
    ap.add_argument("--out", default="schwarz_attention.pt",
                    help="model file to write, a .json record beside it (default: %(default)s)")
    ap.add_argument("--force", action="store_true", help="overwrite an existing --out")
    ap.add_argument("--families", nargs="+", default=list(defaults.families))
    for name in ("fields_per_family", "validation_per_family", "fields_per_step", "n", "N",
                 "overlap", "dim", "k", "width", "depth", "heads", "ritz", "lanczos", "pretrain",
                 "iterations", "eval_every", "seed"):
        ap.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name))
    for name in ("contrast_max", "lr", "lr_final"):
        ap.add_argument("--" + name.replace("_", "-"), type=float, default=getattr(defaults, name))
    ap.add_argument("--attention", choices=ATTENTIONS, default=defaults.attention,
                    help="attention inside each subdomain (galerkin: linear in its size)")
    ap.add_argument("--no-coarse", dest="coarse", action="store_false",
                    help="switch the attention among subdomains off (ablation)")
    ap.add_argument("--coordinates", action="store_true",
                    help="give the network the subdomain-relative coordinates")
    ap.add_argument("--pieces", action="store_true",
                    help="give the network the subdomain's coefficient pieces (a code per "
                         "piece and its share)")
    ap.add_argument("--restart", action="store_true", help="ignore a checkpoint of this run")
    ap.add_argument("--until", type=int, help="stop after this step; rerun to resume")
    ap.add_argument("--no-progress", action="store_true")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = vars(ap.parse_args(argv))
    out, restart, quiet = args.pop("out"), args.pop("restart"), args.pop("no_progress")
    until, force = args.pop("until"), args.pop("force")
    comm = MPI.COMM_WORLD
    existing = comm.bcast([f for f in (out, out + ".json") if os.path.exists(f)]
                          if comm.Get_rank() == 0 else None)
    if existing and not force:
        ap.error(f"{existing[0]} exists: give --force to overwrite it, or another --out; "
                 f"nothing was written")
    torch.set_num_threads(1)
    cfg = AttentionTrainConfig(**{**args, "families": tuple(args["families"])})
    record = train_attention_coarse(cfg, out, comm=comm, resume=not restart,
                                    progress=not quiet, until=until)
    if until is not None and until < cfg.iterations:
        if comm.Get_rank() == 0:
            print(f"stopped after step {until}; the same command without --until resumes")
        return record
    if comm.Get_rank() == 0:
        update_record(out, command=_recorded_command(argv, comm.Get_size(), MODULE),
                      check=check_iterations(out))
        print(f"wrote {out}: best validation loss {record['best_validation']:.4g} at step "
              f"{record['best_step']}, {record['data_s']:.0f} s data + {record['train_s']:.0f} s "
              f"training on {record['ranks']} ranks")
    return record


if __name__ == "__main__":
    main()
