r"""Serial scipy reference implementations of the classical Schwarz operators.

They are the ground truth the PETSc and learned versions are tested against, and scipy users'
preconditioners (:class:`scipy.sparse.linalg.LinearOperator`):

.. math:: M_{AS1}^{-1} = \sum_i R_i^T A_i^{-1} R_i, \qquad
          M_{AS2}^{-1} = M_{AS1}^{-1} + \Phi A_0^{-1}\Phi^T,

with :math:`A_i = R_i A R_i^T` and :math:`A_0 = \Phi^T A \Phi` factored once (sparse LU).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

__all__ = ["local_solvers", "coarse_matrix", "one_level", "two_level"]


def local_solvers(A: sp.spmatrix, dec) -> list:
    """Sparse LU factors of :math:`A_i = R_i A R_i^T` for every subdomain."""
    A = sp.csr_matrix(A)
    return [spla.splu(sp.csc_matrix(A[I][:, I])) for I in dec.subdomains]


def coarse_matrix(A: sp.spmatrix, Phi: sp.spmatrix) -> sp.csr_matrix:
    r""":math:`A_0 = \Phi^T A \Phi`."""
    return sp.csr_matrix(Phi.T @ (A @ Phi))


def _apply_local(dec, lus, x):
    y = np.zeros_like(x)
    for I, lu in zip(dec.subdomains, lus):
        y[I] += lu.solve(x[I])
    return y


def one_level(A: sp.spmatrix, dec) -> spla.LinearOperator:
    r"""One-level additive Schwarz :math:`\sum_i R_i^T A_i^{-1} R_i`."""
    lus = local_solvers(A, dec)
    return spla.LinearOperator(A.shape, matvec=lambda x: _apply_local(dec, lus, x),
                               dtype=np.float64)


def two_level(A: sp.spmatrix, dec, Phi: sp.spmatrix) -> spla.LinearOperator:
    r"""Two-level additive Schwarz :math:`\sum_i R_i^T A_i^{-1} R_i + \Phi A_0^{-1}\Phi^T`."""
    lus = local_solvers(A, dec)
    lu0 = spla.splu(sp.csc_matrix(coarse_matrix(A, Phi)))
    Phi = sp.csr_matrix(Phi)

    def matvec(x):
        x = np.ravel(x)
        return _apply_local(dec, lus, x) + Phi @ lu0.solve(Phi.T @ x)

    return spla.LinearOperator(A.shape, matvec=matvec, dtype=np.float64)
