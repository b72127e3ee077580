r"""One symbolic factorisation per subdomain for the local solve and the spectral eigensolve.

Per subdomain :math:`i` two matrices of one sparsity pattern are factored: the Dirichlet block
:math:`A_i = R_iAR_i^T` of the one-level part, and the right-hand matrix of the spectral
pencil, :math:`M_i = A_i^N + \varepsilon\,\mathrm{diag}A_i^N`
(:func:`~ddlearn.classical.neumann.regularised_pencil`), which the eigensolver's spectral
transform solves with. The algebraic Neumann matrix differs from :math:`A_i` on the diagonal
only, and a user's auxiliary matrix assembled on the subdomain's elements usually has the
block's pattern too. The ordering and the symbolic factorisation depend on the pattern alone,
so one serves both:

1. the one-level PCASM is set up (blocks extracted, local factorisation chosen) and not yet
   factored (:meth:`ddlearn.classical.twolevel.TwoLevelOperator.initialize` or
   :meth:`~ddlearn.classical.twolevel.TwoLevelOperator.update`);
2. per subdomain the block takes :math:`M_i`'s values and its own sub-PC factors it (ordering,
   symbolic, numeric), and the eigensolver's spectral transform solves with that very PC
   (:meth:`LocalBlocks.factored`);
3. the block takes :math:`A_i`'s values back, and the one-level set-up refactors it
   numerically only: PETSc's ``PCSetUp`` sees the same matrix with the same nonzero pattern
   (``SAME_NONZERO_PATTERN``) and keeps the symbolic factor.

PCHPDDM's ``-pc_hpddm_levels_1_st_share_sub_ksp`` shares the whole factorisation where the
Neumann matrix *is* the Dirichlet block; here they differ in their values, so the numeric
factorisation is done twice and the symbolic once. A re-setup on new values of the same matrix
refactors both numerically only.
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import scipy.sparse as sp
from petsc4py import PETSc

__all__ = ["LocalBlocks"]

#: the sub-PC types whose factor is an exact solve the eigensolver can share
_EXACT = ("cholesky", "lu")


class LocalBlocks:
    """The blocks :math:`A_i` of a set-up, not yet factored PCASM (this rank's subdomains, in
    the order of its index sets, rows in the sorted order of :math:`I_i`), lent to a coarse
    space: their values (:meth:`csr`, no second extraction) and their factorisations
    (:meth:`factored`). ``shared`` counts the subdomains whose factorisation was shared."""

    def __init__(self, asm: PETSc.PC):
        self._subs = asm.getASMSubKSP()
        self._csr: dict = {}
        self.shared = 0

    def __len__(self) -> int:
        return len(self._subs)

    def csr(self, k: int) -> sp.csr_matrix:
        r""":math:`A_k` of this rank's ``k``-th subdomain (scipy CSR, sorted indices)."""
        if k not in self._csr:
            block = self._subs[k].getOperators()[1]
            indptr, indices, values = block.getValuesCSR()
            self._csr[k] = sp.csr_matrix((values, indices, indptr), shape=block.getSize())
        return self._csr[k]

    def _on_pattern(self, k: int, M: sp.spmatrix) -> np.ndarray | None:
        """``M``'s values on :math:`A_k`'s pattern, or ``None`` where ``M`` has an entry
        outside it."""
        A = self.csr(k)
        if M.shape != A.shape:
            return None
        M = sp.csr_matrix(M)
        M.sum_duplicates()  # canonical: sorted, unique column indices, as A's
        if np.array_equal(M.indptr, A.indptr) and np.array_equal(M.indices, A.indices):
            return M.data.astype(np.float64)
        rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
        values = np.asarray(M[rows, A.indices], dtype=np.float64).ravel()
        rest = M - sp.csr_matrix((values, A.indices, A.indptr), shape=A.shape)
        return values if rest.count_nonzero() == 0 else None

    @contextmanager
    def factored(self, k: int, M: sp.spmatrix):
        r"""Within the ``with`` block, ``(Mp, ksp)``: the ``k``-th block holding ``M``'s
        values and its sub-KSP, factored; ``(None, None)`` where it cannot be shared (``M`` off
        the block's pattern, a sub-PC that is no factorisation, a failed factorisation): then
        factor ``M`` on its own. On exit the block holds :math:`A_k` again, to be refactored
        (numerically) by the one-level set-up. Not collective (the blocks are
        ``COMM_SELF``)."""
        ksp = self._subs[k]
        values = self._on_pattern(k, M) if ksp.getPC().getType() in _EXACT else None
        if values is None:
            yield None, None
            return
        A, block = self.csr(k), ksp.getOperators()[1]
        indptr, indices = (a.astype(PETSc.IntType) for a in (A.indptr, A.indices))
        block.setValuesCSR(indptr, indices, values)
        block.assemble()
        try:
            try:
                ksp.setUp()
                ok = int(ksp.getPC().getFailedReason()) == 0
            except PETSc.Error:
                ok = False
            if ok:
                self.shared += 1
            yield (block, ksp) if ok else (None, None)
        finally:
            block.setValuesCSR(indptr, indices, A.data)
            block.assemble()
