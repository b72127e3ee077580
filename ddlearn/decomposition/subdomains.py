r"""Overlapping subdomains of *any* assembled matrix, in the matrix's own numbering and row
distribution (:class:`Subdomains`).

The number of subdomains ``N`` is independent of the number of ranks. The non-overlapping
parts come from a partitioner (:mod:`~.partition`, ``-<prefix>ddlearn_partition``) or are the
user's own index sets (:meth:`Subdomains.from_sets`, like ``PCASMSetLocalSubdomains``), and each
part is grown by :math:`n_\delta` layers of the (symmetrised) matrix graph,
:math:`I_i^{(k+1)} = I_i^{(k)} \cup \{j : a_{jl} \ne 0 \text{ or } a_{lj} \ne 0,\ l \in
I_i^{(k)}\}`. Multiplicities :math:`m_j = \#\{i : j \in I_i\}` give the partition of unity
:math:`D_i = \mathrm{diag}(1/m_j)`.

With a block size :math:`b > 1` (vector problems) the partition and the overlap work on the
nodes' graph, so no subdomain splits a node's dofs.

Cost. Each rank keeps its own rows, its subdomains' halo (the rows their overlap reaches) and
:math:`O(N)` metadata, in a number of collective calls independent of ``N``
(:mod:`~.parallel_partition`; only the ``metis`` partitioner gathers the graph on rank 0): a
rank holds its share of the parts (at least one, PCASM needs a block on every rank; the rest in
proportion to its rows), those it owns most rows of first, each sent there in one all-to-all; the overlap grows by fetching, per
layer, the halo rows of all of a rank's subdomains in one call; the multiplicities come from
one scatter. The coarse bases live elsewhere (:mod:`ddlearn.classical.coarse_space`).
"""
from __future__ import annotations

import hashlib

import numpy as np
from mpi4py import MPI
from petsc4py import PETSc

from .collective import collective_check
from .parallel_partition import (DistributedGraph, assign_holders, grow_overlap_parallel,
                                 redistribute)
from .partition import PARTITIONERS, PartitionInput, default_partitioner, unknown_partitioner
from .petsc_rows import column_groups
from .timing import Timer

__all__ = ["Subdomains", "rows_fingerprint", "node_dofs"]


def rows_fingerprint(I: np.ndarray) -> tuple:
    """What identifies a subdomain from one set-up to the next: the number and a hash of its
    sorted global rows (the same rows in another order still match; a coarse space that keeps
    vectors between set-ups keeps them in sorted-row order)."""
    rows = np.sort(np.asarray(I, dtype=np.int64))
    return len(rows), hashlib.blake2b(rows.tobytes(), digest_size=16).hexdigest()


def node_dofs(nodes: np.ndarray, bs: int) -> np.ndarray:
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
    matches :class:`~.petsc_rows.RowLayout` where the classical layer needs it
    (:meth:`index_sets`, ``comm``, ``coarse_rank``). With block size :math:`b > 1` the dofs
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
    def _check_common(A: PETSc.Mat, overlap: int, block_size: int, prefix: str) -> None:
        comm = A.getComm()
        nlocal = A.getLocalSize()[0]
        collective_check(comm, int(block_size) == block_size and block_size >= 1
                         and nlocal % block_size == 0,
                         f"block size {block_size} does not divide this rank's {nlocal} rows: "
                         f"distribute whole nodes (local rows a multiple of the block size, "
                         f"MatSetBlockSize) or set the right block size")
        collective_check(comm, int(overlap) == overlap and overlap >= 0,
                         f"-{prefix}overlap {overlap} must be a non-negative integer")

    @staticmethod
    def _split_node(sets, bs: int, first: int) -> str | None:
        """The first of this rank's index ``sets`` (subdomains ``first``, ``first + 1``, ...)
        holding some but not all dofs of a node of ``bs`` dofs, in words; ``None`` if none
        does."""
        for k, s in enumerate(sets):
            nodes, count = np.unique(s // bs, return_counts=True)
            partial = np.flatnonzero(count != bs)
            if len(partial):
                a = int(nodes[partial[0]])
                have = np.intersect1d(s, node_dofs([a], bs))
                others = f" ({len(partial) - 1} more nodes split too)" if len(partial) > 1 else ""
                return (f"subdomain {first + k} (index set {k} of this rank) splits node {a}: it "
                        f"holds row{'s' if len(have) > 1 else ''} "
                        f"{', '.join(map(str, have))} of the node's rows "
                        f"{', '.join(map(str, node_dofs([a], bs)))}{others}")
        return None

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
    def _all_sizes(mpi, N: int, ids, sets) -> np.ndarray:
        """:math:`n_i` of all ``N`` subdomains from each rank's ``ids`` and ``sets``."""
        sizes = np.zeros(N, dtype=np.int64)
        sizes[np.asarray(ids, dtype=np.int64)] = [len(s) for s in sets]
        mpi.Allreduce(MPI.IN_PLACE, sizes, op=MPI.SUM)
        return sizes

    @classmethod
    def from_matrix(cls, A: PETSc.Mat, N: int, overlap: int, coordinates: np.ndarray | None = None,
                    partitioner: str | None = None, coarse_rank: int = 0,
                    block_size: int = 1, prefix: str = "ddlearn_") -> "Subdomains":
        r"""Partition ``A``'s graph (or its rows' ``coordinates``, shape ``(nlocal, dim)`` or
        one row per node) into ``N`` subdomains by the named partitioner
        (:data:`~.partition.PARTITIONERS`; by default :func:`~.partition.default_partitioner`)
        with ``overlap`` graph layers. Collective; errors on every rank, naming the options
        under ``prefix`` (the PC's prefix + ``ddlearn_``).

        Every rank labels its own nodes; each rank holds its share of the parts, those it
        owns most rows of first (:func:`~.parallel_partition.assign_holders`), grows them there
        (:func:`~.parallel_partition.grow_overlap_parallel`), and :math:`m_j` is summed by one
        scatter."""
        comm = A.getComm()
        mpi = comm.tompi4py()
        given = mpi.allgather(coordinates is not None)
        collective_check(comm, all(given) or not any(given),
                         "coordinates were given on some ranks only: give every rank the "
                         "coordinates of its own rows (an empty array where it owns none)")
        has = given[0]
        groups = column_groups(A)
        partitioner = partitioner or default_partitioner(groups is not None, has,
                                                         mpi.Get_size())
        collective_check(comm, partitioner in PARTITIONERS,
                         unknown_partitioner(partitioner, f"-{prefix}partition"))
        cls._check_common(A, overlap, block_size, prefix)
        bs, n = int(block_size), A.getSize()[0]
        timer = Timer()
        graph = DistributedGraph.from_matrix(A, bs)
        timer.lap("graph_s")
        pts = cls._node_coordinates(A, coordinates, bs) if has else None
        found = PARTITIONERS[partitioner](PartitionInput(graph, pts, N, bs, prefix, A, groups))
        labels, N = found.part, found.N
        counts = np.bincount(labels, minlength=N).astype(np.int64)
        mpi.Allreduce(MPI.IN_PLACE, counts, op=MPI.SUM)
        collective_check(comm, counts.min() > 0,
                         f"the {partitioner} partition left {int((counts == 0).sum())} of {N} "
                         f"subdomains empty: use fewer subdomains"
                         + (f" or -{prefix}partition rcb/metis (boxes suit box-shaped domains)"
                            if partitioner == "boxes" else ""))
        timer.lap("label_s")
        ids, parts = redistribute(mpi, graph.lo + np.arange(len(labels)), labels,
                                  assign_holders(mpi, labels, N))
        timer.lap("distribute_s")
        grown = grow_overlap_parallel(graph, parts, int(overlap))
        timer.lap("overlap_s")
        I = [node_dofs(s, bs) for s in grown]
        sizes = cls._all_sizes(mpi, N, ids, I)
        collective_check(comm, N == 1 or sizes.max() < n,
                         f"overlap {overlap} makes subdomain {int(sizes.argmax())} the whole "
                         f"domain ({n // bs} {'nodes' if bs > 1 else 'rows'}): use a smaller "
                         f"-{prefix}overlap or more subdomains")
        m = _add_at(A, I, [np.ones(len(s)) for s in I])
        weights = [1.0 / w for w in _values_at(m, I)]
        m.destroy()
        timer.lap("multiplicity_s")
        boxes = found.boxes
        if boxes is not None:
            boxes = (np.repeat(boxes[0], bs, axis=0), boxes[1])
        return cls(comm, N, int(overlap), partitioner, ids, I, [node_dofs(p, bs) for p in parts],
                   sizes, weights, coarse_rank, bs, boxes, timing=timer.seconds)

    @classmethod
    def from_sets(cls, A: PETSc.Mat, sets, overlapping: bool = True, overlap: int = 0,
                  coarse_rank: int = 0, block_size: int = 1, partitioner: str = "user",
                  prefix: str = "ddlearn_") -> "Subdomains":
        r"""This rank's subdomains given as index sets (global rows, any rank's, like
        ``PCASMSetLocalSubdomains``): overlapping ones, or non-overlapping parts grown here by
        ``overlap`` layers of the matrix graph (symmetrised; on the nodes for block size > 1;
        :func:`~.parallel_partition.grow_overlap_parallel`: one collective call per layer for
        all sets). The subdomains are numbered rank by rank; the non-overlapping part of an
        overlapping subdomain is the rows it is the lowest-numbered subdomain of. Collective;
        bad sets are refused on every rank, naming the options under ``prefix``."""
        comm = A.getComm()
        mpi = comm.tompi4py()
        n = A.getSize()[0]
        bs = int(block_size)
        cls._check_common(A, overlap, bs, prefix)
        timer = Timer()
        sets = [np.asarray(s.getIndices() if isinstance(s, PETSc.IS) else s, dtype=np.int64)
                for s in sets]
        collective_check(comm, len(sets) >= 1, "a rank was given no subdomain: give every rank "
                         "at least one index set (PCASM needs a block on every rank)")
        bad = [k for k, s in enumerate(sets) if len(s) == 0 or s.min() < 0 or s.max() >= n
               or len(np.unique(s)) != len(s)]
        collective_check(comm, not bad, f"subdomain index set(s) {bad} of this rank are empty, "
                         f"repeat an index or reach outside the {n} rows: give each subdomain "
                         f"distinct global row indices in 0..{n - 1}")
        first = mpi.exscan(len(sets)) or 0
        split = cls._split_node(sets, bs, first) if bs > 1 else None
        collective_check(comm, split is None, f"{split}: with block size {bs} a subdomain holds "
                         f"whole nodes, all of rows {bs}a .. {bs}a+{bs - 1} of node a or none; "
                         f"add the missing rows to the set (or drop the node's others), or set "
                         f"the matrix's block size to what its nodes are (MatSetBlockSize)")
        orders = [np.argsort(s, kind="stable") for s in sets]
        given = [s[o] for s, o in zip(sets, orders)]
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
            timer.lap("label_s")
        else:
            O = given
            if overlap:
                graph = DistributedGraph.from_matrix(A, bs)
                timer.lap("graph_s")
                grown = grow_overlap_parallel(graph, [np.unique(s // bs) for s in given],
                                              int(overlap))
                I = [node_dofs(g, bs) for g in grown]
            else:
                I = [s.copy() for s in given]
            timer.lap("overlap_s")
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
                         f"-{prefix}overlap or fewer subdomains")
        weights = [1.0 / w for w in _values_at(m, I)]
        m.destroy()
        timer.lap("multiplicity_s")
        return cls(comm, int(N), int(overlap), partitioner, ids, I, O, sizes, weights,
                   coarse_rank, bs, None, orders, timer.seconds)

    @classmethod
    def from_layout(cls, layout, to_global: np.ndarray) -> "Subdomains":
        """The subdomains of a structured :class:`~.petsc_rows.RowLayout` in another numbering
        of the same unknowns: ``to_global[j]`` is the matrix row holding natural unknown ``j``."""
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
