r"""Overlapping subdomains of *any* assembled matrix, in the matrix's own numbering and row
distribution.

The number of subdomains ``N`` is independent of the number of ranks. The non-overlapping
parts come from

- ``boxes``: coordinates split into a box grid ``N = N_x N_y`` (:func:`~.structured.box_grid`),
  per axis by the sorted distinct coordinate values, so that on a tensor grid the boxes are
  exactly those of :class:`~.structured.Decomposition` (in any ordering of the unknowns);
- ``rcb``: recursive coordinate bisection (any ``N``, any point cloud);
- ``metis``: the matrix graph alone, partitioned by METIS (:mod:`pymetis`);
- ``local``: each rank's rows are one subdomain (PCHPDDM's default);
- the user's own index sets (:meth:`Subdomains.from_sets`, like ``PCASMSetLocalSubdomains``),

and each part is grown by :math:`n_\delta` layers of the matrix graph,
:math:`I_i^{(k+1)} = I_i^{(k)} \cup \{j : a_{jl} \ne 0,\ l \in I_i^{(k)}\}`. Multiplicities
:math:`m_j = \#\{i : j \in I_i\}` give the partition of unity :math:`D_i = \mathrm{diag}(1/m_j)`.

With a block size :math:`b > 1` (vector problems) the partition and the overlap work on the
nodes' graph, so no subdomain splits a node's dofs.

For ``boxes``, ``rcb`` and ``metis`` the graph and coordinates are gathered on rank 0, which
partitions and sends every rank its subdomains (a subdomain goes to the rank owning most of its
rows). That is simple and exact, and costs :math:`O(\mathrm{nnz})` memory on rank 0: fine to a
few million unknowns, not beyond. ``local`` and the user's sets never gather: the overlap
grows in parallel (``MatIncreaseOverlap``) and the multiplicities come from one scatter. The
coarse bases live elsewhere (:mod:`ddlearn.classical.coarse_space`).
"""
from __future__ import annotations

import numpy as np
import pymetis
import scipy.sparse as sp
from mpi4py import MPI
from petsc4py import PETSc

from .collective import collective_check
from .structured import box_grid, split

__all__ = ["PARTITIONERS", "Subdomains", "gather_pattern", "box_partition", "rcb_partition",
           "metis_partition", "grow_overlap", "assign_holders", "gather_matrix",
           "scatter_rows"]

PARTITIONERS = ("boxes", "rcb", "metis", "local")


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
    boxes = box_grid(N, coords.shape[1])
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


def _node_pattern(G: sp.csr_matrix, bs: int) -> sp.csr_matrix:
    """The pattern of the nodes' graph: node ``a`` and ``b`` coupled if any of their dofs are
    (dofs ``bs a .. bs a + bs - 1`` form node ``a``)."""
    if bs == 1:
        return G
    n = G.shape[0]
    C = sp.csr_matrix((np.ones(n, dtype=np.int8), (np.arange(n), np.arange(n) // bs)),
                      shape=(n, n // bs))
    H = ((C.T @ G @ C) != 0).astype(np.int8).tocsr()
    H.setdiag(0)
    H.eliminate_zeros()
    return H


def _dofs(nodes: np.ndarray, bs: int) -> np.ndarray:
    """The dofs of ``nodes`` (sorted when the nodes are)."""
    return (bs * np.asarray(nodes, dtype=np.int64)[:, None] + np.arange(bs)).ravel()


def _values_at(v: PETSc.Vec, sets) -> list[np.ndarray]:
    """The entries of the distributed vector ``v`` at each of this rank's index arrays
    ``sets`` (any rank's rows; collective)."""
    flat = np.concatenate(sets) if len(sets) else np.zeros(0, dtype=np.int64)
    where = PETSc.IS().createGeneral(flat.astype(PETSc.IntType), comm=PETSc.COMM_SELF)
    local = PETSc.Vec().createSeq(len(flat), comm=PETSc.COMM_SELF)
    scatter = PETSc.Scatter().create(v, where, local, None)
    scatter.scatter(v, local, PETSc.InsertMode.INSERT, PETSc.ScatterMode.FORWARD)
    values = local.getArray(readonly=True).copy()
    for o in (where, local, scatter):
        o.destroy()
    return np.split(values, np.cumsum([len(s) for s in sets])[:-1]) if len(sets) else []


def _add_at(A: PETSc.Mat, sets, values) -> PETSc.Vec:
    """A distributed vector (rows of ``A``) holding, per row, the sum of ``values[i]`` over this
    and every rank's index arrays ``sets[i]`` that contain it (collective)."""
    flat = np.concatenate(sets) if len(sets) else np.zeros(0, dtype=np.int64)
    v = A.createVecLeft()
    v.set(0.0)
    where = PETSc.IS().createGeneral(flat.astype(PETSc.IntType), comm=PETSc.COMM_SELF)
    local = PETSc.Vec().createSeq(len(flat), comm=PETSc.COMM_SELF)
    local.setArray(np.concatenate(values) if len(sets) else np.zeros(0))
    scatter = PETSc.Scatter().create(v, where, local, None)
    scatter.scatter(local, v, PETSc.InsertMode.ADD, PETSc.ScatterMode.REVERSE)
    for o in (where, local, scatter):
        o.destroy()
    return v


class Subdomains:
    r"""This rank's share of an overlapping decomposition of a distributed matrix.

    Built collectively: :meth:`from_matrix` (ddlearn partitions), :meth:`from_sets` (the user's
    index sets, like ``PCASMSetLocalSubdomains``), :meth:`from_layout` (a structured
    decomposition). Indices are global rows of the matrix (its own numbering); the interface
    matches :class:`~.layout.Layout` where the classical layer needs it (:meth:`index_sets`,
    ``comm``, ``coarse_rank``). With block size :math:`b > 1` the dofs
    :math:`b\,a, \dots, b\,a+b-1` form node :math:`a`, and no subdomain splits a node.

    Attributes
    ----------
    N, overlap, block_size : int
    ids : ndarray
        Global ids of the subdomains this rank holds.
    overlapping, owned : list of ndarray
        :math:`I_i` and the non-overlapping parts of those subdomains (sorted global rows).
    sizes : ndarray
        :math:`n_i` of all ``N`` subdomains (every rank).
    weights : list of ndarray
        Diagonals of :math:`D_i = \mathrm{diag}(1/m_j,\ j \in I_i)` of those subdomains.
    boxes : tuple or None
        For a box partition: ``(axis_index, offsets)``, the position of each of this rank's
        rows among the distinct coordinates per axis and the split of those into boxes
        (what the hats are built from).
    orders : list of ndarray or None
        For the user's index sets: the position in the given set of each sorted row (what
        the user's auxiliary matrices are numbered by).
    part : ndarray or None
        On rank 0: the non-overlapping part of every row (else ``None``).
    """

    def __init__(self, comm, N, overlap, partitioner, ids, overlapping, owned, sizes, weights,
                 coarse_rank: int = 0, block_size: int = 1, boxes=None, orders=None, part=None):
        self.comm, self.N, self.overlap, self.partitioner = comm, N, overlap, partitioner
        self.ids, self.overlapping, self.owned, self.sizes = ids, overlapping, owned, sizes
        self.weights, self.coarse_rank, self.block_size = weights, coarse_rank, block_size
        self.boxes, self.orders, self.part = boxes, orders, part

    @staticmethod
    def _check_common(A: PETSc.Mat, N: int | None, overlap: int, block_size: int) -> None:
        comm = A.getComm()
        n, nlocal = A.getSize()[0], A.getLocalSize()[0]
        collective_check(comm, int(block_size) == block_size and block_size >= 1
                         and nlocal % block_size == 0,
                         f"block size {block_size} does not divide this rank's {nlocal} rows: "
                         f"distribute whole nodes (local rows a multiple of the block size, "
                         f"MatSetBlockSize) or set the right block size")
        if N is not None:
            collective_check(comm, int(N) == N and 1 <= N <= n // block_size,
                             f"-ddlearn_subdomains {N} is not between 1 and the number of "
                             f"{'nodes' if block_size > 1 else 'rows'} {n // block_size}")
            collective_check(comm, N >= comm.getSize(),
                             f"-ddlearn_subdomains {N} is fewer than the {comm.getSize()} ranks: "
                             f"every rank needs a subdomain (PCASM); use at least one per rank")
        collective_check(comm, int(overlap) == overlap and overlap >= 0,
                         f"-ddlearn_overlap {overlap} must be a non-negative integer")

    @classmethod
    def from_matrix(cls, A: PETSc.Mat, N: int, overlap: int, coordinates: np.ndarray | None = None,
                    partitioner: str | None = None, coarse_rank: int = 0,
                    block_size: int = 1) -> "Subdomains":
        r"""Partition ``A``'s graph (or its rows' ``coordinates``, shape ``(nlocal, dim)`` or
        one row per node) into ``N`` subdomains with ``overlap`` graph layers (``local``: each
        rank's rows are one subdomain). Collective; errors on every rank."""
        comm = A.getComm()
        mpi = comm.tompi4py()
        ranges = np.asarray(A.getOwnershipRanges(), dtype=np.int64)
        has = coordinates is not None
        collective_check(comm, all(mpi.allgather(has)) or not any(mpi.allgather(has)),
                         "coordinates were given on some ranks only: give every rank the "
                         "coordinates of its own rows (an empty array where it owns none)")
        partitioner = partitioner or ("boxes" if has else "metis")
        collective_check(comm, partitioner in PARTITIONERS,
                         f"unknown partitioner {partitioner!r}; choose one of "
                         f"{', '.join(PARTITIONERS)}")
        if partitioner == "local":
            lo, hi = A.getOwnershipRange()
            return cls.from_sets(A, [np.arange(lo, hi)], False, overlap, coarse_rank,
                                 block_size, "local")
        collective_check(comm, has or partitioner == "metis",
                         f"the {partitioner!r} partitioner needs coordinates and none were "
                         f"given: attach them (ddlearn.pc.set_coordinates(pc or A, coords), or a "
                         f"DM with coordinates on the KSP) or use -ddlearn_partition metis")
        cls._check_common(A, N, overlap, block_size)
        bs = int(block_size)
        if has:
            coordinates = np.asarray(coordinates, dtype=np.float64)
            nlocal = A.getLocalSize()[0]
            per_node = coordinates.size and coordinates.shape[0] * bs == nlocal and bs > 1
            coordinates = coordinates.reshape(nlocal // bs if per_node else nlocal, -1)
            if bs > 1 and not per_node:
                coordinates = coordinates[::bs]
        G = gather_pattern(A)
        coords = mpi.gather(coordinates, root=0)
        payload, err = None, None
        if mpi.Get_rank() == 0:
            try:
                payload = cls._plan(_node_pattern(G, bs), np.concatenate(coords) if has else None,
                                    N, overlap, partitioner, ranges, bs)
            except ValueError as e:
                err = str(e)
        err = mpi.bcast(err, root=0)
        if err:
            raise ValueError(err)
        ids, I, O, W, boxes = mpi.scatter(payload["per_rank"] if payload else None, root=0)
        sizes = mpi.bcast(payload["sizes"] if payload else None, root=0)
        return cls(comm, int(N), int(overlap), partitioner, ids, I, O, sizes, W, coarse_rank,
                   bs, boxes, part=payload["part"] if payload else None)

    @classmethod
    def from_sets(cls, A: PETSc.Mat, sets, overlapping: bool = True, overlap: int = 0,
                  coarse_rank: int = 0, block_size: int = 1,
                  partitioner: str = "user") -> "Subdomains":
        r"""This rank's subdomains given as index sets (global rows, any rank's, like
        ``PCASMSetLocalSubdomains``): overlapping ones, or non-overlapping parts grown here by
        ``overlap`` layers of the matrix graph (``MatIncreaseOverlap``, in parallel; closed
        under nodes for block size > 1). The subdomains are numbered rank by rank; the
        non-overlapping part of an overlapping subdomain is the rows it is the lowest-numbered
        subdomain of. Collective; bad sets are refused on every rank."""
        comm = A.getComm()
        mpi = comm.tompi4py()
        n = A.getSize()[0]
        bs = int(block_size)
        cls._check_common(A, None, overlap, bs)
        sets = [np.asarray(s.getIndices() if isinstance(s, PETSc.IS) else s, dtype=np.int64)
                for s in sets]
        collective_check(comm, len(sets) >= 1, "a rank was given no subdomain: give every rank "
                         "at least one index set (PCASM needs a block on every rank)")
        bad = [k for k, s in enumerate(sets) if len(s) == 0 or s.min() < 0 or s.max() >= n
               or len(np.unique(s)) != len(s)]
        collective_check(comm, not bad, f"subdomain index set(s) {bad} of this rank are empty, "
                         f"repeat an index or reach outside the {n} rows: give each subdomain "
                         f"distinct global row indices in 0..{n - 1}")
        split = [k for k, s in enumerate(sets) if bs > 1 and len(np.unique(s // bs)) * bs != len(s)]
        collective_check(comm, not split, f"subdomain index set(s) {split} split a node's "
                         f"{bs} dofs (block size {bs}): give whole nodes")
        orders = [np.argsort(s, kind="stable") for s in sets]
        given = [s[o] for s, o in zip(sets, orders)]
        first = mpi.exscan(len(sets)) or 0
        N = mpi.allreduce(len(sets))
        ids = np.arange(first, first + len(sets))
        if overlapping:
            I = given
            # the owner of a row: the lowest subdomain id containing it (max of -id)
            owner = A.createVecLeft()
            owner.set(-float(N))
            flat = np.concatenate(I)
            where = PETSc.IS().createGeneral(flat.astype(PETSc.IntType), comm=PETSc.COMM_SELF)
            local = PETSc.Vec().createSeq(len(flat), comm=PETSc.COMM_SELF)
            local.setArray(-np.repeat(ids, [len(s) for s in I]).astype(np.float64))
            scatter = PETSc.Scatter().create(owner, where, local, None)
            scatter.scatter(local, owner, PETSc.InsertMode.MAX_VALUES, PETSc.ScatterMode.REVERSE)
            lowest = _values_at(owner, I)
            O = [s[-low == i] for s, low, i in zip(I, lowest, ids)]
            for o in (owner, where, local, scatter):
                o.destroy()
        else:
            O = given
            I = [s.copy() for s in given]
            count = mpi.allreduce(len(I), op=MPI.MAX)
            for k in range(count):  # MatIncreaseOverlap is collective, one set per call here
                iset = PETSc.IS().createGeneral((I[k] if k < len(I) else np.zeros(0, np.int64))
                                                .astype(PETSc.IntType), comm=PETSc.COMM_SELF)
                if overlap:
                    A.increaseOverlap(iset, overlap)
                if k < len(I):
                    grown = np.unique(iset.getIndices().astype(np.int64))
                    I[k] = _dofs(np.unique(grown // bs), bs) if bs > 1 else grown
                iset.destroy()
            orders = None  # the given sets were the parts, not the subdomains
        m = _add_at(A, I, [np.ones(len(s)) for s in I])
        cover = m.getArray(readonly=True)
        nowhere = int(mpi.allreduce(int((cover == 0).sum())))
        collective_check(comm, nowhere == 0,
                         f"the subdomain index sets leave {nowhere} rows in no subdomain: every "
                         f"row must belong to at least one subdomain")
        if not overlapping:
            owned = _add_at(A, O, [np.ones(len(s)) for s in O])
            twice = int(mpi.allreduce(int((owned.getArray(readonly=True) != 1).sum())))
            owned.destroy()
            collective_check(comm, twice == 0,
                             f"the non-overlapping subdomain index sets cover {twice} rows "
                             f"twice or not at all: give disjoint sets covering every row, or "
                             f"overlapping sets (overlapping=True)")
        weights = [1.0 / w for w in _values_at(m, I)]
        m.destroy()
        sizes = np.concatenate(mpi.allgather(np.array([len(s) for s in I], dtype=np.int64)))
        pieces = mpi.gather((ids, O), root=0)
        part = None
        if mpi.Get_rank() == 0:
            part = np.empty(n, dtype=np.int64)
            for rank_ids, rank_owned in pieces:
                for i, o in zip(rank_ids, rank_owned):
                    part[o] = i
        return cls(comm, int(N), int(overlap), partitioner, ids, I, O, sizes, weights,
                   coarse_rank, bs, None, orders, part)

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
    def _plan(G, coords, N, overlap, partitioner, ranges, bs):
        """Rank 0: the whole decomposition on the nodes' graph ``G``, cut into the pieces each
        rank receives (in dofs)."""
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
                             f"domain ({n} nodes): use a smaller -ddlearn_overlap or more "
                             f"subdomains")
        m = np.repeat(np.asarray(S.sum(axis=1)).ravel(), bs)
        sets = [_dofs(np.sort(S.indices[S.indptr[i]:S.indptr[i + 1]]), bs) for i in range(N)]
        nodes = np.argsort(part, kind="stable")
        owned = [_dofs(o, bs) for o in np.split(nodes, np.cumsum(counts)[:-1])]
        holder = assign_holders(owned, ranges)
        per_rank = []
        for r in range(len(ranges) - 1):
            mine = np.flatnonzero(holder == r)
            rows = slice(ranges[r] // bs, ranges[r + 1] // bs)
            box = (np.repeat(boxes[0][rows], bs, axis=0), boxes[1]) if boxes else None
            per_rank.append((mine, [sets[i] for i in mine], [owned[i] for i in mine],
                             [1.0 / m[sets[i]] for i in mine], box))
        return {"per_rank": per_rank, "sizes": sizes * bs, "part": np.repeat(part, bs)}

    def index_sets(self, overlapping: bool = True) -> list[PETSc.IS]:
        """PETSc index sets of this rank's subdomains: :math:`I_i`, or the owned parts."""
        sets = self.overlapping if overlapping else self.owned
        return [PETSc.IS().createGeneral(s.astype(PETSc.IntType), comm=PETSc.COMM_SELF)
                for s in sets]

    def gather(self, v: PETSc.Vec) -> list[np.ndarray]:
        """The entries of a distributed vector (rows of the matrix) on each of this rank's
        :math:`I_i`: :math:`R_i v` (collective)."""
        return _values_at(v, self.overlapping)

    def summed(self, A: PETSc.Mat, values) -> list[np.ndarray]:
        r"""On each of this rank's :math:`I_i`, the rows of :math:`\sum_j R_j^T v_j` over every
        rank's subdomains, ``values[i]`` being :math:`v_i` (collective)."""
        v = _add_at(A, self.overlapping, values)
        out = self.gather(v)
        v.destroy()
        return out

    def gather_columns(self, A: PETSc.Mat, X: np.ndarray) -> list[np.ndarray]:
        """:math:`R_i X` for this rank's rows ``X`` of a multivector, shape ``(local rows, m)``,
        on each of this rank's subdomains (collective; every rank has the same ``m``)."""
        v = A.createVecLeft()
        cols = []
        for j in range(X.shape[1]):
            v.setArray(np.ascontiguousarray(X[:, j]))
            cols.append(self.gather(v))
        v.destroy()
        return [np.stack([c[k] for c in cols], axis=1) if cols else np.zeros((len(I), 0))
                for k, I in enumerate(self.overlapping)]

    def describe(self) -> dict:
        return {"subdomains": self.N, "overlap": self.overlap, "partitioner": self.partitioner,
                "block_size": self.block_size, "n_i_min": int(self.sizes.min()),
                "n_i_max": int(self.sizes.max())}
