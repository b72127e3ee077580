r"""Unassembled operators (PETSc's ``MATIS``): each process keeps the matrix of its own elements,
``A = \sum_p L_p^T A_p^N L_p`` with :math:`L_p` the process's local-to-global map — the format
PCBDDC, PCHPDDM and FETI-DP read, and what GenEO needs, since :math:`A_p^N` *is* the Neumann
matrix of the process's subdomain.

The PC takes one subdomain per process, as PCHPDDM does with a ``MATIS``: the rows
:math:`L_p` of its local matrix grown by ``-ddlearn_overlap`` layers (at least one) of the
assembled matrix's graph, so that the partition of unity, zero on the grown subdomain's
boundary, is one half (one over the multiplicity) on the rows the processes share; its Neumann
matrix is :math:`A_p^N` padded with zero rows and columns on the added layers (the elements of
those layers belong to other processes, whose energy the subdomain does not own). The one-level
blocks and :math:`\Phi^TA\Phi` come from the assembled matrix
(:func:`~ddlearn.decomposition.petsc_rows.assembled_aij`).

Several subdomains per process are refused: an unassembled matrix holds one Neumann matrix
per process, and a sub-block of it is not the Neumann matrix of a smaller subdomain (the
elements of the cut are not in it). A program that has several per process hands their Neumann
matrices itself (:func:`ddlearn.pc.set_subdomains`, :func:`ddlearn.pc.set_auxiliary_matrices`).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from petsc4py import PETSc

from ..decomposition.collective import collective_check
from ..decomposition.petsc_rows import assembled_aij
from ..decomposition.parallel_partition import DistributedGraph, grow_overlap_parallel
from ..decomposition.subdomains import node_dofs

__all__ = ["is_unassembled", "check_unassembled", "local_rows", "local_neumann", "neumann_on"]


def is_unassembled(P: PETSc.Mat) -> bool:
    """Whether ``P`` is a ``MATIS`` (the same answer on every rank)."""
    return P.getType() == PETSc.Mat.Type.IS


def check_unassembled(P: PETSc.Mat, settings, user_sets: bool, prefix: str) -> None:
    """Refuse, on every rank, what an unassembled ``P`` cannot serve: local matrices that are
    not square on one local-to-global map, several subdomains per process, a partitioner, the
    user's own subdomains, no overlap (collective)."""
    comm = P.getComm()
    rows, cols = P.getLGMap()
    same = np.array_equal(rows.getIndices(), cols.getIndices())
    local = P.getISLocalMat()
    square = local.getSize()[0] == local.getSize()[1] and same
    collective_check(comm, square,
                     f"the MATIS operator's local matrix on this rank is {local.getSize()[0]} x "
                     f"{local.getSize()[1]} with {'the same' if same else 'different'} row and "
                     f"column maps: a subdomain's Neumann matrix is square, on one "
                     f"local-to-global map for rows and columns (MatCreateIS with rmap = cmap)")
    r = local_rows(P)
    collective_check(comm, len(np.unique(r)) == len(r) and (len(r) == 0 or r.min() >= 0),
                     "the MATIS operator's local-to-global map repeats a global row, or leaves "
                     "one without, on this rank: number each local row of a process's local "
                     "matrix as a distinct global row")
    size = comm.getSize()
    collective_check(comm, settings.subdomains in (None, size),
                     f"-{prefix}subdomains {settings.subdomains} with a MATIS operator: its "
                     f"subdomains are its {size} processes' local matrices (one Neumann matrix "
                     f"each; a block of it is not a smaller subdomain's). Drop the option, or "
                     f"run on {settings.subdomains} processes, or hand several subdomains per "
                     f"process with their Neumann matrices (ddlearn.pc.set_subdomains + "
                     f"set_auxiliary_matrices) on an assembled matrix")
    collective_check(comm, settings.partition is None,
                     f"-{prefix}partition {settings.partition} with a MATIS operator: the "
                     f"subdomains are the processes' local matrices; drop the option")
    collective_check(comm, not user_sets,
                     "subdomains were set (ddlearn.pc.set_subdomains) on a MATIS operator, whose "
                     "subdomains are its processes' local matrices: drop the call, or give an "
                     "assembled matrix")
    collective_check(comm, settings.overlap >= 1,
                     f"-{prefix}overlap {settings.overlap} with a MATIS operator: the partition "
                     f"of unity vanishes on a subdomain's boundary, which for the bare local "
                     f"rows is the interface the processes share; use -{prefix}overlap 1 or more")


def local_rows(P: PETSc.Mat) -> np.ndarray:
    """The global row of each row of ``P``'s local matrix: the operator's local-to-global map,
    through the local matrix's own map where it has one. PETSc gives the local matrix such a
    map when the operator's map has unused (negative) or repeated entries, as a DMDA's
    ``MATIS`` does (its ghosted points, of which the local matrix keeps those its elements
    touch): it takes an index of the operator's map to a row of the local matrix (-1: none)."""
    L = P.getLGMap()[0].getIndices().astype(np.int64)
    local = P.getISLocalMat()
    own = local.getLGMap()[0]
    if own.handle:
        into = own.getIndices()
        rows = np.full(local.getSize()[0], -1, dtype=np.int64)
        keep = into >= 0
        rows[into[keep]] = L[keep]
        L = rows
    return L


def local_neumann(P: PETSc.Mat, A: PETSc.Mat, overlap: int) -> tuple[np.ndarray, sp.csr_matrix]:
    r"""``(I, A^N)``: this process's subdomain — the rows :math:`L_p` of its local matrix grown by
    ``overlap`` layers of ``A``'s graph (``A``: ``P`` assembled; on the nodes for block size > 1),
    sorted — and its Neumann matrix on ``I`` (:func:`neumann_on`) (collective)."""
    bs = P.getBlockSize()
    graph = DistributedGraph.from_matrix(A, bs)
    nodes = np.unique(local_rows(P) // bs)
    I = node_dofs(grow_overlap_parallel(graph, [nodes], int(overlap))[0], bs)
    return I, neumann_on(P, I)


def neumann_on(P: PETSc.Mat, I: np.ndarray) -> sp.csr_matrix:
    r""":math:`A_p^N` on the sorted rows ``I`` (which hold :math:`L_p`): the process's local
    matrix in the rows of :math:`L_p`, zero on the others; what a values-only update re-reads
    (the subdomain stays)."""
    L = local_rows(P)
    local = P.getISLocalMat()
    aij = assembled_aij(local)  # an SBAIJ local matrix stores half of its entries
    indptr, indices, values = aij.getValuesCSR()
    if aij.handle != local.handle:
        aij.destroy()
    at = np.searchsorted(I, L)
    AN = sp.csr_matrix((values, indices, indptr), shape=(len(L), len(L))).tocoo()
    return sp.csr_matrix((AN.data, (at[AN.row], at[AN.col])), shape=(len(I), len(I)))
