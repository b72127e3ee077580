r"""The learned two-level Schwarz preconditioner: Schwarz attention that adapts the coarse space.

.. math::

    M_\theta^{-1} = \sum_i R_i^T A_i^{-1} R_i + \tilde\Phi\,\tilde A_0^{-1}\tilde\Phi^T,
    \qquad \tilde A_0 = \tilde\Phi^T A\,\tilde\Phi,

    \tilde\Phi = \Phi - \Omega\,\Psi + S_\theta\Phi, \qquad
    \Psi = M_{RAS}^{-1} A \Phi, \qquad
    S_\theta = \sum_i R_i^T D_i^{1/2} Q_i K_i^T D_i^{1/2} R_i,

with :math:`M_{RAS}^{-1} = \sum_i \tilde R_i^T A_i^{-1} R_i` restricted additive Schwarz and
:math:`\Omega` diagonal, :math:`\omega_i` on the rows subdomain :math:`i` owns: one learned
Schwarz smoothing step of the basis per subdomain, plus the local part of a one-level
:class:`~ddlearn.nn.operators.SchwarzAttention`. The learned operator does not replace
:math:`A^{-1}`: it corrects the coarse basis subdomain by subdomain, and the coarse operator
stays the Galerkin one. Why this shape (``docs/learned_preconditioner.md``):

- **SPD for any** :math:`\theta`: one-level additive Schwarz (``basic``) is SPD because the
  overlapping subdomains cover every unknown; :math:`\tilde\Phi\tilde A_0^{-1}\tilde\Phi^T` is
  positive semidefinite whenever :math:`\tilde A_0` is SPD, i.e. whenever :math:`\tilde\Phi` has
  full column rank (checked: its Cholesky factorisation fails otherwise). So CG applies and the
  preconditioner is nonsingular, whatever training does.
- **Classical at initialisation**: :math:`\omega = 0`, :math:`Q_i = 0` give :math:`\tilde\Phi = \Phi`, i.e. exactly
  classical two-level additive Schwarz, the iteration count training starts from.
- **Scale respected**: :math:`\tilde\Phi\tilde A_0^{-1}\tilde\Phi^TA` is the :math:`A`-orthogonal
  projection onto :math:`\mathrm{range}\,\tilde\Phi` for every :math:`\theta`; training moves the
  *space*, never the size of the correction, so the largest eigenvalue of :math:`M_\theta^{-1}A`
  stays at most that of one-level Schwarz plus one.
- **Same cost per iteration as classical**: once trained, :math:`\tilde\Phi` is assembled as a
  sparse matrix (support of :math:`\Phi` grown by one ring of subdomains) and applied exactly as
  the classical coarse correction.

The nonsymmetric mode replaces the local part by restricted additive Schwarz (GMRES/FGMRES).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from petsc4py import PETSc

from ...classical.overlapping import asm_pc
from ...classical.reference import one_level, two_level
from ...decomposition import Decomposition
from ...decomposition.coarse import grid_basis
from ...nn.operators import SchwarzAttention
from ..operators.distributed import apply_batch

__all__ = ["INSITU_KIND", "VARIANTS", "learned_meta", "distributed_basis", "gather_smoothing",
           "petsc_basis", "basis_correction_model", "perturb_", "LearnedBasis",
           "aslinearoperator", "describe"]

INSITU_KIND = "learned-two-level"
#: local part of each mode: ``basic`` (SPD, CG) or ``restrict`` (RAS, GMRES/FGMRES)
VARIANTS = {"learned": "basic", "learned_restricted": "restrict"}


def basis_correction_model(dec: Decomposition, r_local: int = 8, seed: int = 0,
                           dtype: str = "float64") -> SchwarzAttention:
    r"""The operator :math:`S_\theta` at its classical start :math:`Q_i = 0` (so
    :math:`\tilde\Phi = \Phi`); the random :math:`K_i` make the gradient in :math:`Q_i`
    nonzero from the first step."""
    model = SchwarzAttention(dec.grid, dec.N, dec.overlap, r_local, coarse=None,
                             symmetric=False, dtype=dtype, seed=seed, boxes=dec.boxes,
                             init_scale=1.0)
    with torch.no_grad():
        model.Q.zero_()
    return model


@torch.no_grad()
def perturb_(S: SchwarzAttention, scale: float, seed: int) -> SchwarzAttention:
    r"""Draw every :math:`Q_i` entry from :math:`\mathcal N(0, \mathrm{scale}^2)` (padding stays
    zero): a basis correction away from the classical start, so that tests and benchmarks
    exercise every learned piece. Returns ``S``."""
    S.Q.normal_(0.0, scale, generator=torch.Generator().manual_seed(seed))
    S.Q.mul_((S.sqrtD > 0)[..., None].to(S.Q.dtype))
    return S


class LearnedBasis(nn.Module):
    r"""The learned coarse basis :math:`\tilde\Phi = \Phi - \Omega\Psi + S_\theta\Phi`, as
    :math:`\tilde\Phi^T` of shape ``(n_0, rows)`` for the rows the caller holds (serially all rows
    in natural ordering; distributed, the rank's owned rows in PETSc ordering).

    Parameters
    ----------
    S : SchwarzAttention or DistributedSchwarzAttention
        One-level basis correction :math:`S_\theta`.
    Phi_rows, Psi_rows : torch.Tensor
        :math:`\Phi^T` and :math:`\Psi^T` on those rows, ``(n_0, rows)``.
    owner : numpy.ndarray
        For each row, the index (into ``omega``) of the subdomain that owns it.
    omega : array_like
        Smoothing weights :math:`\omega_i` of the subdomains held (0 = classical).
    """

    def __init__(self, S, Phi_rows, Psi_rows, owner, omega):
        super().__init__()
        self.S = S
        dt = S.Q.dtype
        self.register_buffer("Phi_rows", Phi_rows.to(dt), persistent=False)
        self.register_buffer("Psi_rows", Psi_rows.to(dt), persistent=False)
        self.register_buffer("owner", torch.as_tensor(owner, dtype=torch.int64), persistent=False)
        self.omega = nn.Parameter(torch.as_tensor(np.asarray(omega, dtype=np.float64)).to(dt))

    def forward(self) -> torch.Tensor:
        return self.Phi_rows - self.omega[self.owner] * self.Psi_rows + self.S(self.Phi_rows)

    @classmethod
    def serial(cls, S: SchwarzAttention, problem, coarse: str = "hats", omega=None):
        """The basis of a serial :math:`S_\\theta` for ``problem`` (natural ordering)."""
        dec = S.dec
        A = problem.matrix()
        Phi = grid_basis(coarse, dec).toarray()
        ras = one_level(A, dec, "restrict")
        Psi = np.stack([ras @ c for c in (A @ Phi).T])
        owner = np.empty(dec.n, dtype=np.int64)
        for i, O in enumerate(dec.owned):
            owner[O] = i
        omega = np.zeros(dec.N) if omega is None else omega
        return cls(S, torch.from_numpy(Phi.T.copy()), torch.from_numpy(Psi), owner, omega)

    def to_scipy(self, drop: float = 0.0) -> sp.csr_matrix:
        r"""Sparse :math:`\tilde\Phi` of a serial basis (natural ordering)."""
        with torch.no_grad():
            dense = self().T.double().numpy()
        dense[np.abs(dense) <= drop] = 0.0
        return sp.csr_matrix(dense)


def aslinearoperator(S: SchwarzAttention, problem, coarse: str = "hats",
                     mode: str = "learned", omega=None):
    r"""The learned preconditioner :math:`M_\theta^{-1}` for serial scipy users, as a
    :class:`scipy.sparse.linalg.LinearOperator` (natural ordering); ``mode="learned"`` is SPD
    (use with :func:`scipy.sparse.linalg.cg`), ``"learned_restricted"`` is for GMRES.
    ``omega``: the smoothing weights (a checkpoint's ``smoothing`` entry; default 0)."""
    if mode not in VARIANTS:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(VARIANTS)}")
    if tuple(problem.grid) != tuple(S.dec.grid):
        raise ValueError(f"the model was trained on grid {S.dec.grid}, not {problem.grid}: "
                         f"train or load a model for this problem")
    basis = LearnedBasis.serial(S, problem, coarse, omega)
    return two_level(problem.matrix(), S.dec, basis.to_scipy(), variant=VARIANTS[mode])


def distributed_basis(S, layout, A: PETSc.Mat, Phi: sp.spmatrix, omega=None) -> LearnedBasis:
    r"""The :class:`LearnedBasis` of a distributed :math:`S_\theta` on this
    rank's rows, with :math:`\Psi = M_{RAS}^{-1}A\Phi` from PETSc (PCASM ``restrict``, all
    columns in one block) and ``omega`` the global smoothing weights (default 0; collective)."""
    Phi_rows = sp.csr_matrix(Phi)[layout.local_natural()].T.toarray()
    ras = asm_pc(A, layout, "restrict", "ddlearn_basis_ras_")
    try:
        Psi_rows = apply_batch(ras, apply_batch(A, Phi_rows))
    finally:
        ras.destroy()
    dec = layout.dec
    sizes = [len(dec.owned[i]) for i in layout.local_subdomains]
    owner = np.repeat(np.arange(len(sizes)), sizes)
    omega = np.zeros(dec.N) if omega is None else np.asarray(omega, dtype=np.float64)
    if omega.shape != (dec.N,):
        raise ValueError(f"smoothing weights of shape {omega.shape} do not fit {dec.N} subdomains")
    return LearnedBasis(S, torch.from_numpy(Phi_rows), torch.from_numpy(Psi_rows), owner,
                        omega[layout.local_subdomains])


def gather_smoothing(basis: LearnedBasis, layout) -> list[float]:
    r"""The global smoothing weights :math:`\omega_1, \dots, \omega_N` on every rank."""
    mine = dict(zip(layout.local_subdomains.tolist(), basis.omega.detach().double().tolist()))
    out = {}
    for part in layout.comm.tompi4py().allgather(mine):
        out.update(part)
    return [out[i] for i in range(layout.dec.N)]


def petsc_basis(basis: LearnedBasis, layout) -> PETSc.Mat:
    r""":math:`\tilde\Phi` as a distributed PETSc matrix (rows in PETSc ordering, all columns on
    the coarse rank, exact zeros dropped; collective)."""
    with torch.no_grad():
        rows = sp.csr_matrix(basis().T.double().numpy())
    rows.eliminate_zeros()
    n0 = rows.shape[1]
    return layout.aij(rows, ncols=n0, col_ranges=layout.coarse_ranges(n0))


def learned_meta(coarse: str, smoothing, layout, A, training: dict | None = None,
                 problem: dict | None = None) -> dict:
    r"""The metadata that makes a Schwarz-attention checkpoint a learned coarse space (kind
    :data:`INSITU_KIND`): the classical coarse space it corrects, the smoothing weights
    :math:`\omega_i`, the fingerprint of the matrix ``A`` (in ``layout``'s ordering) it serves
    (collective; it also tells a PC which numbering a user's matrix is in), the training record
    and the problem. The one place that writes these entries:
    ``model.save(path, **learned_meta(...))`` or ``model.meta.update(learned_meta(...))``."""
    meta = {"preconditioner": INSITU_KIND, "coarse": coarse,
            "smoothing": [float(w) for w in smoothing],
            "fingerprint": layout.fingerprint(A).tolist()}
    if training is not None:
        meta["training"] = training
    if problem is not None:
        meta["problem"] = problem
    return meta


def describe(meta: dict) -> str:
    """One line about a learned preconditioner's training, from its checkpoint metadata."""
    t = meta.get("training") or {}
    if not t:
        return "untrained (classical start)"
    return (f"trained {t.get('steps')} steps, CG iterations on held-out right-hand sides "
            f"{t.get('initial_iterations')} (classical) -> {t.get('best_iterations')} "
            f"(kept state of step {t.get('best_step')})")
