r"""Overlapping subdomains of *any* assembled matrix, in the matrix's own numbering and row
distribution.

The number of subdomains ``N`` is independent of the number of ranks. The non-overlapping
parts come from

- ``boxes``: coordinates split into a box grid ``N = N_x N_y`` (:func:`~.structured.box_grid`),
  per axis by the sorted distinct coordinate values, so that on a tensor grid the boxes are
  exactly those of :class:`~.structured.Decomposition` (in any ordering of the unknowns);
- ``rcb``: recursive coordinate bisection (any ``N``, any point cloud);
- ``metis``: the matrix graph alone, partitioned by METIS (:mod:`pymetis`),

and each part is grown by :math:`n_\delta` layers of the matrix graph,
:math:`I_i^{(k+1)} = I_i^{(k)} \cup \{j : a_{jl} \ne 0,\ l \in I_i^{(k)}\}`. Multiplicities
:math:`m_j = \#\{i : j \in I_i\}` give the partition of unity :math:`D_i = \mathrm{diag}(1/m_j)`.

The graph and coordinates are gathered on rank 0, which partitions and sends every rank its
subdomains (a subdomain goes to the rank owning most of its rows) and its rows of the coarse
basis. That is simple and exact, and costs :math:`O(\mathrm{nnz})` memory on rank 0: fine to a
few million unknowns, not beyond.
"""
from __future__ import annotations

import numpy as np
import pymetis
import scipy.sparse as sp
from petsc4py import PETSc

from .coarse import hats_on_boxes
from .collective import collective_check
from .structured import box_grid, split

__all__ = ["PARTITIONERS", "Subdomains", "gather_pattern", "box_partition", "rcb_partition",
           "metis_partition", "grow_overlap", "assign_holders", "gather_matrix",
           "scatter_rows"]

PARTITIONERS = ("boxes", "rcb", "metis")


def gather_matrix(A: PETSc.Mat) -> sp.csr_matrix | None:
    """The whole matrix on rank 0 as scipy CSR (``None`` elsewhere; collective)."""
    mpi = A.getComm().tompi4py()
    parts = mpi.gather(A.getValuesCSR(), root=0)
    if mpi.Get_rank() != 0:
        return None
    return sp.vstack([sp.csr_matrix((v, j, i), shape=(len(i) - 1, A.getSize()[1]))
                      for i, j, v in parts]).tocsr()


def scatter_rows(comm, M: sp.csr_matrix | None, ranges) -> sp.csr_matrix:
    """Each rank's rows ``ranges[r]:ranges[r+1]`` of the matrix ``M`` held by rank 0."""
    mpi = comm.tompi4py()
    pieces = [M[ranges[r]:ranges[r + 1]] for r in range(len(ranges) - 1)] \
        if mpi.Get_rank() == 0 else None
    return mpi.scatter(pieces, root=0)


def gather_pattern(A: PETSc.Mat) -> sp.csr_matrix | None:
    """The symmetrised nonzero pattern of ``A`` without its diagonal, on rank 0 (``None``
    elsewhere; collective)."""
    M = gather_matrix(A)
    if M is None:
        return None
    G = (M != 0).astype(np.int8)
    G = ((G + G.T) != 0).astype(np.int8)
    G.setdiag(0)
    G.eliminate_zeros()
    return G.tocsr()


def box_partition(coords: np.ndarray, N: int):
    """Box-grid partition of points: ``(part, axis_index, offsets)`` with ``axis_index[:, a]``
    the position of each point's coordinate among the distinct values of axis ``a`` and
    ``offsets[a]`` the split of those values into boxes (subdomain ``bx + N_x by``)."""
    dim = coords.shape[1]
    boxes = (N,) if dim == 1 else box_grid(N)
    if dim > 2:
        raise ValueError(f"box partitions are implemented in 1D and 2D, got {dim}D coordinates: "
                         f"use -ddlearn_partition rcb or metis")
    axis_index, offsets, part, stride = [], [], np.zeros(len(coords), dtype=np.int64), 1
    for a, B in enumerate(boxes):
        values = np.unique(coords[:, a])
        if B > len(values):
            raise ValueError(f"{B} boxes along axis {a} but only {len(values)} distinct "
                             f"coordinates: use fewer subdomains or -ddlearn_partition rcb/metis")
        idx = np.searchsorted(values, coords[:, a])
        off = split(len(values), B)
        part += stride * (np.searchsorted(off, idx, side="right") - 1)
        axis_index.append(idx)
        offsets.append(off)
        stride *= B
    return part, np.stack(axis_index, axis=1), offsets


def rcb_partition(coords: np.ndarray, N: int) -> np.ndarray:
    """Recursive coordinate bisection into ``N`` parts of sizes proportional to their share of
    ``N``: each cut is across the longest extent, at the matching quantile."""
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
        order = idx[np.argsort(pts[:, axis], kind="stable")]
        cut = int(round(len(idx) * left / count))
        stack += [(order[:cut], first, left), (order[cut:], first + left, count - left)]
    return part


def metis_partition(G: sp.csr_matrix, N: int) -> np.ndarray:
    """METIS k-way partition of the graph ``G`` (symmetric, no diagonal) into ``N`` parts."""
    if N == 1:
        return np.zeros(G.shape[0], dtype=np.int64)
    _, membership = pymetis.part_graph(N, adjacency=pymetis.CSRAdjacency(G.indptr, G.indices))
    return np.asarray(membership, dtype=np.int64)


def grow_overlap(G: sp.csr_matrix, part: np.ndarray, N: int, overlap: int) -> sp.csc_matrix:
    r"""Incidence matrix ``(n, N)`` of the overlapping subdomains: column ``i`` marks
    :math:`I_i`, part ``i`` grown by ``overlap`` layers of the graph ``G``."""
    n = len(part)
    S = sp.csr_matrix((np.ones(n, dtype=np.int8), (np.arange(n), part)), shape=(n, N))
    step = (G + sp.identity(n, dtype=np.int8, format="csr")).astype(np.int8)
    for _ in range(overlap):
        S = ((step @ S) != 0).astype(np.int8)
    return S.tocsc()


def assign_holders(owned, ranges) -> np.ndarray:
    """The rank holding each subdomain: the one that owns most of its rows, then, for a rank
    left without any (PCASM needs a block on every rank), the subdomain with most rows there
    taken from a rank that holds several. Needs ``len(owned) >= ranks``."""
    P = len(ranges) - 1
    n = int(ranges[-1])
    row_rank = np.searchsorted(ranges, np.arange(n), side="right") - 1
    share = np.stack([np.bincount(row_rank[o], minlength=P) for o in owned])  # (N, P)
    holder = share.argmax(axis=1)
    for r in range(P):
        if np.any(holder == r):
            continue
        counts = np.bincount(holder, minlength=P)
        movable = np.flatnonzero(counts[holder] > 1)
        holder[movable[np.argmax(share[movable, r])]] = r
    return holder


class Subdomains:
    r"""This rank's share of an overlapping decomposition of a distributed matrix.

    Built collectively by :meth:`from_matrix`. Indices are global rows of the matrix (its own
    numbering); the interface matches :class:`~.layout.Layout` where the classical layer needs
    it (:meth:`index_sets`, ``comm``, ``coarse_rank``).

    Attributes
    ----------
    N, overlap : int
    ids : ndarray
        Global ids of the subdomains this rank holds.
    overlapping, owned : list of ndarray
        :math:`I_i` and the non-overlapping parts of those subdomains (sorted global rows).
    sizes : ndarray
        :math:`n_i` of all ``N`` subdomains (every rank).
    weights : list of ndarray
        Diagonals of :math:`D_i = \mathrm{diag}(1/m_j,\ j \in I_i)` of those subdomains.
    Phi_rows : scipy.sparse.csr_matrix or None
        This rank's rows of the coarse basis chosen at construction.
    part : ndarray or None
        On rank 0 of a partition this class computed: the part of every row (else ``None``).
    """

    def __init__(self, comm, N, overlap, partitioner, ids, overlapping, owned, sizes, weights,
                 Phi_rows=None, coarse_rank: int = 0):
        self.comm, self.N, self.overlap, self.partitioner = comm, N, overlap, partitioner
        self.ids, self.overlapping, self.owned, self.sizes = ids, overlapping, owned, sizes
        self.weights, self.Phi_rows, self.coarse_rank = weights, Phi_rows, coarse_rank
        self.part = None

    @classmethod
    def from_matrix(cls, A: PETSc.Mat, N: int, overlap: int, coordinates: np.ndarray | None = None,
                    partitioner: str | None = None, coarse: str | None = None,
                    coarse_rank: int = 0) -> "Subdomains":
        r"""Partition ``A``'s graph (or its rows' ``coordinates``, shape ``(nlocal, dim)``) into
        ``N`` subdomains with ``overlap`` graph layers, and build this rank's rows of the coarse
        basis ``coarse`` (``hats``: Q1 hats on the box grid, needs ``boxes``; ``nicolaides``:
        :math:`R_i^TD_i\mathbf 1`; ``None``: no coarse basis). Collective; errors on every rank.
        """
        comm = A.getComm()
        mpi = comm.tompi4py()
        n = A.getSize()[0]
        ranges = np.asarray(A.getOwnershipRanges(), dtype=np.int64)
        has = coordinates is not None
        collective_check(comm, all(mpi.allgather(has)) or not any(mpi.allgather(has)),
                         "coordinates were given on some ranks only: give every rank the "
                         "coordinates of its own rows (an empty array where it owns none)")
        partitioner = partitioner or ("boxes" if has else "metis")
        collective_check(comm, partitioner in PARTITIONERS,
                         f"unknown partitioner {partitioner!r}; choose one of "
                         f"{', '.join(PARTITIONERS)}")
        collective_check(comm, has or partitioner == "metis",
                         f"the {partitioner!r} partitioner needs coordinates and none were "
                         f"given: attach them (ddlearn.pc.set_coordinates(pc or A, coords), or a "
                         f"DM with coordinates on the KSP) or use -ddlearn_partition metis")
        collective_check(comm, coarse != "hats" or partitioner == "boxes",
                         "the hats coarse space lives on a box grid: it needs coordinates and "
                         "-ddlearn_partition boxes (or use -ddlearn_coarse_space nicolaides, "
                         "which needs the graph alone)")
        collective_check(comm, int(N) == N and 1 <= N <= n,
                         f"-ddlearn_subdomains {N} is not between 1 and the number of rows {n}")
        collective_check(comm, N >= mpi.Get_size(),
                         f"-ddlearn_subdomains {N} is fewer than the {mpi.Get_size()} ranks: "
                         f"every rank needs a subdomain (PCASM); use at least one per rank")
        collective_check(comm, int(overlap) == overlap and overlap >= 0,
                         f"-ddlearn_overlap {overlap} must be a non-negative integer")
        if has:
            coordinates = np.asarray(coordinates, dtype=np.float64)
            coordinates = coordinates.reshape(A.getLocalSize()[0], -1)
        G = gather_pattern(A)
        coords = mpi.gather(coordinates, root=0)
        payload, err = None, None
        if mpi.Get_rank() == 0:
            try:
                payload = cls._plan(G, np.concatenate(coords) if has else None, N, overlap,
                                    partitioner, coarse, ranges)
            except ValueError as e:
                err = str(e)
        err = mpi.bcast(err, root=0)
        if err:
            raise ValueError(err)
        ids, I, O, W, Phi_rows = mpi.scatter(payload["per_rank"] if payload else None, root=0)
        sizes = mpi.bcast(payload["sizes"] if payload else None, root=0)
        out = cls(comm, int(N), int(overlap), partitioner, ids, I, O, sizes, W, Phi_rows,
                  coarse_rank)
        out.part = payload["part"] if payload else None
        return out

    @classmethod
    def from_layout(cls, layout, to_global: np.ndarray) -> "Subdomains":
        """The subdomains of a structured :class:`~.layout.Layout` in another numbering of the
        same unknowns: ``to_global[j]`` is the matrix row holding natural unknown ``j``."""
        dec = layout.dec
        local = layout.local_subdomains
        overlapping, weights = [], []
        for i in local:
            g = to_global[dec.subdomains[i]]
            order = np.argsort(g)
            overlapping.append(g[order])
            weights.append(dec.D(i)[order])
        return cls(layout.comm, dec.N, dec.overlap, "structured", local, overlapping,
                   [np.sort(to_global[dec.owned[i]]) for i in local], dec.sizes, weights,
                   coarse_rank=layout.coarse_rank)

    @staticmethod
    def _plan(G, coords, N, overlap, partitioner, coarse, ranges):
        """Rank 0: the whole decomposition, cut into the pieces each rank receives."""
        n = G.shape[0]
        boxes = None
        if partitioner == "boxes":
            part, axis_index, offsets = box_partition(coords, N)
            boxes = (axis_index, offsets)
        elif partitioner == "rcb":
            part = rcb_partition(coords, N)
        else:
            part = metis_partition(G, N)
        counts = np.bincount(part, minlength=N)
        if counts.min() == 0:
            raise ValueError(f"the {partitioner} partition left {int((counts == 0).sum())} of "
                             f"{N} subdomains empty: use fewer subdomains"
                             + (" or -ddlearn_partition rcb/metis (boxes suit box-shaped "
                                "domains)" if partitioner == "boxes" else ""))
        S = grow_overlap(G, part, N, overlap)
        sizes = np.diff(S.indptr)
        if N > 1 and sizes.max() == n:
            raise ValueError(f"overlap {overlap} makes subdomain {int(sizes.argmax())} the whole "
                             f"domain ({n} rows): use a smaller -ddlearn_overlap or more "
                             f"subdomains")
        sets = [np.sort(S.indices[S.indptr[i]:S.indptr[i + 1]]) for i in range(N)]
        parts = np.argsort(part, kind="stable")
        owned = np.split(parts, np.cumsum(counts)[:-1])
        holder = assign_holders(owned, ranges)
        m = np.asarray(S.sum(axis=1)).ravel()
        Phi = None
        if coarse == "hats":
            Phi = hats_on_boxes(*boxes)
            if Phi.shape[1] == 0:
                raise ValueError(f"the hats coarse space is empty with N = {N} (it needs at "
                                 f"least two boxes per direction): use more subdomains or "
                                 f"-ddlearn_coarse_space nicolaides")
        elif coarse == "nicolaides":
            Phi = sp.csr_matrix(S.multiply(1.0 / m[:, None]))
        per_rank = []
        for r in range(len(ranges) - 1):
            mine = np.flatnonzero(holder == r)
            rows = Phi[ranges[r]:ranges[r + 1]] if Phi is not None else None
            per_rank.append((mine, [sets[i] for i in mine], [np.sort(owned[i]) for i in mine],
                             [1.0 / m[sets[i]] for i in mine], rows))
        return {"per_rank": per_rank, "sizes": sizes, "part": part}

    @property
    def n0(self) -> int:
        return 0 if self.Phi_rows is None else self.Phi_rows.shape[1]

    def index_sets(self, overlapping: bool = True) -> list[PETSc.IS]:
        """PETSc index sets of this rank's subdomains: :math:`I_i`, or the owned parts."""
        sets = self.overlapping if overlapping else self.owned
        return [PETSc.IS().createGeneral(s.astype(PETSc.IntType), comm=PETSc.COMM_SELF)
                for s in sets]

    def describe(self) -> dict:
        return {"subdomains": self.N, "overlap": self.overlap, "partitioner": self.partitioner,
                "n_i_min": int(self.sizes.min()), "n_i_max": int(self.sizes.max())}
