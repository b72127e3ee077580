r"""Serial scipy reference implementations of the classical Schwarz operators.

They are the ground truth the PETSc and learned versions are tested against, and scipy users'
preconditioners (:class:`scipy.sparse.linalg.LinearOperator`):

.. math:: M_{AS1}^{-1} = \sum_i R_i^T A_i^{-1} R_i, \qquad
          M_{AS2}^{-1} = M_{AS1}^{-1} + \Phi A_0^{-1}\Phi^T,

with :math:`A_i = R_i A R_i^T` and :math:`A_0 = \Phi^T A \Phi` factored once (sparse LU). The
``restrict`` variant (RAS, nonsymmetric) adds each local solution only on the subdomain's owned
unknowns, :math:`\sum_i \tilde R_i^T A_i^{-1} R_i`, as PETSc's PCASM ``restrict`` does.
"""
from __future__ import annotations

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla

__all__ = ["local_solvers", "coarse_matrix", "one_level", "two_level", "neumann_matrix",
           "spectral_basis"]


def local_solvers(A: sp.spmatrix, dec) -> list:
    """Sparse LU factors of :math:`A_i = R_i A R_i^T` for every subdomain."""
    A = sp.csr_matrix(A)
    return [spla.splu(sp.csc_matrix(A[I][:, I])) for I in dec.subdomains]


def coarse_matrix(A: sp.spmatrix, Phi: sp.spmatrix) -> sp.csr_matrix:
    r""":math:`A_0 = \Phi^T A \Phi`."""
    return sp.csr_matrix(Phi.T @ (A @ Phi))


def _local_operator(A, dec, variant):
    if variant not in ("basic", "restrict"):
        raise ValueError(f"unknown Schwarz variant {variant!r}; choose basic or restrict")
    lus = local_solvers(A, dec)
    keep = [np.isin(I, O) if variant == "restrict" else slice(None)
            for I, O in zip(dec.subdomains, dec.owned)]

    def apply(x):
        y = np.zeros(len(x))
        for I, lu, k in zip(dec.subdomains, lus, keep):
            y[I[k]] += lu.solve(x[I])[k]
        return y

    return apply


def one_level(A: sp.spmatrix, dec, variant: str = "basic") -> spla.LinearOperator:
    r"""One-level additive Schwarz :math:`\sum_i R_i^T A_i^{-1} R_i` (or RAS)."""
    local = _local_operator(A, dec, variant)
    return spla.LinearOperator(A.shape, matvec=lambda x: local(np.ravel(x)), dtype=np.float64)


def two_level(A: sp.spmatrix, dec, Phi: sp.spmatrix,
              variant: str = "basic") -> spla.LinearOperator:
    r"""Two-level additive Schwarz :math:`\sum_i R_i^T A_i^{-1} R_i + \Phi A_0^{-1}\Phi^T`
    (local part RAS with ``variant="restrict"``)."""
    local = _local_operator(A, dec, variant)
    lu0 = spla.splu(sp.csc_matrix(coarse_matrix(A, Phi)))
    Phi = sp.csr_matrix(Phi)

    def matvec(x):
        x = np.ravel(x)
        return local(x) + Phi @ lu0.solve(Phi.T @ x)

    return spla.LinearOperator(A.shape, matvec=matvec, dtype=np.float64)


def neumann_matrix(A: sp.spmatrix, I: np.ndarray) -> sp.csr_matrix:
    r"""Algebraic local Neumann matrix :math:`R_iAR_i^T - \mathrm{diag}(\sum_{j\notin I}
    |a_{kj}|)` (see :mod:`ddlearn.classical.coarse.spectral`)."""
    A = sp.csr_matrix(A)
    rows, Ai = A[I], A[I][:, I]
    outside = (np.asarray(abs(rows).sum(axis=1)).ravel()
               - np.asarray(abs(Ai).sum(axis=1)).ravel())
    return sp.csr_matrix(Ai - sp.diags(outside))


def spectral_basis(A: sp.spmatrix, subdomains, weights, nev: int) -> sp.csr_matrix:
    r"""Dense-eigensolver reference of the spectral coarse space: per subdomain the ``nev``
    largest :math:`\mu` of :math:`DA^NDv = \mu(A^N+10^{-9}\mathrm{diag}A^N)v`, columns
    :math:`R_i^TDv`, shape ``(n, sum of nev)``."""
    cols = []
    for I, D in zip(subdomains, weights):
        AN = neumann_matrix(A, I).toarray()
        shift = np.diag(1e-9 * np.abs(np.diag(AN)))
        mu, V = sla.eigh(D[:, None] * AN * D[None, :], AN + shift)
        V = V[:, np.argsort(mu)[::-1][:min(nev, len(I))]]
        col = np.zeros((A.shape[0], V.shape[1]))
        col[I] = D[:, None] * V
        cols.append(col)
    return sp.csr_matrix(np.hstack(cols))
