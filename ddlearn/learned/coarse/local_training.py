r"""Training the learned local coarse space (:mod:`.learned`) once, offline, on seeded
coefficient families, distributed over MPI ranks.

Data: fields of the families of :mod:`ddlearn.decomposition.coefficients` (each field's
contrast drawn log-uniformly in ``[1, contrast_max]`` from its seed) on an ``n x n`` (``dim =
2``, 5-point) or ``n x n x n`` (``dim = 3``, 7-point) grid cut into ``N`` boxes with overlap
``overlap``; every subdomain is one sample with its ``k + 1`` smallest exact eigenvalues
(ARPACK) of the spectral coarse space's ``pencil`` (``neumann`` or ``dirichlet``, see
:mod:`ddlearn.classical.coarse.spectral`). ``init``: a model file whose parameters start the
training (a 3D model fine-tuned from the 2D one: the graph input is the same in any dimension). Training, validation
and test fields come from disjoint seed ranges (:data:`SEEDS`).

Steps: step ``t`` uses a global batch of ``F = fields_per_step`` training fields chosen from
``seed`` and ``t`` alone (:func:`step_fields`: position ``g`` of the batch is drawn from the
fields ``f`` with ``f % F == g``, a stratified draw), so every rank count trains on the same
fields in the same order. Position ``g`` is computed by rank ``g % P`` of ``P`` ranks, which
holds the fields ``f`` with ``(f % F) % P == rank`` (``P`` dividing ``F`` balances the work;
ranks beyond ``F`` only validate); the gradients are summed over ranks (all-reduce) and divided
by ``F``. Validation is the mean over all subdomains of all validation fields, summed the same
way. The result therefore does not depend on the number of ranks beyond round-off (summation
order).

Optimisation: :class:`ddlearn.nn.trainer.Trainer` (Adam with a cosine learning-rate schedule)
on :func:`.refinement.ritz_loss`, the ranks' gradients summed by its communication hook; the
best validation state is kept, checkpoints are atomic and a run resumes from its checkpoint. The command line (:func:`main`) never overwrites an existing
model without ``--force``.
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
from ...classical.reference import neumann_matrix
from ...classical.coarse.spectral import PENCILS, SpectralSettings, local_eigenvectors
from ...decomposition import Decomposition
from ...decomposition.problems import family_problem_name, make_problem
from ...decomposition.timing import Timer
from ...nn.trainer import Trainer, TrainConfig
from .model_file import PRETRAINED, load_model, save_model, update_record
from .network import KIND, LocalCoarseNet
from .patches import PatchBatch, input_statistics, max_row_entries
from .refinement import ritz_loss
from .serving import serial_basis

__all__ = ["SEEDS", "LocalTrainConfig", "field_contrast", "family_patches", "step_fields",
           "train_local_coarse", "fit_on_fields", "check_iterations", "check_fields",
           "family_problem", "pencil_rights", "main"]

#: first seed of each split: training fields are 0, 1, ...; the others never overlap them
SEEDS = {"train": 0, "validation": 100_000, "test": 200_000}


@dataclass
class LocalTrainConfig:
    """What the model is trained on and how."""

    families: tuple = ("channels", "inclusions", "lognormal")
    fields_per_family: int = 48
    validation_per_family: int = 3
    fields_per_step: int = 4  # the global batch of every step, split over the ranks
    n: int = 127
    N: int = 16
    overlap: int = 1
    dim: int = 2
    pencil: str = "neumann"  # the shipped 2D model's; "dirichlet" is the spectral default
    init: str | None = None  # a model file to start from
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


def _jobs(cfg: LocalTrainConfig, split: str) -> list[tuple[str, int]]:
    """``(family, seed)`` of every field of ``split``; a field's global index is its place."""
    count = cfg.fields_per_family if split == "train" else cfg.validation_per_family
    return [(fam, SEEDS[split] + s) for s in range(count) for fam in cfg.families]


def _owner(cfg: LocalTrainConfig, split: str, field: int, size: int) -> int:
    """The rank that holds field ``field`` of ``split`` (module docstring)."""
    return (field % cfg.fields_per_step) % size if split == "train" else field % size


def step_fields(cfg: LocalTrainConfig, step: int) -> list[int]:
    """The global indices of the ``fields_per_step`` training fields of step ``step``, from
    ``cfg.seed`` and ``step`` only: position ``g`` is a uniform draw among the fields ``f`` with
    ``f % fields_per_step == g``."""
    F, total = cfg.fields_per_step, len(_jobs(cfg, "train"))
    counts = [(total - g + F - 1) // F for g in range(F)]
    picks = np.random.default_rng([cfg.seed, step]).integers(0, counts)
    return [g + F * int(j) for g, j in enumerate(picks)]


def family_problem(family: str, n: int, dim: int, **kw):
    """The problem of a coefficient ``family`` (``channels``, ...) in ``dim`` dimensions."""
    return make_problem(family_problem_name(family, dim), n, **kw)


def pencil_rights(A, subdomains, pencil: str):
    """The right-hand matrices :math:`A_i^R` of ``pencil`` on the sets ``subdomains`` of the
    scipy matrix ``A`` (``None``: the Neumann pencil, :math:`A_i^R = A_i^N`)."""
    if pencil not in PENCILS:
        raise ValueError(f"unknown pencil {pencil!r}; choose one of {', '.join(PENCILS)}")
    return [A[I][:, I].tocsr() for I in subdomains] if pencil == "dirichlet" else None


def family_patches(cfg: LocalTrainConfig, split: str, comm=MPI.COMM_WORLD) -> dict:
    """This rank's fields of ``split`` by global index: ``{index: (PatchBatch, exact
    eigenvalues per subdomain)}``."""
    dec = Decomposition((cfg.n,) * cfg.dim, cfg.N, cfg.overlap)
    settings = SpectralSettings(cfg.k + 1, eigensolver="scipy", tol=1e-8)
    fields = {}
    for index, (fam, seed) in enumerate(_jobs(cfg, split)):
        if _owner(cfg, split, index, comm.Get_size()) != comm.Get_rank():
            continue
        A = family_problem(fam, cfg.n, cfg.dim, contrast=field_contrast(seed, cfg.contrast_max),
                           seed=seed).matrix()
        ANs = [neumann_matrix(A, I) for I in dec.subdomains]
        Ds = [dec.D(i) for i in range(dec.N)]
        rights = pencil_rights(A, dec.subdomains, cfg.pencil)
        exact = [local_eigenvectors(AN, D, settings, right=None if rights is None else R)[0]
                 for AN, D, R in zip(ANs, Ds, rights or [None] * len(ANs))]
        fields[index] = (PatchBatch(ANs, Ds, rights=rights), exact)
    return fields


def _statistics(batches, comm) -> dict:
    stats = [input_statistics(b) for b in batches]  # a rank may hold no field
    return {"size_min": comm.allreduce(min((s["size_min"] for s in stats),
                                           default=np.iinfo(np.int64).max), op=MPI.MIN),
            "size_max": comm.allreduce(max((s["size_max"] for s in stats), default=0),
                                       op=MPI.MAX),
            "log10_contrast_max": comm.allreduce(max((s["log10_contrast_max"] for s in stats),
                                                     default=0.0), op=MPI.MAX)}


def _allreduce_(tensors, comm):
    for t in tensors:
        comm.Allreduce(MPI.IN_PLACE, t.numpy(), op=MPI.SUM)


def _evaluate(model, fields, cfg, comm) -> float:
    """Mean :func:`.refinement.ritz_loss` over all subdomains of ``fields`` (all ranks)."""
    with torch.no_grad():
        local = sum(float(ritz_loss(b, model(b), exact, cfg.steps, cfg.k)) * len(b)
                    for b, exact in fields.values())
    count = comm.allreduce(sum(len(b) for b, _ in fields.values()))
    return comm.allreduce(local) / max(count, 1)


def _entries(curves: dict) -> list[dict]:
    """The trainer's curves (a list per quantity) as one entry per evaluation."""
    return [dict(zip(curves, values)) for values in zip(*curves.values())]


def _curves(entries: list[dict]) -> dict:
    """One entry per evaluation as a list per quantity (the inverse of :func:`_entries`)."""
    keys = ("step", "train_loss", "validation", "seconds")
    return {k: [e[k] for e in entries] for k in keys} if entries else {}


def train_local_coarse(cfg: LocalTrainConfig, path: str, comm=MPI.COMM_WORLD,
                       resume: bool = True, progress: bool = True,
                       until: int | None = None) -> dict:
    """Train (or resume training of) the local coarse model and save the best validation
    state to ``path`` (atomically, with ``path + '.json'``). Returns the training record.

    The run's own checkpoint ``path + '.last'`` (written at every evaluation) is resumed when
    it was made with the same configuration. ``until``: stop after that step (a time slice),
    leaving the checkpoint to resume from; ``path`` is then not written.

    Every step trains on the same global batch of ``cfg.fields_per_step`` fields whatever the
    number of ranks of ``comm`` (module docstring), so the result does not depend on it beyond
    round-off.

    Raises
    ------
    ValueError
        When ``fields_per_step`` is not between 1 and the number of training fields.
    """
    _check_batch(cfg)
    torch.manual_seed(cfg.seed)
    timer = Timer()
    train = family_patches(cfg, "train", comm)
    val = family_patches(cfg, "validation", comm)
    timer.lap("data_s")
    model = LocalCoarseNet(cfg.vectors, cfg.hidden, cfg.layers, cfg.seed)
    if cfg.init:
        start_from = load_model(cfg.init)[0]
        if start_from.config != model.config:
            raise ValueError(f"--init {cfg.init} has the configuration {start_from.config}, "
                             f"not {model.config}: give matching --vectors, --hidden, --layers, "
                             f"--seed")
        model.load_state_dict(start_from.state_dict())
    meta = {"kind": KIND, "train_config": asdict(cfg), "ranks": comm.Get_size(),
            "fields": comm.allreduce(len(train)),
            "samples": comm.allreduce(sum(len(b) for b, _ in train.values())),
            "validation_samples": comm.allreduce(sum(len(b) for b, _ in val.values())),
            "input_statistics": _statistics([b for b, _ in (*train.values(), *val.values())],
                                            comm),
            "stencil": max_row_entries(family_problem(cfg.families[0], cfg.n, cfg.dim,
                                                      seed=0).matrix())}

    def field_loss(field, step):
        batch, exact = field
        return ritz_loss(batch, model(batch), exact, cfg.steps, cfg.k)

    return fit_on_fields(cfg, path, model, KIND, train, field_loss,
                         lambda: {"validation": _evaluate(model, val, cfg, comm)}, meta,
                         timer.slowest(comm)["data_s"], comm, resume, progress, until,
                         "learned coarse space")


def _check_batch(cfg) -> None:
    total = len(_jobs(cfg, "train"))
    if not 1 <= cfg.fields_per_step <= total:
        raise ValueError(f"fields_per_step = {cfg.fields_per_step} must be between 1 and the "
                         f"number of training fields, {total} (fields_per_family x families)")


def fit_on_fields(cfg, path: str, model, kind: str, train: dict, field_loss, evaluate,
                  meta: dict, data_s: float, comm=MPI.COMM_WORLD, resume: bool = True,
                  progress: bool = True, until: int | None = None, desc: str = "training") -> dict:
    r"""The training run of a model of the learned coarse spaces on the fields of the families
    (the module docstring): :class:`~ddlearn.nn.trainer.Trainer` on the mean of
    ``field_loss(train[f], step)`` over the step's fields :func:`step_fields` (this rank's
    ``train`` by global index), gradients summed over the ranks; ``evaluate()`` the validation
    metrics (collective, ``{"validation": value}``); checkpoints ``path + '.last'`` of
    ``kind`` (:data:`~.model_file.MODEL_KINDS`) at every evaluation, resumed when made with
    the same ``cfg``; the best validation state saved to ``path`` with ``meta`` and the
    history. ``cfg``: a dataclass with the fields of :class:`LocalTrainConfig` the batches,
    schedule and evaluations read (``fields_per_step``, ``iterations``, ``lr``, ``lr_final``,
    ``eval_every``, ``seed``, and those of :func:`_jobs`)."""
    rank, size, F = comm.Get_rank(), comm.Get_size(), cfg.fields_per_step

    def loss(step):
        # the batch depends on the seed and the step only: the same on any number of ranks,
        # and a resumed run repeats the same steps; this rank takes positions rank, rank + P, ...
        total = torch.zeros((), dtype=torch.float64, requires_grad=True)
        for field in step_fields(cfg, step)[rank::size]:
            total = total + field_loss(train[field], step)
        return total

    def communicate(params, local):
        """Sum the gradients and losses of the step's fields over the ranks, divided by F."""
        for p in params:
            if p.grad is None:  # no field of this step on this rank
                p.grad = torch.zeros_like(p)
        grads = [p.grad for p in params]
        _allreduce_(grads, comm)
        for g in grads:
            g /= F
        return comm.allreduce(local) / F

    def checkpoint(trainer):
        if rank == 0:
            save_model(path + ".last", model, meta, optimizer=trainer.optimizer.state_dict(),
                       scheduler=trainer.scheduler.state_dict(), step=trainer.step,
                       history=_entries(trainer.history), train_s=trainer.elapsed,
                       train_config=asdict(cfg))
        comm.Barrier()

    settings = TrainConfig(steps=cfg.iterations, lr=cfg.lr, lr_final=cfg.lr_final,
                           eval_every=cfg.eval_every, divergence=None, seed=cfg.seed,
                           progress=progress)
    trainer = Trainer(model, settings, loss, evaluate, monitor="validation",
                      communicate=communicate, rank=rank, desc=desc, on_evaluation=checkpoint)
    if resume:
        try:
            saved, _, extra = load_model(path + ".last", kind)
        except FileNotFoundError:
            extra = None
        except ValueError as e:  # e.g. killed between writing the checkpoint and its record
            extra = None
            if rank == 0:
                print(f"not resuming from the damaged checkpoint {path}.last ({e}); starting "
                      f"from step 0", file=sys.stderr)
        if extra is not None and extra.get("train_config") == asdict(cfg):
            trainer.load_state({"current_state": saved.state_dict(),
                                "optimizer": extra["optimizer"], "scheduler": extra["scheduler"],
                                "step": extra["step"], "history": _curves(extra["history"]),
                                "seconds": extra["train_s"], "best": {
                                    "state": saved.state_dict(), "value": float("inf"),
                                    "step": extra["step"]}})
    trainer.offer_initial()  # the state training starts from competes for the best
    trainer.run(until or None)
    history = _entries(trainer.history)
    train_s = comm.allreduce(trainer.elapsed, op=MPI.MAX)
    if until is not None and until < cfg.iterations:
        return {**meta, "step": until, "history": history}
    best = trainer.best
    best.restore()
    record = {**meta, "data_s": data_s, "train_s": train_s, "best_step": best.step,
              "best_validation": best.value, "history": history}
    if rank == 0:
        save_model(path, model, record)
        for leftover in (path + ".last", path + ".last.json"):  # finished: nothing to resume
            if os.path.exists(leftover):
                os.unlink(leftover)
    comm.Barrier()
    return record


def check_fields(train_config: dict) -> tuple:
    """The ``(family, n, N, contrast, seed)`` fields a model's record carries its CG iterations
    for: each family at the training grid, contrast 1e6, the first test seed."""
    return tuple((family, train_config["n"], train_config["N"], 1e6, SEEDS["test"])
                 for family in ("channels", "inclusions", "lognormal"))


def check_iterations(path: str, cases=None) -> list[dict]:
    """CG iterations (rtol 1e-8, random right-hand side of seed 0) of two-level Schwarz with the
    learned coarse space of the model at ``path`` on each ``(family, n, N, contrast, seed)``
    field (default :func:`check_fields`), built serially (:func:`.serving.serial_basis`)
    on the model's pencil."""
    model, meta, _ = load_model(path)
    cfg = meta["train_config"]
    dim, pencil = cfg.get("dim", 2), cfg.get("pencil", "neumann")
    out = []
    for family, n, N, contrast, seed in (check_fields(cfg) if cases is None else cases):
        A = family_problem(family, n, dim, contrast=contrast, seed=seed).matrix()
        dec = Decomposition((n,) * dim, N, cfg["overlap"])
        Phi = serial_basis(A, dec.subdomains, [dec.D(i) for i in range(N)], model, cfg["k"],
                           cfg["serve_steps"], pencil_rights(A, dec.subdomains, pencil))
        b = np.random.default_rng(0).uniform(-1, 1, A.shape[0])
        count = []
        spla.cg(A, b, M=reference.two_level(A, dec, Phi), rtol=1e-8, maxiter=2000,
                callback=lambda x: count.append(1))
        out.append({"family": family, "n": n, "N": N, "contrast": contrast, "seed": seed,
                    "iterations": len(count)})
    return out


#: options that steer a run but not its result: left out of the recorded command
_RUN_CONTROL = {"--force": 0, "--restart": 0, "--no-progress": 0, "--until": 1}


def _recorded_command(argv: list[str], ranks: int,
                      module: str = "ddlearn.learned.coarse.local_training") -> str:
    """The command that reproduces a run: ``argv`` without the run-control options (so the
    recorded command never overwrites the model it describes without a ``--force`` of its
    own)."""
    kept, skip = [], 0
    for arg in argv:
        if skip:
            skip -= 1
            continue
        name = arg.split("=", 1)[0]
        if name in _RUN_CONTROL:
            skip = _RUN_CONTROL[name] if "=" not in arg else 0
            continue
        kept.append(arg)
    return " ".join([f"mpiexec -n {ranks} python -m {module}", *kept])


def main(argv: list[str] | None = None) -> dict:
    """``mpiexec -n P python -m ddlearn.learned.coarse.local_training [--out FILE] [--force]
    [options]``: train the learned coarse space on the coefficient families and write it with
    its record (the shipped model's record holds the command that made it). An existing
    ``--out`` (by default ``local_coarse.pt`` in the current directory) is refused unless
    ``--force`` is given; nothing is written then."""
    defaults = LocalTrainConfig()
    ap = argparse.ArgumentParser(description=main.__doc__.split(":")[0], allow_abbrev=False)
    ap.add_argument("--out", default="local_coarse.pt",
                    help="model file to write, a .json record beside it (default: %(default)s)")
    ap.add_argument("--force", action="store_true",
                    help="overwrite an existing --out (e.g. the model shipped with ddlearn)")
    ap.add_argument("--families", nargs="+", default=list(defaults.families))
    for name in ("fields_per_family", "validation_per_family", "fields_per_step", "n", "N",
                 "overlap", "dim", "k", "steps", "serve_steps", "vectors", "hidden", "layers",
                 "iterations", "eval_every", "seed"):
        ap.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name))
    for name in ("contrast_max", "lr", "lr_final"):
        ap.add_argument("--" + name.replace("_", "-"), type=float, default=getattr(defaults, name))
    ap.add_argument("--pencil", choices=PENCILS, default=defaults.pencil)
    ap.add_argument("--init", help="a model file whose parameters start the training")
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
        shipped = (" (the model shipped with ddlearn)"
                   if os.path.abspath(out) == os.path.abspath(PRETRAINED) else "")
        ap.error(f"{existing[0]} exists{shipped}: give --force to overwrite it, or another "
                 f"--out; nothing was written")
    torch.set_num_threads(1)
    cfg = LocalTrainConfig(**{**args, "families": tuple(args["families"])})
    record = train_local_coarse(cfg, out, comm=comm, resume=not restart, progress=not quiet,
                                until=until)
    if until is not None and until < cfg.iterations:
        if comm.Get_rank() == 0:
            print(f"stopped after step {until}; the same command without --until resumes")
        return record
    if comm.Get_rank() == 0:
        update_record(out, command=_recorded_command(argv, comm.Get_size()),
                      check=check_iterations(out))
        print(f"wrote {out}: best validation loss {record['best_validation']:.4g} at step "
              f"{record['best_step']}, {record['data_s']:.0f} s data + {record['train_s']:.0f} s "
              f"training on {record['ranks']} ranks")
    return record


if __name__ == "__main__":
    main()
