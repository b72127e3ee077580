r"""GenEO-type spectral coarse space on overlapping subdomains.

Per subdomain :math:`i` the generalized eigenproblem between the local Neumann matrix and its
partition-of-unity-weighted counterpart,

.. math:: A_i^N v = \lambda\, D_i A_i^N D_i\, v,

and the eigenvectors of the smallest :math:`\lambda` (the ``nev`` smallest, or those below a
threshold :math:`\tau`) give coarse vectors :math:`R_i^T D_i v`. CG iterations of the two-level
method then grow like :math:`\sqrt{1/\lambda_{k+1}}` however high the contrast.

*Local Neumann matrix* (algebraic): :math:`A_i^N = R_iAR_i^T - \mathrm{diag}\big(\sum_{j\notin
I_i}|a_{kj}|\big)_{k\in I_i}`, the local block with the couplings that leave the subdomain taken
out of the diagonal. For the finite-difference problems of ddlearn (symmetric M-matrices, row
sums zero in the interior) this *is* the matrix of the diffusion operator on the subdomain with
natural boundary conditions on the cut; on other SPD matrices it is SPSD when :math:`A` is
diagonally dominant, an approximation otherwise (a user-supplied auxiliary matrix, as in PCHPDDM,
or Al Daas–Grigori's SPSD splitting would be exact; not implemented).

*Solve*: both sides may be singular (a floating subdomain), so the pencil is solved as
:math:`D_iA_i^ND_i v = \mu (A_i^N + \varepsilon\,\mathrm{diag}\,A_i^N) v` for the largest
:math:`\mu` (:math:`\lambda \approx 1/\mu`, :math:`\varepsilon = 10^{-9}`). The shift is
relative to each row's own diagonal: a shift relative to the largest entry (first tried) is
invisible in the high-coefficient region and swamps the low one once the contrast reaches 1e8.
With SLEPc (Krylov–Schur, the shift spectral transform factoring the right-hand matrix once by
Cholesky) on ``COMM_SELF`` per subdomain, or scipy's ARPACK with the same factorisation.
"""
from __future__ import annotations

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from petsc4py import PETSc
from slepc4py import SLEPc

from ..decomposition.collective import collective_check
from ..decomposition.layout import sequential_aij

__all__ = ["EIGENSOLVERS", "SpectralSettings", "neumann_matrices", "local_eigenvectors",
           "spectral_entries", "local_columns", "regularised_pencil"]

EIGENSOLVERS = ("slepc", "scipy")


class SpectralSettings:
    """``nev`` eigenvectors per subdomain at most; with ``threshold`` > 0 only those with
    :math:`\\lambda < \\tau` among them; ``tol`` of the eigensolver."""

    def __init__(self, nev: int = 8, threshold: float = 0.0, eigensolver: str = "slepc",
                 tol: float = 1e-10):
        if int(nev) != nev or nev < 1:
            raise ValueError(f"-ddlearn_spectral_nev must be a positive integer, got {nev!r}")
        if threshold < 0:
            raise ValueError(f"-ddlearn_spectral_threshold must be positive (or 0 for 'the nev "
                             f"smallest'), got {threshold!r}")
        if eigensolver not in EIGENSOLVERS:
            raise ValueError(f"unknown -ddlearn_spectral_eigensolver {eigensolver!r}; choose one "
                             f"of {', '.join(EIGENSOLVERS)}")
        self.nev, self.threshold, self.eigensolver, self.tol = int(nev), threshold, eigensolver, tol

    def describe(self) -> dict:
        return {"nev": self.nev, "threshold": self.threshold, "eigensolver": self.eigensolver}


def _abs_offdiagonal_sums(A: PETSc.Mat) -> PETSc.Vec:
    r""":math:`\sum_{j\ne k}|a_{kj}|` for this rank's rows, as a distributed vector."""
    indptr, indices, values = A.getValuesCSR()
    lo, hi = A.getOwnershipRange()
    rows = np.repeat(np.arange(lo, hi), np.diff(indptr))
    off = np.where(indices != rows, np.abs(values), 0.0)
    t = A.createVecLeft()
    t.setArray(np.add.reduceat(off, indptr[:-1]) if len(off) else np.zeros(hi - lo))
    return t


def neumann_matrices(A: PETSc.Mat, subdomains) -> list[sp.csr_matrix]:
    r"""The algebraic local Neumann matrices :math:`A_i^N` of this rank's subdomains (scipy,
    local numbering = sorted :math:`I_i`; collective)."""
    sets = subdomains.index_sets(True)
    blocks = A.createSubMatrices(sets, sets) if sets else []
    t = _abs_offdiagonal_sums(A)
    flat = np.concatenate(subdomains.overlapping) if sets else np.zeros(0, dtype=np.int64)
    gather = PETSc.IS().createGeneral(flat.astype(PETSc.IntType), comm=PETSc.COMM_SELF)
    local = PETSc.Vec().createSeq(len(flat), comm=PETSc.COMM_SELF)
    scatter = PETSc.Scatter().create(t, gather, local, None)
    scatter.scatter(t, local, PETSc.InsertMode.INSERT, PETSc.ScatterMode.FORWARD)
    outside_all = local.getArray(readonly=True).copy()
    for o in (t, gather, local, scatter, *sets):
        o.destroy()
    out, start = [], 0
    for block in blocks:
        Ai = sp.csr_matrix(block.getValuesCSR()[::-1], shape=block.getSize())
        block.destroy()
        n = Ai.shape[0]
        inside = np.asarray(abs(Ai).sum(axis=1)).ravel() - np.abs(Ai.diagonal())
        outside = outside_all[start:start + n] - inside
        start += n
        out.append((Ai - sp.diags(outside)).tocsr())
    return out


def _slepc(B: sp.csr_matrix, M: sp.csr_matrix, nev: int, tol: float, prefix: str):
    Bp, Mp = sequential_aij(B), sequential_aij(M)
    eps = SLEPc.EPS().create(comm=PETSc.COMM_SELF)
    eps.setOperators(Bp, Mp)
    eps.setProblemType(SLEPc.EPS.ProblemType.GHEP)
    eps.setWhichEigenpairs(SLEPc.EPS.Which.LARGEST_REAL)
    eps.setDimensions(nev)
    eps.setTolerances(tol, 1000)
    ksp = eps.getST().getKSP()
    ksp.setType(PETSc.KSP.Type.PREONLY)
    ksp.getPC().setType(PETSc.PC.Type.CHOLESKY)
    eps.setOptionsPrefix(prefix)  # SLEPc adds eps_: -ddlearn_spectral_eps_max_it, ..._eps_type
    eps.setFromOptions()
    eps.solve()
    found = eps.getConverged()
    mu, V = np.zeros(min(found, nev)), np.zeros((B.shape[0], min(found, nev)))
    vr = Bp.createVecRight()
    for k in range(len(mu)):
        mu[k] = eps.getEigenpair(k, vr).real
        V[:, k] = vr.getArray(readonly=True)
    for o in (eps, Bp, Mp, vr):
        o.destroy()
    return mu, V


def _scipy(B: sp.csr_matrix, M: sp.csr_matrix, nev: int, tol: float, prefix: str):
    n = B.shape[0]
    if nev >= n - 1:  # ARPACK needs k < n: small subdomains are solved densely
        mu, V = sla.eigh(B.toarray(), M.toarray())
    else:
        lu = spla.splu(sp.csc_matrix(M))
        Minv = spla.LinearOperator(M.shape, matvec=lu.solve, dtype=np.float64)
        mu, V = spla.eigsh(B, k=nev, M=M, Minv=Minv, which="LA", tol=tol,
                           v0=np.ones(n))
    order = np.argsort(mu)[::-1][:nev]
    return mu[order], V[:, order]


#: relative diagonal shift of the Neumann matrix on the right-hand side of the pencil
_REGULARISATION = 1e-9


def regularised_pencil(AN: sp.csr_matrix, D: np.ndarray):
    r"""``(B, M)`` = :math:`(D A^N D,\ A^N + \varepsilon\,\mathrm{diag} A^N)`: the pencil
    :math:`Bv = \mu Mv` whose largest :math:`\mu` are the smallest :math:`\lambda = 1/\mu`."""
    return ((sp.diags(D) @ AN @ sp.diags(D)).tocsr(),
            (AN + sp.diags(_REGULARISATION * np.abs(AN.diagonal()))).tocsr())


def local_eigenvectors(AN: sp.csr_matrix, D: np.ndarray, settings: SpectralSettings,
                       prefix: str = "ddlearn_spectral_"):
    r"""``(lambda, V)``: the kept eigenpairs of :math:`A^N v = \lambda DA^ND v`, smallest
    first, ``V`` with :math:`v^T(A^N+\varepsilon I)v = 1`. SLEPc reads its options with
    ``prefix`` (``-{prefix}eps_max_it``, ...)."""
    B, M = regularised_pencil(AN, D)
    nev = min(settings.nev, AN.shape[0])
    solve = _slepc if settings.eigensolver == "slepc" else _scipy
    mu, V = solve(B, M, nev, settings.tol, prefix)
    lam = 1.0 / np.maximum(mu, 1e-300)
    keep = lam < settings.threshold if settings.threshold > 0 else np.ones(len(lam), bool)
    return lam[keep], V[:, keep]


def spectral_entries(A: PETSc.Mat, subdomains, settings: SpectralSettings, first_column: int = 0,
                     prefix: str = "ddlearn_spectral_"):
    r"""This rank's entries ``(rows, cols, vals)`` of the spectral coarse vectors
    :math:`R_i^TD_iv` (global rows, columns numbered subdomain by subdomain from
    ``first_column``), the total number of columns, and the kept eigenvalues of this rank's
    subdomains ``{i: lambda}`` (collective). A subdomain whose eigensolve did not give what was
    asked stops the set-up on every rank, naming it: never a silently partial coarse space."""
    comm = A.getComm()
    found, problems = {}, []
    for i, I, D, AN in zip(subdomains.ids, subdomains.overlapping, subdomains.weights,
                           neumann_matrices(A, subdomains)):
        try:
            lam, V = local_eigenvectors(AN, D, settings, prefix)
        except (PETSc.Error, RuntimeError, spla.ArpackNoConvergence) as e:
            problems.append(f"subdomain {int(i)}: {e}")
            continue
        if settings.threshold == 0 and V.shape[1] < min(settings.nev, len(I)):
            problems.append(f"subdomain {int(i)}: {V.shape[1]} of {settings.nev} eigenpairs "
                            f"converged")
        found[int(i)] = (I, D, lam, V)
    collective_check(comm, not problems,
                     "the spectral coarse space's eigensolve failed on " + "; ".join(problems)
                     + ": try the other -ddlearn_spectral_eigensolver, a smaller "
                     "-ddlearn_spectral_nev, a looser -ddlearn_spectral_tol or more "
                     "-ddlearn_spectral_eps_max_it")
    rows, cols, vals, k = local_columns(comm, subdomains.N,
                                        {i: (I, D, V) for i, (I, D, _, V) in found.items()},
                                        first_column)
    return rows, cols, vals, k, {i: f[2] for i, f in found.items()}


def local_columns(comm, N: int, found: dict, first_column: int = 0):
    r"""Entries ``(rows, cols, vals)`` of the coarse vectors :math:`R_i^TD_iV_i` of this rank's
    subdomains ``found = {i: (I_i, D_i, V_i)}`` (global rows; columns numbered subdomain by
    subdomain from ``first_column``, so every rank agrees on them) and the total number of
    columns (collective over the ``N`` subdomains)."""
    counts = {}
    for part in comm.tompi4py().allgather({i: f[2].shape[1] for i, f in found.items()}):
        counts.update(part)
    offsets = first_column + np.concatenate([[0], np.cumsum([counts[i] for i in range(N)])])
    rows, cols, vals = [], [], []
    for i, (I, D, V) in found.items():
        k = V.shape[1]
        rows.append(np.repeat(I, k))
        cols.append(np.tile(np.arange(offsets[i], offsets[i] + k), len(I)))
        vals.append((D[:, None] * V).ravel())
    cat = (lambda x: np.concatenate(x) if x else np.zeros(0))  # noqa: E731
    return (cat(rows).astype(np.int64), cat(cols).astype(np.int64), cat(vals),
            int(offsets[-1] - first_column))
