"""Learned methods for the comparison harness: train them on the case at hand or load the cached
checkpoint made for exactly that case.

- ``learned``: the learned two-level preconditioner (:mod:`ddlearn.learned.coarse.basis`), trained inside
  PETSc CG (:func:`ddlearn.learned.coarse.pc_training.train_preconditioner`).
- ``attention``: the paper-form Schwarz attention operator alone (symmetric variant, so CG
  can run it), trained to approximate :math:`A^{-1}` on Fourier data as in the paper
  (:func:`ddlearn.learned.operators.training.train`), all distributed.

A checkpoint's file name carries the problem, decomposition, coarse space and a hash of every
training setting, and loading re-checks problem and configuration, so a cache hit is always a
model trained for this very case. Files are written atomically (a crash leaves no half file).

The ``configure_*`` functions set a learned method's PC up from its checkpoint; the registry
(:data:`ddlearn.harness.methods.METHODS`) names them and this module, which loads torch, is
imported when a learned method runs.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field

import numpy as np
import scipy.sparse as sp
from petsc4py import PETSc

from ddlearn.nn.operators import SchwarzAttention
from ddlearn.learned.coarse.basis import (INSITU_KIND, basis_correction_model, distributed_basis,
                                   gather_smoothing, learned_meta)
from ddlearn.learned.operators.data import make_splits
from ddlearn.learned.operators.distributed import DistributedSchwarzAttention, PetscExactSolver
from ddlearn.learned.coarse.pc_training import PCTrainConfig, train_preconditioner
from ddlearn.decomposition.timing import Timer
from ddlearn.learned.operators.training import fit_scale, train
from ddlearn.nn import checkpoint as nn_checkpoint
from ddlearn.nn.trainer import TrainConfig
from ddlearn.classical.twolevel import TwoLevelSchwarz
from ddlearn.learned.coarse.learned_insitu import LearnedInsitu
from ddlearn.learned.operators import checkpoint
from ddlearn.pc import SchwarzAttentionPC, TwoLevelSchwarzPC

__all__ = ["LearnedSettings", "learned_preconditioner", "attention_operator", "cache_path",
           "configure_attention", "attention_enrichment", "configure_attention_coarse",
           "configure_learned_insitu"]


@dataclass
class LearnedSettings:
    """What the learned methods train (options ``-learned_insitu_*``, ``-attention_*``, ``-cache``)."""

    cache: str = ".ddlearn-cache"
    r_local: int = 8
    train: PCTrainConfig = field(default_factory=PCTrainConfig)
    attention_rank: int = 4
    attention_steps: int = 100
    attention_samples: int = 64
    seed: int = 0

    @classmethod
    def from_options(cls, opts: PETSc.Options, progress: bool = True) -> "LearnedSettings":
        d = PCTrainConfig()
        return cls(
            cache=opts.getString("cache", cls.cache),
            r_local=opts.getInt("learned_insitu_rank", cls.r_local),
            train=PCTrainConfig(steps=opts.getInt("learned_insitu_steps", d.steps),
                                lr=opts.getReal("learned_insitu_lr", d.lr),
                                lr_smoothing=opts.getReal("learned_insitu_lr_smoothing",
                                                          d.lr_smoothing),
                                batch=opts.getInt("learned_insitu_batch", d.batch),
                                cg_steps=opts.getInt("learned_insitu_cg_steps", 0) or None,
                                objective=opts.getString("learned_insitu_objective",
                                                         d.objective),
                                eval_every=opts.getInt("learned_insitu_eval_every",
                                                       d.eval_every),
                                eval_rhs=opts.getInt("learned_insitu_eval_rhs", d.eval_rhs),
                                seed=opts.getInt("learned_insitu_seed", d.seed),
                                progress=progress),
            attention_rank=opts.getInt("attention_rank", cls.attention_rank),
            attention_steps=opts.getInt("attention_steps", cls.attention_steps),
            attention_samples=opts.getInt("attention_samples", cls.attention_samples))


def cache_path(case, kind: str, settings: dict, cache: str) -> str:
    """Checkpoint file for ``kind`` trained with ``settings`` on ``case``. The checkpoint
    format's version is part of the key: a cache filled by an earlier format is never read
    (its files keep their names and are simply not looked up), the model is trained again."""
    p, dec = case.problem, case.dec
    key = json.dumps({"problem": p.describe(), "overlap": dec.overlap, "boxes": list(dec.boxes),
                      "coarse": case.coarse, "format": nn_checkpoint.VERSION, **settings},
                     sort_keys=True, default=str)
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    grid = "x".join(map(str, p.grid))
    return os.path.join(cache, f"{p.name}-{grid}-N{dec.N}-o{dec.overlap}-{case.coarse}-"
                               f"{kind}-{digest}.pt")


def _cached(path: str, comm, expect: dict, kind: str | None = None) -> bool:
    """Whether ``path`` holds a checkpoint made for this case (configuration ``expect`` and
    learned-preconditioner ``kind``), checked on every rank."""
    if not comm.tompi4py().bcast(os.path.exists(path), root=0):
        return False
    model = DistributedSchwarzAttention.load(path, comm=comm, **expect)
    ok = model.meta.get("preconditioner") == kind
    model.destroy()
    return ok


def learned_preconditioner(case, settings: LearnedSettings):
    """``(checkpoint, train_seconds)`` for the learned preconditioner of ``case``: from the
    cache (0 s) or trained now and cached (collective)."""
    comm = case.layout.comm
    cfg = settings.train
    key = {"r_local": settings.r_local, **{k: v for k, v in asdict(cfg).items()
                                           if k != "progress"}}
    path = cache_path(case, "learned", key, settings.cache)
    if _cached(path, comm, {"N": case.dec.N, "overlap": case.dec.overlap,
                            "r_local": settings.r_local, "grid": list(case.dec.grid)}, INSITU_KIND):
        PETSc.Sys.Print(f"    loaded {path}")
        return path, 0.0
    timer = Timer()
    model = DistributedSchwarzAttention(basis_correction_model(case.dec, settings.r_local,
                                                               cfg.seed), comm)
    basis = distributed_basis(model, case.layout, case.A, case.Phi)
    result = train_preconditioner(basis, case.layout, case.A, cfg)
    timer.lap("train_s")
    seconds = timer.slowest(comm)["train_s"]
    PETSc.Sys.Print(f"    trained {result.steps} steps in {seconds:.1f} s: held-out CG "
                    f"iterations {result.initial_iterations:g} (classical) -> "
                    f"{result.best_iterations:g} ({result.stopped})")
    model.save(path, **learned_meta(case.coarse, gather_smoothing(basis, case.layout),
                                    case.layout, case.A, result.record(),
                                    case.problem.describe()))
    model.destroy()
    return path, seconds


def attention_operator(case, settings: LearnedSettings):
    """``(checkpoint, train_seconds)``: the paper-form operator (symmetric variant) trained on
    Fourier data with exact targets, from the cache or trained now (collective)."""
    comm = case.layout.comm
    cfg = TrainConfig(steps=settings.attention_steps, batch_size=16, lr=1e-3,
                      eval_every=max(1, settings.attention_steps // 10),
                      progress=settings.train.progress, seed=settings.seed)
    key = {"r_local": settings.attention_rank, "samples": settings.attention_samples,
           "steps": cfg.steps, "seed": cfg.seed, "lr": cfg.lr, "init": "fit_scale"}
    path = cache_path(case, "attention", key, settings.cache)
    expect = {"N": case.dec.N, "overlap": case.dec.overlap, "grid": list(case.dec.grid),
              "r_local": settings.attention_rank, "coarse": case.coarse}
    if _cached(path, comm, expect):
        PETSc.Sys.Print(f"    loaded {path}")
        return path, 0.0
    timer = Timer()
    serial = SchwarzAttention(case.dec.grid, case.dec.N, case.dec.overlap,
                              settings.attention_rank, coarse=case.coarse, symmetric=True,
                              seed=settings.seed, boxes=case.dec.boxes)
    model = DistributedSchwarzAttention(serial, comm)
    del serial
    solver = PetscExactSolver(case.A)
    try:
        modes = max(1, min(64, min(case.dec.grid) // 4))
        splits = make_splits(case.problem, settings.attention_samples, 16, 16, modes=modes,
                             seed=settings.seed, rows=case.layout.local_natural(),
                             solve=solver)
    finally:
        solver.destroy()
    fit_scale(model, splits.train, comm=comm.tompi4py())
    result = train(model, splits, cfg, comm=comm.tompi4py())
    timer.lap("train_s")
    seconds = timer.slowest(comm)["train_s"]
    PETSc.Sys.Print(f"    trained {result.steps} steps in {seconds:.1f} s: validation error "
                    f"{result.best_val:.3g}")
    model.save(path, problem=case.problem.describe(), data=splits.meta)
    model.destroy()
    return path, seconds


def configure_attention(pc, case, path):
    """The trained paper-form operator alone as the PC (``attention``)."""
    pc.setType(PETSc.PC.Type.PYTHON)
    pc.setPythonContext(SchwarzAttentionPC(path=path, mode="attention"))


def attention_enrichment(path: str, case) -> sp.csr_matrix:
    r"""The trained paper-form operator's local factors as coarse vectors,
    :math:`[\Phi \mid R_i^TD_i^{1/2}Q_i]_i` (natural numbering): two-level Schwarz with this
    Galerkin coarse space is SPD whatever the training did, while the operator itself is
    singular (rank :math:`\le \sum_i r_i + r_0 < n`)."""
    # the problem check refuses a checkpoint of another problem, grid or dimension
    model, _ = checkpoint.load(path, problem=case.problem.describe())
    idx, sqrtD, Q = model.idx.numpy(), model.sqrtD.numpy(), model.Q.detach().numpy()
    keep = sqrtD > 0
    cols = [sp.csr_matrix(((sqrtD[i, keep[i], None] * Q[i, keep[i]]).ravel(),
                           (np.repeat(idx[i, keep[i]], Q.shape[2]),
                            np.tile(np.arange(Q.shape[2]), keep[i].sum()))),
                          shape=(case.dec.n, Q.shape[2])) for i in range(case.dec.N)]
    return sp.hstack([case.Phi, *cols]).tocsr()


def configure_attention_coarse(pc, case, path):
    """Two-level Schwarz with :func:`attention_enrichment` as coarse space (``attention-coarse``)."""
    pc.setType(PETSc.PC.Type.PYTHON)
    pc.setPythonContext(TwoLevelSchwarz(case.layout, case.layout.phi(
        attention_enrichment(path, case)), "basic"))


def configure_learned_insitu(pc, case, path):
    """The in-situ learned coarse space of the checkpoint (``learned_insitu``)."""
    pc.setType(PETSc.PC.Type.PYTHON)
    pc.setPythonContext(TwoLevelSchwarzPC(LearnedInsitu(path)))
