r"""Training the learned preconditioner inside the Krylov method it serves.

The loss is the energy-norm error left by :math:`k` steps of preconditioned CG with
:math:`M_\theta^{-1}` (:mod:`ddlearn.learned.coarse.basis`), on random exact solutions :math:`x^*`:

.. math:: \mathcal L(\theta) = \frac1B\sum_{b=1}^B \tfrac12
          \log\frac{\|x^*_b - x_k(\theta)\|_A^2}{\|x^*_b\|_A^2},
          \qquad x_k = \mathrm{PCG}_k(A, Ax^*_b, M_\theta^{-1}).

The error of CG after :math:`k` steps is :math:`p_k(M^{-1}_\theta A)\,e_0` for the best polynomial
of degree :math:`k`, so this loss tracks what CG needs (the whole spectrum, extreme eigenvalues
first) instead of a proxy; it needs products with :math:`A` only. :math:`k` defaults to 60 % of
the classical iteration count, where the error is still far above round-off. Everything is
distributed: products with :math:`A` and one-level Schwarz are PETSc operations wrapped as
autograd functions (both symmetric, so the backward is the same operation), inner products and
the Galerkin coarse matrix :math:`\tilde A_0 = \tilde\Phi^TA\tilde\Phi` are all-reduced, and
each rank trains its own subdomains' :math:`\omega_i, Q_i, K_i`.

What is kept is decided by CG itself: every ``eval_every`` steps the current :math:`\tilde\Phi` is
assembled into a PETSc matrix and PETSc CG solves held-out right-hand sides; the state with the
fewest mean iterations wins and ties go to the earlier state, so the result is never worse than
the classical start on those right-hand sides (the *best-state rule*).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from petsc4py import PETSc

from ...nn.comm import shared_sum
from ..operators.distributed import apply_batch, linear_map
from ...classical.krylov import solve
from ...classical.overlapping import asm_pc
from ...classical.twolevel import TwoLevelSchwarz
from ...decomposition.timing import Timer
from .basis import LearnedBasis, petsc_basis
from ...nn.trainer import StopTraining, Trainer, TrainConfig

__all__ = ["PCTrainConfig", "PCTrainResult", "CombinedMethod", "held_out_rhs",
           "held_out_iterations", "train_preconditioner"]


#: iteration limit of the held-out solves; a solve that does not converge counts as this many
EVAL_MAX_IT = 2000
#: training objectives (see :meth:`CombinedMethod.cg_loss`)
OBJECTIVES = ("error", "condition")


@dataclass
class PCTrainConfig:
    """Settings of :func:`train_preconditioner` (options ``-learned_insitu_*`` in the example)."""

    steps: int = 20
    lr: float = 1e-4
    lr_smoothing: float = 0.05
    batch: int = 8
    cg_steps: int | None = None
    objective: str = "error"
    eval_every: int = 2
    eval_rhs: int = 2
    rtol: float = 1e-8
    seed: int = 0
    progress: bool = True

    def __post_init__(self):
        for name in ("steps", "batch", "eval_every", "eval_rhs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not (self.lr > 0 and self.lr_smoothing > 0):
            raise ValueError(f"learning rates must be positive, got {self.lr}, {self.lr_smoothing}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown training objective {self.objective!r}; choose one of "
                             f"{', '.join(OBJECTIVES)}")
        if self.cg_steps is not None and self.cg_steps < 1:
            raise ValueError(f"cg_steps must be >= 1 (or None for automatic), got {self.cg_steps}")


@dataclass
class PCTrainResult:
    initial_iterations: float
    best_iterations: float
    best_step: int
    steps: int
    cg_steps: int
    seconds: float
    stopped: str
    history: dict = field(default_factory=lambda: {"step": [], "loss": [], "iterations": []})

    def record(self) -> dict:
        return asdict(self)


class CombinedMethod:
    r"""The learned preconditioner as differentiable torch code on this rank's rows:
    :math:`A`, one-level Schwarz (PCASM ``basic``) and the Galerkin coarse correction on
    :math:`\tilde\Phi(\theta)`, and PCG unrolled over them (collective throughout)."""

    def __init__(self, basis: LearnedBasis, layout, A: PETSc.Mat):
        self.basis, self.layout, self.A = basis, layout, A
        self.mpi = layout.comm.tompi4py()
        self.asm = asm_pc(A, layout, "basic", "ddlearn_train_local_")
        # both symmetric: the backward is the same operation
        amul, m1 = (lambda X: apply_batch(A, X)), (lambda X: apply_batch(self.asm, X))
        self._A, self._M1 = linear_map(amul, amul), linear_map(m1, m1)

    def dot(self, x, y):
        return shared_sum((x * y).sum(-1), self.mpi)

    def preconditioner(self):
        r"""Returns :math:`r \mapsto M_\theta^{-1} r` for the current parameters. The coarse
        matrix :math:`\tilde A_0` (:math:`n_0 \times n_0`) is all-reduced and factored on every
        rank, which is cheap at training sizes; the PETSc preconditioner solves on the coarse
        rank only."""
        Phit = self.basis()
        A0 = shared_sum(Phit @ self._A(Phit).T, self.mpi)
        L = torch.linalg.cholesky(0.5 * (A0 + A0.T))

        def apply(r):
            c = shared_sum(r @ Phit.T, self.mpi)
            return self._M1(r) + torch.cholesky_solve(c.T, L).T @ Phit

        return apply

    def cg_loss(self, xstar: torch.Tensor, steps: int, objective: str = "error") -> torch.Tensor:
        r"""Loss after ``steps`` of PCG on :math:`Ax = Ax^*` from :math:`x_0 = 0` (``xstar``:
        this rank's rows, ``(B, nlocal)``): ``"error"``, the mean
        :math:`\tfrac12\log(\|e_k\|_A^2/\|e_0\|_A^2)`; ``"condition"``, the mean
        :math:`\log(\theta_{\max}/\theta_{\min})` of the Lanczos matrix :math:`T_k` that the CG
        coefficients define (its Ritz values approximate the extreme eigenvalues of
        :math:`M_\theta^{-1}A`)."""
        M = self.preconditioner()
        b = self._A(xstar)
        x, r = torch.zeros_like(b), b
        z = M(r)
        p, rz = z, self.dot(r, z)
        alphas, betas = [], []
        for k in range(steps):
            Ap = self._A(p)
            alpha = rz / self.dot(p, Ap)
            x = x + alpha[:, None] * p
            alphas.append(alpha)
            if k + 1 < steps:
                r = r - alpha[:, None] * Ap
                z = M(r)
                rz_new = self.dot(r, z)
                betas.append(rz_new / rz)
                p, rz = z + betas[-1][:, None] * p, rz_new
        if objective == "condition":
            a, bt = torch.stack(alphas, 1), torch.stack(betas, 1)           # (B, k), (B, k-1)
            diag = 1 / a
            diag = torch.cat([diag[:, :1], diag[:, 1:] + bt / a[:, :-1]], 1)
            off = torch.sqrt(bt) / a[:, :-1]
            T = torch.diag_embed(diag) + torch.diag_embed(off, 1) + torch.diag_embed(off, -1)
            theta = torch.linalg.eigvalsh(T)
            return torch.log(theta[:, -1] / theta[:, 0]).mean()
        e = xstar - x
        return 0.5 * (torch.log(self.dot(e, self._A(e))) - torch.log(self.dot(xstar, b))).mean()

    def destroy(self):
        self.asm.destroy()


def held_out_rhs(layout, count: int, seed: int) -> list[PETSc.Vec]:
    """``count`` right-hand sides uniform on (-1, 1), drawn in natural ordering (the same for
    every rank count), seeds ``seed + 1000 + j`` so they never coincide with training data."""
    return [layout.from_natural(np.random.default_rng(seed + 1000 + j).uniform(-1, 1, layout.n))
            for j in range(count)]


def held_out_iterations(basis: LearnedBasis, layout, A: PETSc.Mat, rhs, rtol: float = 1e-8,
                        variant: str = "basic", ksp_type: str = "cg") -> list[int]:
    """PETSc Krylov iterations of the learned preconditioner with the current parameters on each
    right-hand side of ``rhs``. A solve that does not converge counts as its iteration limit."""
    Phi_tilde = petsc_basis(basis, layout)
    try:
        def configure(pc):
            pc.setType(PETSc.PC.Type.PYTHON)
            pc.setPythonContext(TwoLevelSchwarz(layout, Phi_tilde, variant))

        its = []
        for b in rhs:
            res = solve(A, b, configure, ksp_type=ksp_type, rtol=rtol, max_it=EVAL_MAX_IT,
                        prefix="ddlearn_eval_")
            its.append(res.iterations if res.converged else EVAL_MAX_IT)
        return its
    finally:
        Phi_tilde.destroy()


def train_preconditioner(basis: LearnedBasis, layout, A: PETSc.Mat,
                         cfg: PCTrainConfig | None = None) -> PCTrainResult:
    r"""Train a distributed learned basis (:func:`~.basis.distributed_basis`: smoothing weights
    :math:`\omega` and the one-level :class:`~ddlearn.learned.operators.distributed.DistributedSchwarzAttention`
    :math:`S_\theta`) inside the learned preconditioner and leave it in its best state by
    held-out CG iterations (collective).

    Every rank draws the same random :math:`x^*` in natural ordering and keeps its rows, so the
    run is the same on any rank count. A step whose :math:`\tilde A_0` is not SPD (or whose loss is
    not finite) ends training with the best state kept.
    """
    cfg = cfg or PCTrainConfig()
    mpi = layout.comm.tompi4py()
    rhs = held_out_rhs(layout, cfg.eval_rhs, cfg.seed)
    method = CombinedMethod(basis, layout, A)
    rows = layout.local_natural()
    gen = np.random.default_rng(cfg.seed)
    dtype = basis.Phi_rows.dtype
    timer = Timer()
    size = mpi.Get_size()

    def loss(step):
        xstar = torch.from_numpy(gen.standard_normal((cfg.batch, layout.n))[:, rows])
        try:
            value = method.cg_loss(xstar.to(dtype), cg_steps, cfg.objective)
        except torch.linalg.LinAlgError:
            # A_0 is replicated bit-identically, so every rank fails together.
            raise StopTraining(f"coarse matrix lost positive definiteness at step {step + 1}; "
                               f"best state kept") from None
        return value / size  # see shared_sum: the replicated loss's gradient is summed

    def iterations():
        return {"iterations": float(np.mean(held_out_iterations(basis, layout, A, rhs,
                                                                cfg.rtol)))}

    # omega moves a whole smoothing step per unit; Q_i, K_i are entries of small corrections
    settings = TrainConfig(steps=cfg.steps, lr=cfg.lr, lr_final=cfg.lr, schedule="constant",
                           eval_every=cfg.eval_every,
                           divergence=math.inf, seed=cfg.seed, progress=cfg.progress)
    trainer = Trainer(basis, settings, loss, iterations, monitor="iterations",
                      communicate=lambda params, value: value * size,
                      params=[{"params": list(basis.S.parameters()), "lr": cfg.lr},
                              {"params": [basis.omega], "lr": cfg.lr_smoothing}],
                      rank=mpi.Get_rank(), desc="training the learned preconditioner")
    try:
        initial = trainer.offer_initial(record=True)["iterations"]
        cg_steps = cfg.cg_steps or max(2, int(round(0.6 * initial)))
        stopped = trainer.run()
        trainer.restore_best()
        timer.lap("train_s")
        seconds = timer.slowest(mpi)["train_s"]
        hist = trainer.history
        return PCTrainResult(initial_iterations=initial, best_iterations=trainer.best.value,
                             best_step=trainer.best.step, steps=trainer.step, cg_steps=cg_steps,
                             seconds=seconds, stopped=stopped,
                             history={"step": hist["step"], "loss": hist["train_loss"],
                                      "iterations": hist["iterations"]})
    finally:
        method.destroy()
        for b in rhs:
            b.destroy()
