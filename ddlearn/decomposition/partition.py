r"""Overlapping subdomains of *any* assembled matrix, in the matrix's own numbering and row
distribution.

The number of subdomains ``N`` is independent of the number of ranks. The non-overlapping
parts come from (``-ddlearn_partition``)

- ``boxes``: coordinates split into a box grid ``N = N_x N_y [N_z]``
  (:func:`~.structured.box_grid`), per axis by the sorted distinct coordinate values, so that
  on a tensor grid the boxes are exactly those of :class:`~.structured.Decomposition` (in any
  ordering of the unknowns); the default with coordinates;
- ``rcb``: recursive coordinate bisection (any ``N``, any point cloud), every cut found
  collectively (:func:`~.parallel_partition.rcb_labels`);
- ``metis``: the whole matrix graph partitioned by METIS (:mod:`pymetis`) on rank 0, the best
  parts from the graph alone; the default without coordinates;
- ``local_metis``: each rank's own rows (the diagonal block of its graph) cut by METIS into its
  share of ``N`` (in proportion to its rows): the graph alone, without a gather, parts that
  never cross a rank boundary and depend on the number of ranks;
- ``local``: each rank's rows are one subdomain (PCHPDDM's default);
- the user's own index sets (:meth:`Subdomains.from_sets`, like ``PCASMSetLocalSubdomains``),

and each part is grown by :math:`n_\delta` layers of the (symmetrised) matrix graph,
:math:`I_i^{(k+1)} = I_i^{(k)} \cup \{j : a_{jl} \ne 0 \text{ or } a_{lj} \ne 0,\ l \in
I_i^{(k)}\}`. Multiplicities :math:`m_j = \#\{i : j \in I_i\}` give the partition of unity
:math:`D_i = \mathrm{diag}(1/m_j)`.

With a block size :math:`b > 1` (vector problems) the partition and the overlap work on the
nodes' graph, so no subdomain splits a node's dofs.

Cost. Only ``metis`` gathers: the graph on rank 0 (:math:`O(\mathrm{nnz})` memory there, fine
to a few million unknowns). Every other path keeps on each rank its own rows, its subdomains'
halo (the rows their overlap reaches) and :math:`O(N)` metadata, in a number of collective
calls independent of ``N`` (:mod:`~.parallel_partition`): a part is held by the rank owning
most of its rows (every rank holds at least one, PCASM needs a block on every rank) and is
sent there in one all-to-all; the overlap grows by fetching, per layer, the halo rows of all
of a rank's subdomains in one call; the multiplicities come from one scatter. The coarse bases
live elsewhere (:mod:`ddlearn.classical.coarse_space`).
"""
from __future__ import annotations

import hashlib
import time

import numpy as np
import pymetis
import scipy.sparse as sp
from mpi4py import MPI
from petsc4py import PETSc

from .collective import collective_check
from .parallel_partition import (DistributedGraph, assign_holders, distinct_values,
                                 grow_overlap_parallel, rank_shares, rcb_labels, redistribute)
from .structured import box_grid, split

__all__ = ["PARTITIONERS", "Subdomains", "box_partition", "rcb_partition", "metis_partition",
           "grow_overlap", "gather_rows", "gather_matrix", "scatter_rows", "rows_fingerprint"]

PARTITIONERS = ("boxes", "rcb", "metis", "local", "local_metis")


def rows_fingerprint(I: np.ndarray) -> tuple:
    """What identifies a subdomain from one set-up to the next: the number and a hash of its
    sorted global rows (the same rows in another order still match; a coarse space that keeps
    vectors between set-ups keeps them in sorted-row order)."""
    rows = np.sort(np.asarray(I, dtype=np.int64))
    return len(rows), hashlib.blake2b(rows.tobytes(), digest_size=16).hexdigest()


def gather_rows(comm, M: sp.csr_matrix) -> sp.csr_matrix | None:
    """Each rank's rows ``M`` (in rank order) stacked into one scipy CSR matrix on rank 0
    (``None`` elsewhere; collective): the inverse of :func:`scatter_rows`."""
    parts = comm.tompi4py().gather(M, root=0)
    return sp.vstack(parts).tocsr() if parts is not None else None


def gather_matrix(A: PETSc.Mat) -> sp.csr_matrix | None:
    """The whole matrix on rank 0 as scipy CSR (``None`` elsewhere; collective)."""
    i, j, v = A.getValuesCSR()
    return gather_rows(A.getComm(), sp.csr_matrix((v, j, i), shape=(len(i) - 1, A.getSize()[1])))


def scatter_rows(comm, M: sp.csr_matrix | None, ranges) -> sp.csr_matrix:
    """Each rank's rows ``ranges[r]:ranges[r+1]`` of the matrix ``M`` held by rank 0."""
    mpi = comm.tompi4py()
    pieces = [M[ranges[r]:ranges[r + 1]] for r in range(len(ranges) - 1)] \
        if mpi.Get_rank() == 0 else None
    return mpi.scatter(pieces, root=0)


def box_partition(coords: np.ndarray, N: int, values=None):
    """Box-grid partition of points: ``(part, axis_index, offsets)`` with ``axis_index[:, a]``
    the position of each point's coordinate among the distinct values of axis ``a``
    (``values[a]``, sorted; by default those of ``coords``, else all ranks' from
    :func:`~.parallel_partition.distinct_values`) and ``offsets[a]`` the split of those values
    into boxes (subdomain ``bx + N_x by``)."""
    boxes = box_grid(N, coords.shape[1])
    axis_index, offsets, part, stride = [], [], np.zeros(len(coords), dtype=np.int64), 1
    for a, B in enumerate(boxes):
        axis = np.unique(coords[:, a]) if values is None else values[a]
        if B > len(axis):
            raise ValueError(f"{B} boxes along axis {a} but only {len(axis)} distinct "
                             f"coordinates: use fewer subdomains or -ddlearn_partition rcb/metis")
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


def metis_partition(G: sp.csr_matrix, N: int) -> np.ndarray:
    """METIS k-way partition of the graph ``G`` (symmetric, no diagonal) into ``N`` parts."""
    if N == 1:
        return np.zeros(G.shape[0], dtype=np.int64)
    _, membership = pymetis.part_graph(N, adjacency=pymetis.CSRAdjacency(G.indptr, G.indices))
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


class _Clock:
    """Wall time of consecutive phases on this rank."""

    def __init__(self):
        self.timing, self._t = {}, time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.timing[name] = self.timing.get(name, 0.0) + now - self._t
        self._t = now


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
    timing : dict
        This rank's wall time of the build's phases, in seconds: ``graph_s`` (the nodes'
        graph), ``label_s`` (the non-overlapping parts), ``distribute_s`` (holders, parts
        sent to them), ``overlap_s`` (overlap growth), ``multiplicity_s`` (:math:`m_j`,
        :math:`D_i`); the phases a build has.
    """

    def __init__(self, comm, N, overlap, partitioner, ids, overlapping, owned, sizes, weights,
                 coarse_rank: int = 0, block_size: int = 1, boxes=None, orders=None,
                 timing=None):
        self.comm, self.N, self.overlap, self.partitioner = comm, N, overlap, partitioner
        self.ids, self.overlapping, self.owned, self.sizes = ids, overlapping, owned, sizes
        self.weights, self.coarse_rank, self.block_size = weights, coarse_rank, block_size
        self.boxes, self.orders, self.timing = boxes, orders, timing or {}

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

    @staticmethod
    def _node_coordinates(A: PETSc.Mat, coordinates, bs: int) -> np.ndarray:
        """This rank's coordinates as one row per node, shape ``(local nodes, dim)``, from one
        row per dof or per node; refused on every rank unless all ranks agree on ``dim``."""
        mpi = A.getComm().tompi4py()
        c = np.asarray(coordinates, dtype=np.float64)
        nlocal = A.getLocalSize()[0]
        per_node = bs > 1 and c.ndim >= 1 and c.shape[0] * bs == nlocal
        rows = nlocal // bs if per_node else nlocal
        dim = c.size // rows if rows and c.size % rows == 0 else (0 if rows == 0 else -1)
        dims = set(mpi.allgather(dim)) - {0}
        collective_check(A.getComm(), len(dims) == 1 and min(dims) >= 1,
                         f"coordinates of {c.shape} for this rank's {nlocal} rows (block size "
                         f"{bs}): give every rank one row of coordinates per local row or per "
                         f"node, all of the same dimension")
        c = c.reshape(rows, dims.pop())
        return c if per_node or bs == 1 else c[::bs]

    @staticmethod
    def _labels(comm, graph: DistributedGraph, pts, N: int, partitioner: str):
        """Each of this rank's nodes' part, and for ``boxes`` ``(axis_index, offsets)``."""
        mpi = comm.tompi4py()
        if partitioner == "boxes":
            values = distinct_values(mpi, pts)
            try:  # the values are all ranks': every rank raises or none
                part, axis_index, offsets = box_partition(pts, N, values)
            except ValueError as e:
                collective_check(comm, False, str(e))
            return part, (axis_index, offsets)
        if partitioner == "rcb":
            return rcb_labels(mpi, pts, np.arange(graph.lo, graph.hi), N, graph.n), None
        if partitioner == "metis":  # the whole graph on rank 0
            whole = gather_rows(comm, graph.rows)
            part = metis_partition(whole, N) if whole is not None else None
            pieces = np.split(part, graph.ranges[1:-1]) if part is not None else None
            return mpi.scatter(pieces, root=0), None
        nodes = np.diff(graph.ranges)
        shares = rank_shares(nodes, N)
        me = mpi.Get_rank()
        collective_check(comm, shares[me] <= nodes[me],
                         f"-ddlearn_partition local_metis gives this rank {shares[me]} of the "
                         f"{N} subdomains but it owns {nodes[me]} nodes: use fewer subdomains or "
                         f"-ddlearn_partition metis/rcb")
        return int(shares[:me].sum()) + metis_partition(graph.local_block(), int(shares[me])), \
            None

    @staticmethod
    def _all_sizes(mpi, N: int, ids, sets) -> np.ndarray:
        """:math:`n_i` of all ``N`` subdomains from each rank's ``ids`` and ``sets``."""
        sizes = np.zeros(N, dtype=np.int64)
        sizes[np.asarray(ids, dtype=np.int64)] = [len(s) for s in sets]
        mpi.Allreduce(MPI.IN_PLACE, sizes, op=MPI.SUM)
        return sizes

    @classmethod
    def from_matrix(cls, A: PETSc.Mat, N: int, overlap: int, coordinates: np.ndarray | None = None,
                    partitioner: str | None = None, coarse_rank: int = 0,
                    block_size: int = 1) -> "Subdomains":
        r"""Partition ``A``'s graph (or its rows' ``coordinates``, shape ``(nlocal, dim)`` or
        one row per node) into ``N`` subdomains with ``overlap`` graph layers (``local``: each
        rank's rows are one subdomain). Collective; errors on every rank.

        Every rank labels its own nodes (``metis``: rank 0 labels all of them from the gathered
        graph); a part goes to the rank owning most of its rows (:func:`~.parallel_partition.
        assign_holders`), grows there (:func:`~.parallel_partition.grow_overlap_parallel`),
        and :math:`m_j` is summed by one scatter."""
        comm = A.getComm()
        mpi = comm.tompi4py()
        given = mpi.allgather(coordinates is not None)
        collective_check(comm, all(given) or not any(given),
                         "coordinates were given on some ranks only: give every rank the "
                         "coordinates of its own rows (an empty array where it owns none)")
        has = given[0]
        partitioner = partitioner or ("boxes" if has else "metis")
        collective_check(comm, partitioner in PARTITIONERS,
                         f"unknown partitioner {partitioner!r}; choose one of "
                         f"{', '.join(PARTITIONERS)}")
        if partitioner == "local":
            lo, hi = A.getOwnershipRange()
            return cls.from_sets(A, [np.arange(lo, hi)], False, overlap, coarse_rank,
                                 block_size, "local")
        collective_check(comm, has or partitioner in ("metis", "local_metis"),
                         f"the {partitioner!r} partitioner needs coordinates and none were "
                         f"given: attach them (ddlearn.pc.set_coordinates(pc or A, coords), or a "
                         f"DM with coordinates on the KSP) or use -ddlearn_partition metis")
        cls._check_common(A, N, overlap, block_size)
        bs, N, n = int(block_size), int(N), A.getSize()[0]
        clock = _Clock()
        graph = DistributedGraph.from_matrix(A, bs)
        clock.lap("graph_s")
        pts = cls._node_coordinates(A, coordinates, bs) if has else None
        labels, boxes = cls._labels(comm, graph, pts, N, partitioner)
        counts = np.bincount(labels, minlength=N).astype(np.int64)
        mpi.Allreduce(MPI.IN_PLACE, counts, op=MPI.SUM)
        collective_check(comm, counts.min() > 0,
                         f"the {partitioner} partition left {int((counts == 0).sum())} of {N} "
                         f"subdomains empty: use fewer subdomains"
                         + (" or -ddlearn_partition rcb/metis (boxes suit box-shaped domains)"
                            if partitioner == "boxes" else ""))
        clock.lap("label_s")
        ids, parts = redistribute(mpi, graph.lo + np.arange(len(labels)), labels,
                                  assign_holders(mpi, labels, N))
        clock.lap("distribute_s")
        grown = grow_overlap_parallel(graph, parts, int(overlap))
        clock.lap("overlap_s")
        I = [_dofs(s, bs) for s in grown]
        sizes = cls._all_sizes(mpi, N, ids, I)
        collective_check(comm, N == 1 or sizes.max() < n,
                         f"overlap {overlap} makes subdomain {int(sizes.argmax())} the whole "
                         f"domain ({n // bs} {'nodes' if bs > 1 else 'rows'}): use a smaller "
                         f"-ddlearn_overlap or more subdomains")
        m = _add_at(A, I, [np.ones(len(s)) for s in I])
        weights = [1.0 / w for w in _values_at(m, I)]
        m.destroy()
        clock.lap("multiplicity_s")
        if boxes is not None:
            boxes = (np.repeat(boxes[0], bs, axis=0), boxes[1])
        return cls(comm, N, int(overlap), partitioner, ids, I, [_dofs(p, bs) for p in parts],
                   sizes, weights, coarse_rank, bs, boxes, timing=clock.timing)

    @classmethod
    def from_sets(cls, A: PETSc.Mat, sets, overlapping: bool = True, overlap: int = 0,
                  coarse_rank: int = 0, block_size: int = 1,
                  partitioner: str = "user") -> "Subdomains":
        r"""This rank's subdomains given as index sets (global rows, any rank's, like
        ``PCASMSetLocalSubdomains``): overlapping ones, or non-overlapping parts grown here by
        ``overlap`` layers of the matrix graph (symmetrised; on the nodes for block size > 1;
        :func:`~.parallel_partition.grow_overlap_parallel`: one collective call per layer for
        all sets). The subdomains are numbered rank by rank; the non-overlapping part of an
        overlapping subdomain is the rows it is the lowest-numbered subdomain of. Collective;
        bad sets are refused on every rank."""
        comm = A.getComm()
        mpi = comm.tompi4py()
        n = A.getSize()[0]
        bs = int(block_size)
        cls._check_common(A, None, overlap, bs)
        clock = _Clock()
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
            clock.lap("label_s")
        else:
            O = given
            if overlap:
                graph = DistributedGraph.from_matrix(A, bs)
                clock.lap("graph_s")
                grown = grow_overlap_parallel(graph, [np.unique(s // bs) for s in given],
                                              int(overlap))
                I = [_dofs(g, bs) for g in grown]
            else:
                I = [s.copy() for s in given]
            clock.lap("overlap_s")
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
        sizes = cls._all_sizes(mpi, int(N), ids, I)
        # a grown part covering everything repeats the global problem: its coarse functions
        # are linearly dependent on the others' (a singular coarse matrix)
        collective_check(comm, overlapping or N == 1 or sizes.max() < n,
                         f"overlap {overlap} makes subdomain {int(sizes.argmax())} the whole "
                         f"domain ({n // bs} {'nodes' if bs > 1 else 'rows'}): use a smaller "
                         f"-ddlearn_overlap or fewer subdomains")
        weights = [1.0 / w for w in _values_at(m, I)]
        m.destroy()
        clock.lap("multiplicity_s")
        return cls(comm, int(N), int(overlap), partitioner, ids, I, O, sizes, weights,
                   coarse_rank, bs, None, orders, clock.timing)

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

    def gather_part(self, root: int = 0) -> np.ndarray | None:
        """The non-overlapping part of every row on rank ``root`` (``None`` elsewhere;
        collective). :math:`O(n)` on ``root``: for the serial builds that gather the whole
        matrix there anyway (GDSW/RGDSW); the partition itself never needs it."""
        pieces = self.comm.tompi4py().gather((self.ids, self.owned), root=root)
        if pieces is None:
            return None
        part = np.empty(sum(len(o) for _, owned in pieces for o in owned), dtype=np.int64)
        for ids, owned in pieces:
            for i, o in zip(ids, owned):
                part[o] = i
        return part

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
