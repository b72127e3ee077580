r"""The serial partitioners of points and graphs: box grids, recursive coordinate bisection,
METIS, and overlap by graph layers. PETSc-free (numpy, scipy, METIS), so that the token layouts
of :mod:`ddlearn.nn` cut meshes with the same functions as the solver; the collective
partitioners of :mod:`~.partition` use them as their references.

*Which METIS*: the distribution's ``libmetis`` (through :mod:`ctypes`) where it is installed,
else the one :mod:`pymetis` bundles. A PETSc with SuiteSparse links CHOLMOD, which links the
distribution's METIS: in a C program that loads the Python PC (``-python``) that library is
in the global symbol scope, so pymetis's own METIS calls resolve partly into it, and two METIS
versions sharing one heap corrupt it (measured: a 4-rank run hung in ``free`` inside
``METIS_PartGraphKway``). One METIS per process avoids that, and the choice depends on the
machine only, not on what else the process imported, so partitions are reproducible.
"""
from __future__ import annotations

import ctypes
import ctypes.util
from functools import lru_cache

import numpy as np
import pymetis
import scipy.sparse as sp

from .structured import box_grid, split

__all__ = ["box_partition", "rcb_partition", "metis_partition", "grow_overlap"]


def box_partition(coords: np.ndarray, N: int, values=None):
    """Box-grid partition of points: ``(part, axis_index, offsets)`` with ``axis_index[:, a]``
    the position of each point's coordinate among the distinct values of axis ``a``
    (``values[a]``, sorted; by default those of ``coords``, else all ranks' from
    :func:`~.parallel_partition.distinct_values`) and ``offsets[a]`` the split of those values
    into boxes (subdomain ``bx + N_x by``)."""
    grid = box_grid(N, coords.shape[1])
    axis_index, offsets, part, stride = [], [], np.zeros(len(coords), dtype=np.int64), 1
    for a, B in enumerate(grid):
        axis = np.unique(coords[:, a]) if values is None else values[a]
        if B > len(axis):
            raise ValueError(f"{B} boxes along axis {a} but only {len(axis)} distinct "
                             f"coordinates")
        idx = np.searchsorted(axis, coords[:, a])
        off = split(len(axis), B)
        part += stride * (np.searchsorted(off, idx, side="right") - 1)
        axis_index.append(idx)
        offsets.append(off)
        stride *= B
    return part, np.stack(axis_index, axis=1), offsets


def rcb_partition(coords: np.ndarray, N: int) -> np.ndarray:
    """Recursive coordinate bisection into ``N`` parts of sizes proportional to their share of
    ``N``: each cut is across the longest extent, at the matching quantile of the order
    (coordinate, point number). Serial; :func:`~.parallel_partition.rcb_labels` gives the same
    parts with the points spread over ranks."""
    part = np.zeros(len(coords), dtype=np.int64)
    stack = [(np.arange(len(coords)), 0, N)]
    while stack:
        idx, first, count = stack.pop()
        if count == 1:
            part[idx] = first
            continue
        left = count // 2
        pts = coords[idx]
        axis = int(np.argmax(pts.max(axis=0) - pts.min(axis=0)))
        order = idx[np.lexsort((idx, pts[:, axis]))]
        cut = int(round(len(idx) * left / count))
        stack += [(order[:cut], first, left), (order[cut:], first + left, count - left)]
    return part


#: ``METIS_NOPTIONS`` of METIS 5
_METIS_NOPTIONS = 40


@lru_cache(maxsize=1)
def _system_metis():
    """The distribution's METIS 5 (``libmetis.so.5``, 32-bit ``idx_t`` as Debian builds it),
    or ``None`` where it is not installed."""
    name = ctypes.util.find_library("metis")
    return ctypes.CDLL(name) if name else None


def _metis_system(lib, G: sp.csr_matrix, N: int, recursive: bool, vwgt=None,
                  adjwgt=None) -> np.ndarray:
    idx = np.int32
    ptr = lambda a: None if a is None else a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    xadj, adjncy = np.ascontiguousarray(G.indptr, idx), np.ascontiguousarray(G.indices, idx)
    nvtxs, ncon, nparts = (np.array([v], idx) for v in (G.shape[0], 1, N))
    options, objval, part = np.zeros(_METIS_NOPTIONS, idx), np.zeros(1, idx), \
        np.zeros(G.shape[0], idx)
    lib.METIS_SetDefaultOptions(ptr(options))
    call = lib.METIS_PartGraphRecursive if recursive else lib.METIS_PartGraphKway
    status = call(ptr(nvtxs), ptr(ncon), ptr(xadj), ptr(adjncy), ptr(vwgt), None, ptr(adjwgt),
                  ptr(nparts), None, None, ptr(options), ptr(objval), ptr(part))
    if status != 1:  # METIS_OK
        raise RuntimeError(f"METIS failed (status {status}) partitioning a graph of "
                           f"{G.shape[0]} vertices into {N} parts")
    return part.astype(np.int64)


def metis_partition(G: sp.csr_matrix, N: int, vertex_weights: np.ndarray | None = None,
                    edge_weights: bool = False) -> np.ndarray:
    """METIS partition of the graph ``G`` (symmetric, no diagonal) into ``N`` parts: recursive
    bisection for ``N`` <= 8, k-way beyond (METIS's advice, as :mod:`pymetis` does); the
    distribution's METIS where installed (module docstring). ``vertex_weights`` (positive
    integers, one per vertex) are balanced across the parts; with ``edge_weights`` the cut
    weighs ``G``'s values (positive integers) instead of counting edges."""
    if N == 1:
        return np.zeros(G.shape[0], dtype=np.int64)
    G = sp.csr_matrix(G)
    vw = None if vertex_weights is None else np.ascontiguousarray(vertex_weights, np.int32)
    ew = np.ascontiguousarray(G.data, np.int32) if edge_weights else None
    lib = _system_metis()
    if lib is not None:
        return _metis_system(lib, G, N, N <= 8, vw, ew)
    # the bundled METIS: only where the distribution has none
    _, membership = pymetis.part_graph(N, xadj=G.indptr, adjncy=G.indices, vweights=vw,
                                       eweights=ew)
    return np.asarray(membership, dtype=np.int64)


def grow_overlap(G: sp.csr_matrix, part: np.ndarray, N: int, overlap: int) -> sp.csc_matrix:
    r"""Incidence matrix ``(n, N)`` of the overlapping subdomains: column ``i`` marks
    :math:`I_i`, part ``i`` grown by ``overlap`` layers of the graph ``G`` (serial; the
    reference for :func:`~.parallel_partition.grow_overlap_parallel`)."""
    n = len(part)
    S = sp.csr_matrix((np.ones(n, dtype=np.int32), (np.arange(n), part)), shape=(n, N))
    # int32 counts: an int8 product can wrap to 0 on a node with 256 neighbours in I_i
    step = (G + sp.identity(n, dtype=np.int32, format="csr")).astype(np.int32)
    for _ in range(overlap):
        S = ((step @ S) != 0).astype(np.int32)
    return S.tocsc()
