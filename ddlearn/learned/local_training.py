r"""Training the learned local coarse space (:mod:`.local_coarse`) once, offline, on seeded
coefficient families, distributed over MPI ranks.

Data: fields of the families of :mod:`ddlearn.decomposition.coefficients` (each field's
contrast drawn log-uniformly in ``[1, contrast_max]`` from its seed) on an ``n x n`` grid cut
into ``N`` boxes with overlap ``overlap``; every subdomain is one sample with its ``k + 1``
smallest exact eigenvalues (ARPACK, the spectral coarse space's pencil). Training, validation
and test fields come from disjoint seed ranges (:data:`SEEDS`). Each rank builds and holds the
fields ``f`` with ``f % size == rank``; gradients and validation sums are all-reduced, so the
result does not depend on the number of ranks beyond round-off.

Optimisation: Adam with a cosine learning-rate schedule on :func:`.local_coarse.ritz_loss`;
the best validation state is kept (:class:`.training.BestState`), checkpoints are atomic and a
run resumes from its checkpoint.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np
import scipy.sparse.linalg as spla
import torch
from mpi4py import MPI

from ..classical import reference
from ..classical.reference import neumann_matrix
from ..classical.coarse.spectral import SpectralSettings, local_eigenvectors
from ..decomposition import Decomposition
from ..decomposition.problems import make_problem
from .local_coarse import (KIND, PRETRAINED, LocalCoarseNet, PatchBatch, input_statistics, load_model, ritz_loss,
                           save_model, serial_basis, update_record)
from .common import BestState, cosine_schedule, progress_bar

__all__ = ["SEEDS", "LocalTrainConfig", "field_contrast", "family_patches",
           "train_local_coarse", "check_iterations", "CHECK_FIELDS", "main"]

#: first seed of each split: training fields are 0, 1, ...; the others never overlap them
SEEDS = {"train": 0, "validation": 100_000, "test": 200_000}


@dataclass
class LocalTrainConfig:
    """What the model is trained on and how."""

    families: tuple = ("channels", "inclusions", "lognormal")
    fields_per_family: int = 48
    validation_per_family: int = 3
    n: int = 127
    N: int = 16
    overlap: int = 1
    contrast_max: float = 1e8
    k: int = 8
    steps: int = 1  # block Krylov steps of the refinement in the loss
    serve_steps: int = 2  # ... and at set-up (the PC's default -ddlearn_learned_steps)
    vectors: int = 8
    hidden: int = 24
    layers: int = 4
    lr: float = 3e-3
    lr_final: float = 1e-4
    iterations: int = 1500
    eval_every: int = 50
    seed: int = 0


def field_contrast(seed: int, contrast_max: float) -> float:
    """The contrast of field ``seed``: log-uniform in ``[1, contrast_max]``."""
    return float(10 ** np.random.default_rng([seed, 7]).uniform(0, np.log10(contrast_max)))


def family_patches(cfg: LocalTrainConfig, split: str, comm=MPI.COMM_WORLD):
    """This rank's fields of ``split``: one ``(PatchBatch, exact eigenvalues per subdomain)``
    per field."""
    count = cfg.fields_per_family if split == "train" else cfg.validation_per_family
    dec = Decomposition((cfg.n, cfg.n), cfg.N, cfg.overlap)
    settings = SpectralSettings(cfg.k + 1, eigensolver="scipy", tol=1e-8)
    fields = []
    jobs = [(fam, SEEDS[split] + s) for s in range(count) for fam in cfg.families]
    for fam, seed in jobs[comm.Get_rank()::comm.Get_size()]:
        A = make_problem(f"random_{fam}", cfg.n, contrast=field_contrast(seed, cfg.contrast_max),
                         seed=seed).matrix()
        ANs = [neumann_matrix(A, I) for I in dec.subdomains]
        Ds = [dec.D(i) for i in range(dec.N)]
        exact = [local_eigenvectors(AN, D, settings)[0] for AN, D in zip(ANs, Ds)]
        fields.append((PatchBatch(ANs, Ds), exact))
    return fields


def _statistics(batches, comm) -> dict:
    stats = [input_statistics(b) for b in batches]
    return {"size_min": comm.allreduce(min(s["size_min"] for s in stats), op=MPI.MIN),
            "size_max": comm.allreduce(max(s["size_max"] for s in stats), op=MPI.MAX),
            "log10_contrast_max": comm.allreduce(max(s["log10_contrast_max"] for s in stats),
                                                 op=MPI.MAX)}


def _allreduce_(tensors, comm):
    for t in tensors:
        comm.Allreduce(MPI.IN_PLACE, t.numpy(), op=MPI.SUM)


def _evaluate(model, fields, cfg, comm) -> float:
    """Mean :func:`.local_coarse.ritz_loss` over all subdomains of ``fields`` (all ranks)."""
    with torch.no_grad():
        local = sum(float(ritz_loss(b, model(b), exact, cfg.steps, cfg.k)) * len(b)
                    for b, exact in fields)
    return comm.allreduce(local) / max(comm.allreduce(sum(len(b) for b, _ in fields)), 1)


def train_local_coarse(cfg: LocalTrainConfig, path: str, comm=MPI.COMM_WORLD,
                       resume: bool = True, progress: bool = True,
                       until: int | None = None) -> dict:
    """Train (or resume training of) the local coarse model and save the best validation
    state to ``path`` (atomically, with ``path + '.json'``). Returns the training record.

    The run's own checkpoint ``path + '.last'`` (written at every evaluation) is resumed when
    it was made with the same configuration. ``until``: stop after that step (a time slice),
    leaving the checkpoint to resume from; ``path`` is then not written."""
    torch.manual_seed(cfg.seed)
    clock = time.perf_counter()
    train = family_patches(cfg, "train", comm)
    val = family_patches(cfg, "validation", comm)
    data_s = comm.allreduce(time.perf_counter() - clock, op=MPI.MAX)
    model = LocalCoarseNet(cfg.vectors, cfg.hidden, cfg.layers, cfg.seed)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, cosine_schedule(cfg.lr, cfg.lr_final,
                                                                   cfg.iterations))
    start, history, train_s = 0, [], 0.0
    if resume:
        try:
            saved, _, extra = load_model(path + ".last")
        except FileNotFoundError:
            extra = None
        if extra is not None and extra.get("train_config") == asdict(cfg):
            model.load_state_dict(saved.state_dict())
            opt.load_state_dict(extra["optimizer"])
            sched.load_state_dict(extra["scheduler"])
            start, history, train_s = extra["step"], extra["history"], extra["train_s"]
    best = BestState(model, _evaluate(model, val, cfg, comm), start)
    bar = progress_bar(progress, cfg.iterations, "learned coarse space", comm, initial=start)
    meta = {"kind": KIND, "train_config": asdict(cfg), "ranks": comm.Get_size(),
            "fields": comm.allreduce(len(train)),
            "samples": comm.allreduce(sum(len(b) for b, _ in train)),
            "validation_samples": comm.allreduce(sum(len(b) for b, _ in val)),
            "input_statistics": _statistics([b for b, _ in train + val], comm)}
    for step in range(start, min(cfg.iterations, until or cfg.iterations)):
        tic = time.perf_counter()
        # the field of a step depends on the step only, so a resumed run repeats the same steps
        batch, exact = train[np.random.default_rng([cfg.seed, comm.Get_rank(), step])
                             .integers(len(train))]
        loss = ritz_loss(batch, model(batch), exact, cfg.steps, cfg.k)
        opt.zero_grad()
        loss.backward()
        grads = [p.grad for p in model.parameters()]
        _allreduce_(grads, comm)
        for g in grads:
            g /= comm.Get_size()
        opt.step()
        sched.step()
        train_s += comm.allreduce(time.perf_counter() - tic, op=MPI.MAX)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{float(loss):.3g}", best=f"{best.value:.3g}")
        if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.iterations:
            value = _evaluate(model, val, cfg, comm)
            history.append({"step": step + 1, "train_loss": comm.allreduce(float(loss.detach())) /
                            comm.Get_size(), "validation": value, "seconds": train_s})
            best.offer(value, step + 1)
            if comm.Get_rank() == 0:
                save_model(path + ".last", model, meta, optimizer=opt.state_dict(),
                           scheduler=sched.state_dict(), step=step + 1, history=history,
                           train_s=train_s, train_config=asdict(cfg))
            comm.Barrier()
    if bar is not None:
        bar.close()
    if until is not None and until < cfg.iterations:
        return {**meta, "step": until, "history": history}
    best.restore()
    record = {**meta, "data_s": data_s, "train_s": train_s, "best_step": best.step,
              "best_validation": best.value, "history": history}
    if comm.Get_rank() == 0:
        save_model(path, model, record)
        for leftover in (path + ".last", path + ".last.json"):  # finished: nothing to resume
            if os.path.exists(leftover):
                os.unlink(leftover)
    comm.Barrier()
    return record


#: the fields the shipped model's record carries its CG iterations for (test seeds, serial)
CHECK_FIELDS = tuple((family, 127, 16, 1e6, SEEDS["test"]) for family in
                     ("channels", "inclusions", "lognormal"))


def check_iterations(path: str, cases=CHECK_FIELDS) -> list[dict]:
    """CG iterations (rtol 1e-8, random right-hand side of seed 0) of two-level Schwarz with the
    learned coarse space of the model at ``path`` on each ``(family, n, N, contrast, seed)``
    field, built serially (:func:`.local_coarse.serial_basis`)."""
    model, meta, _ = load_model(path)
    cfg = meta["train_config"]
    out = []
    for family, n, N, contrast, seed in cases:
        A = make_problem(f"random_{family}", n, contrast=contrast, seed=seed).matrix()
        dec = Decomposition((n, n), N, cfg["overlap"])
        Phi = serial_basis(A, dec.subdomains, [dec.D(i) for i in range(N)], model, cfg["k"],
                           cfg["serve_steps"])
        b = np.random.default_rng(0).uniform(-1, 1, A.shape[0])
        count = []
        spla.cg(A, b, M=reference.two_level(A, dec, Phi), rtol=1e-8, maxiter=2000,
                callback=lambda x: count.append(1))
        out.append({"family": family, "n": n, "N": N, "contrast": contrast, "seed": seed,
                    "iterations": len(count)})
    return out


def main(argv: list[str] | None = None) -> dict:
    """``mpiexec -n P python -m ddlearn.learned.local_training [--out FILE] [options]``: train
    the learned coarse space on the coefficient families (the shipped model's command)."""
    defaults = LocalTrainConfig()
    ap = argparse.ArgumentParser(description=main.__doc__.split(":")[0])
    ap.add_argument("--out", default=PRETRAINED, help="model file (a .json record beside it)")
    ap.add_argument("--families", nargs="+", default=list(defaults.families))
    for name in ("fields_per_family", "validation_per_family", "n", "N", "overlap", "k", "steps",
                 "serve_steps", "vectors", "hidden", "layers", "iterations", "eval_every",
                 "seed"):
        ap.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name))
    for name in ("contrast_max", "lr", "lr_final"):
        ap.add_argument("--" + name.replace("_", "-"), type=float, default=getattr(defaults, name))
    ap.add_argument("--restart", action="store_true", help="ignore a checkpoint of this run")
    ap.add_argument("--until", type=int, help="stop after this step; rerun to resume")
    ap.add_argument("--no-progress", action="store_true")
    args = vars(ap.parse_args(argv))
    out, restart, quiet = args.pop("out"), args.pop("restart"), args.pop("no_progress")
    until = args.pop("until")
    torch.set_num_threads(1)
    cfg = LocalTrainConfig(**{**args, "families": tuple(args["families"])})
    record = train_local_coarse(cfg, out, resume=not restart, progress=not quiet, until=until)
    if until is not None and until < cfg.iterations:
        if MPI.COMM_WORLD.Get_rank() == 0:
            print(f"stopped after step {until}; the same command without --until resumes")
        return record
    if MPI.COMM_WORLD.Get_rank() == 0:
        command = ("mpiexec -n " + str(MPI.COMM_WORLD.Get_size()) + " python -m "
                   "ddlearn.learned.local_training " + " ".join(argv if argv is not None
                                                                 else sys.argv[1:]))
        update_record(out, command=command, check=check_iterations(out))
        print(f"wrote {out}: best validation loss {record['best_validation']:.4g} at step "
              f"{record['best_step']}, {record['data_s']:.0f} s data + {record['train_s']:.0f} s "
              f"training on {record['ranks']} ranks")
    return record


if __name__ == "__main__":
    main()
