r"""Local Neumann matrices :math:`A_i^N` of the overlapping subdomains: the matrix of the
operator on subdomain :math:`i` with natural boundary conditions on the cut, the left-hand side
of the spectral (GenEO-type) pencils.

- *Auxiliary* (exact): assembled by the user's finite-element code on the subdomains it handed
  the PC (``PCHPDDMSetAuxiliaryMat``; :func:`ddlearn.pc.set_auxiliary_matrices`).
- *Algebraic* (otherwise): :math:`A_i^N = R_iAR_i^T - \mathrm{diag}\big(\sum_{j\notin I_i}
  |a_{kj}|\big)_{k\in I_i}`, the local block with the couplings that leave the subdomain taken
  out of the diagonal. For symmetric M-matrices with zero interior row sums (ddlearn's
  finite-difference problems) this *is* the Neumann matrix; it is SPSD whenever :math:`A` is
  diagonally dominant, nearly so for P1 diffusion on some unstructured meshes (smallest
  scaled eigenvalue -2e-4 to -4e-2), and clearly indefinite (about -1) for
  systems (elasticity): then :func:`neumann_matrices` stops, on every rank, naming the fix,
  instead of handing an eigensolver an indefinite pencil.

Both sides of the pencil may be singular (a floating subdomain), so it is solved regularised,
:func:`regularised_pencil`.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from petsc4py import PETSc

from ..decomposition.collective import collective_check

__all__ = ["neumann_matrices", "algebraic_neumann", "dirichlet_blocks", "regularised_pencil",
           "is_semidefinite", "interior_partition_of_unity", "boolean_partition_of_unity",
           "REGULARISATION", "SEMIDEFINITE_TOL"]

#: relative diagonal shift of the Neumann matrix on the right-hand side of the pencil
REGULARISATION = 1e-9


def _abs_offdiagonal_sums(A: PETSc.Mat) -> PETSc.Vec:
    r""":math:`\sum_{j\ne k}|a_{kj}|` for this rank's rows, as a distributed vector."""
    indptr, indices, values = A.getValuesCSR()
    lo, hi = A.getOwnershipRange()
    rows = np.repeat(np.arange(lo, hi), np.diff(indptr))
    off = np.where(indices != rows, np.abs(values), 0.0)
    t = A.createVecLeft()
    t.setArray(np.add.reduceat(off, indptr[:-1]) if len(off) else np.zeros(hi - lo))
    return t


def dirichlet_blocks(A: PETSc.Mat, subdomains) -> list[sp.csr_matrix]:
    r"""The assembled overlapping blocks :math:`A_i = R_iAR_i^T` of this rank's subdomains
    (scipy, local numbering = sorted :math:`I_i`; collective)."""
    sets = subdomains.index_sets(True)
    blocks = A.createSubMatrices(sets, sets) if sets else []
    out = []
    for s, block in zip(sets, blocks):
        out.append(sp.csr_matrix(block.getValuesCSR()[::-1], shape=block.getSize()))
        block.destroy(), s.destroy()
    return out


def _leaving(A: PETSc.Mat, subdomains, blocks):
    r"""``(leaving, totals)`` per subdomain: :math:`\sum_{j\notin I_i}|a_{kj}|` and
    :math:`\sum_{j\ne k}|a_{kj}|` for :math:`k \in I_i`, the size of the couplings that leave
    the subdomain and of all of them, row by row (collective)."""
    t = _abs_offdiagonal_sums(A)
    totals = subdomains.gather(t)
    t.destroy()
    return [total - (np.asarray(abs(Ai).sum(axis=1)).ravel() - np.abs(Ai.diagonal()))
            for total, Ai in zip(totals, blocks)], totals


def algebraic_neumann(A: PETSc.Mat, subdomains, blocks=None) -> list[sp.csr_matrix]:
    r"""The algebraic :math:`A_i^N` of this rank's subdomains (scipy, local numbering = sorted
    :math:`I_i`; collective); ``blocks``: their :func:`dirichlet_blocks`, if already at hand."""
    blocks = dirichlet_blocks(A, subdomains) if blocks is None else blocks
    return [(Ai - sp.diags(out)).tocsr()
            for Ai, out in zip(blocks, _leaving(A, subdomains, blocks)[0])]


def interior_partition_of_unity(A: PETSc.Mat, subdomains, blocks=None,
                                neumann=None) -> list[np.ndarray]:
    r"""A partition of unity that vanishes on each subdomain's boundary rows (the rows with a
    coupling leaving :math:`I_i`): :math:`D_i = \chi_i / \sum_j R_jR_j^T\chi_j`, :math:`\chi_i`
    the indicator of :math:`I_i`'s interior. With the exact (auxiliary) Neumann matrices this is
    GenEO's: a coarse vector :math:`R_i^TD_iv` then does not reach the elements outside the
    subdomain, whose energy :math:`A_i^N` does not see (collective). With ``neumann`` (the
    Neumann matrices), :math:`\chi_i` is also zero on the rows no energy of :math:`A_i^N`
    reaches (a zero diagonal: a ``MATIS`` process's matrix padded on the overlap layers), where
    :math:`A_i^N v = \lambda D_iA_iD_i v` would otherwise have spurious eigenvalues near 0."""
    blocks = dirichlet_blocks(A, subdomains) if blocks is None else blocks
    chis = [(out <= 1e-12 * np.maximum(total, 1e-300)).astype(np.float64)
            for out, total in zip(*_leaving(A, subdomains, blocks))]
    if neumann is not None:
        chis = [chi * (AN.diagonal() != 0) for chi, AN in zip(chis, neumann)]
    counts = subdomains.summed(A, chis)
    return [np.where(c > 0, chi / np.where(c > 0, c, 1.0), 0.0) for chi, c in zip(chis, counts)]


def boolean_partition_of_unity(subdomains) -> list[np.ndarray]:
    r"""The Boolean partition of unity: :math:`D_i` is 1 on the rows of :math:`I_i` that
    subdomain :math:`i` owns (its non-overlapping part) and 0 on its overlap, so
    :math:`\sum_i R_i^TD_iR_i = I` with every row counted once. Zero on the overlap, it is also
    zero on the subdomain's boundary rows whenever the overlap is at least one layer."""
    return [np.isin(I, O).astype(np.float64)
            for I, O in zip(subdomains.overlapping, subdomains.owned)]


def regularised_pencil(AN: sp.csr_matrix, D: np.ndarray, right: sp.csr_matrix | None = None):
    r"""``(B, M)`` = :math:`(D A^R D,\ A^N + \varepsilon\,\mathrm{diag} A^N)`: the pencil
    :math:`Bv = \mu Mv` whose largest :math:`\mu` are the smallest :math:`\lambda = 1/\mu` of
    :math:`A^Nv = \lambda DA^RDv`, :math:`A^R` = ``right`` (default :math:`A^N`). The shift is
    relative to each row's own diagonal: one relative to the largest entry is invisible in a
    high-coefficient region and swamps a low one at contrast 1e8."""
    right = AN if right is None else right
    shift = np.abs(AN.diagonal())
    # a row no energy of A^N reaches (a coarse level's Neumann matrix summed from the level
    # above's pieces, on a subdomain wider than their supports) takes A^R's diagonal
    shift = np.where(shift > 0, shift, np.abs(right.diagonal()))
    return ((sp.diags(D) @ right @ sp.diags(D)).tocsr(),
            (AN + sp.diags(REGULARISATION * shift)).tocsr())


#: the smallest eigenvalue of the diagonally scaled Neumann matrix that still counts as
#: semidefinite. Measured on the P1 Delaunay client (obtuse angles), channels 1e6: METIS
#: subdomains down to -2e-4, box subdomains down to -4.3e-2, and with the latter the coarse
#: solve of the spectral space fails; 2D elasticity and coupled 2-component systems: -1.05 to -1.2
SEMIDEFINITE_TOL = 1e-2


def is_semidefinite(AN: sp.csr_matrix) -> bool:
    r"""Whether :math:`A^N` is positive semidefinite up to :data:`SEMIDEFINITE_TOL`: whether the
    smallest eigenvalue of :math:`\hat A = \mathrm{diag}(A^N)^{-1/2}A^N\mathrm{diag}(A^N)^{-1/2}`
    (spectrum in :math:`[\lambda_{\min}, 2]`) is at least :math:`-`\ :data:`SEMIDEFINITE_TOL`.
    At once where Gershgorin proves it: :math:`\hat A` is similar to
    :math:`\mathrm{diag}(A^N)^{-1}A^N`, whose discs give :math:`\lambda_{\min} \ge \min_k
    (d_k - \sum_{j\ne k}|a_{kj}|)/d_k` (an M-matrix's algebraic Neumann matrix is dominant up
    to rounding, which at contrast 1e6 reaches :math:`10^{-11}` of a row); else by computing it
    (shift-invert about :math:`-1`)."""
    d = AN.diagonal()
    if np.any(d <= 0):
        return False
    off = np.asarray(abs(AN).sum(axis=1)).ravel() - np.abs(d)
    if np.all(d - off >= -SEMIDEFINITE_TOL * d):
        return True
    s = sp.diags(1.0 / np.sqrt(d))
    scaled = (s @ AN @ s).tocsc()
    if scaled.shape[0] <= 200:
        smallest = np.linalg.eigvalsh(scaled.toarray())[0]
    else:
        smallest = spla.eigsh(scaled, k=1, sigma=-1.0, which="LM", return_eigenvectors=False,
                              tol=1e-4, v0=np.ones(scaled.shape[0]))[0]
    return bool(smallest >= -SEMIDEFINITE_TOL)


def neumann_matrices(A: PETSc.Mat, subdomains, auxiliary=None,
                     what: str = "this coarse space", blocks=None,
                     prefix: str = "ddlearn_") -> list[sp.csr_matrix]:
    r"""The local Neumann matrices of this rank's subdomains: the user's ``auxiliary``
    matrices (already in the sorted order of :math:`I_i`) or, without them, the algebraic ones
    (from ``blocks``, the :func:`dirichlet_blocks`, when given), refused on every rank when one
    of them is indefinite (collective)."""
    comm = A.getComm()
    ANs = auxiliary if auxiliary is not None else algebraic_neumann(A, subdomains, blocks)
    bad = [int(i) for i, a in zip(subdomains.ids, ANs) if not np.all(np.isfinite(a.data))]
    collective_check(comm, not bad, f"the local matrices of subdomain(s) {bad[:8]} have "
                     f"non-finite entries: check the matrix (a NaN or infinite coefficient)")
    if auxiliary is not None:
        bad = [f"subdomain {int(i)}: {a.shape} for {len(I)} rows"
               for i, I, a in zip(subdomains.ids, subdomains.overlapping, auxiliary)
               if a.shape != (len(I), len(I))]
        collective_check(comm, not bad, "an auxiliary (Neumann) matrix does not match its "
                         "subdomain: " + "; ".join(bad) + ": give one square matrix per "
                         "subdomain, of that subdomain's size, in the order of its indices")
        return [sp.csr_matrix(a, dtype=np.float64) for a in auxiliary]
    bad = [int(i) for i, a in zip(subdomains.ids, ANs) if not is_semidefinite(a)]
    collective_check(comm, not bad,
                     f"{what} needs the local Neumann matrices, and the algebraic approximation "
                     f"(exact for M-matrices) is indefinite on subdomain(s) "
                     f"{bad[:8]}{'...' if len(bad) > 8 else ''}: this matrix is not an M-matrix "
                     f"(e.g. elasticity). Hand the PC the subdomains' Neumann matrices from your "
                     f"assembly (ddlearn.pc.set_subdomains + ddlearn.pc.set_auxiliary_matrices, "
                     f"as PCHPDDMSetAuxiliaryMat) or use -{prefix}coarse_space gdsw, rgdsw or "
                     f"nicolaides")
    return ANs
