r"""The partitioners: how the rows of any assembled matrix, or a point cloud, are cut into ``N``
non-overlapping parts, by name (``-<prefix>ddlearn_partition NAME``, ``TokenLayout.build(...,
partitioner=NAME)``: :data:`PARTITIONERS`, the one list), and their serial definitions.

A partitioner is one function ``f(inp: PartitionInput) -> Labels``, collective over the graph's
communicator: every rank labels its own nodes (node :math:`a` is dofs :math:`b a .. b a + b - 1`
for block size :math:`b`) with parts ``0..N-1``. A new partitioner is that function and one
line in :data:`PARTITIONERS`, and both users see it:
:class:`~.subdomains.Subdomains` (a PETSc matrix: it gives every rank its share of the parts,
those it owns most rows of first, grows them by graph layers and forms the partition of unity) and
:func:`partition_points` (the serial call on one process's points and graph, what the token
layouts of :mod:`ddlearn.nn` build on). The module imports no PETSc. The partitioners:

- ``boxes``: coordinates split into a box grid ``N = N_x N_y [N_z]``
  (:func:`~.structured.box_grid`), per axis by the sorted distinct coordinate values, so that
  on a tensor grid the boxes are exactly those of :class:`~.structured.Decomposition` (in any
  ordering of the unknowns); the default with coordinates;
- ``rcb``: recursive coordinate bisection (any ``N``, any point cloud), every cut found
  collectively (:func:`~.parallel_partition.rcb_labels`);
- ``metis``: the whole matrix graph partitioned by METIS (:mod:`.serial_partition`) on rank 0,
  the best parts from the graph alone; the default without coordinates on one rank;
- ``cluster_metis``: METIS in two stages, each rank's rows into small clusters, then the
  clusters' graph (:math:`O(N)` vertices) on rank 0 (:func:`cluster_metis`); parts cross rank
  boundaries; the default without coordinates on several ranks;
- ``local_metis``: each rank's own rows (the diagonal block of its graph) cut by METIS into its
  share of ``N`` (in proportion to its rows): the graph alone, without a gather, parts that
  never cross a rank boundary and depend on the number of ranks;
- ``local``: each rank's rows are one subdomain (PCHPDDM's default; ``N`` = the ranks);
- ``groups``: on a coarse matrix that carries its column groups (one per fine subdomain,
  :func:`~.petsc_rows.column_groups`), unions of whole groups, METIS on each rank's groups (the
  default there: the coarse level of a three-level method).

Cost. Only ``metis`` gathers: the graph on rank 0 (:math:`O(\mathrm{nnz})` memory there, fine
to a few million unknowns); ``cluster_metis`` gathers its clusters' graph, :math:`O(N)`.
Every other partitioner keeps on each rank its own rows and :math:`O(N)` metadata, in a number
of collective calls independent of ``N`` (:mod:`~.parallel_partition`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI
from scipy.sparse.csgraph import connected_components

from .collective import collective_check, on_root
from .parallel_partition import (DistributedGraph, distinct_values, fetch_values, gather_rows,
                                 rank_shares, rcb_labels)
from .serial_partition import box_partition, grow_overlap, metis_partition, rcb_partition

__all__ = ["PartitionInput", "Labels", "PARTITIONERS", "default_partitioner",
           "partition_points", "box_partition", "rcb_partition", "metis_partition",
           "grow_overlap"]

#: the keyword of :meth:`ddlearn.nn.layout.TokenLayout.build` for each option named in errors
_KEYWORDS = {"partition": "partitioner"}


@dataclass
class PartitionInput:
    """What every partitioner is given (collective: each rank holds its share).

    Attributes
    ----------
    graph : DistributedGraph
        This rank's rows of the nodes' symmetrised graph (its communicator is the
        partitioner's).
    points : ndarray or None
        This rank's nodes' coordinates, shape ``(local nodes, dim)``; ``None`` on every rank
        when none were given.
    N : int
        The number of parts asked for (``-<prefix>ddlearn_subdomains``).
    block_size : int
        Dofs per node.
    prefix : str or None
        The PC's options prefix followed by ``ddlearn_``, for the options named in errors;
        ``None``: the caller is a token layout, and errors name its keywords.
    matrix : PETSc.Mat or None
        The matrix itself, where one exists (its rows' entries; only ``groups`` reads them).
    groups : ndarray or None
        The offsets of the matrix's column groups (:func:`~.petsc_rows.column_groups`), where
        it carries them.
    """

    graph: DistributedGraph
    points: np.ndarray | None
    N: int
    block_size: int = 1
    prefix: str | None = "ddlearn_"
    matrix: object = None
    groups: np.ndarray | None = None

    @property
    def comm(self) -> MPI.Comm:
        return self.graph.mpi

    def option(self, name: str, value) -> str:
        """How the caller spells setting ``name`` to ``value``: ``-<prefix>name value`` for
        the PC, ``keyword=value`` for a token layout."""
        if self.prefix is None:
            return f"{_KEYWORDS.get(name, name)}={value!r}" if isinstance(value, str) \
                else f"{_KEYWORDS.get(name, name)}={value}"
        return f"-{self.prefix}{name} {value}"


@dataclass
class Labels:
    """A partitioner's answer: ``part`` (this rank's nodes' parts in ``0..N-1``), ``N`` (the
    number of parts, every rank), ``boxes`` (``boxes`` only: ``(axis_index, offsets)``, each
    node's position among the distinct coordinates per axis and their split into boxes)."""

    part: np.ndarray
    N: int
    boxes: tuple | None = None


def _check_count(inp: PartitionInput) -> None:
    """Refuse, on every rank, a number of parts that is not between the ranks and the nodes."""
    comm, N, opt = inp.comm, inp.N, inp.option
    nodes = inp.graph.n
    what = "nodes" if inp.block_size > 1 else "rows"
    collective_check(comm, int(N) == N and 1 <= N <= nodes,
                     f"{opt('subdomains', N)} is not between 1 and the number of {what} "
                     f"{nodes} of this matrix: use {opt('subdomains', nodes)} or fewer")
    collective_check(comm, N >= comm.Get_size(),
                     f"{opt('subdomains', N)} is fewer than the {comm.Get_size()} ranks: every "
                     f"rank needs a subdomain (PCASM); use at least one per rank")


def _needs_points(inp: PartitionInput, name: str) -> None:
    collective_check(inp.comm, inp.points is not None,
                     f"the {name!r} partitioner needs coordinates and none were given: attach "
                     f"them (ddlearn.pc.set_coordinates(pc or A, coords), or a DM with "
                     f"coordinates on the KSP) or use {inp.option('partition', 'metis')}")


def boxes(inp: PartitionInput) -> Labels:
    """Box grid of the coordinates (:func:`box_partition` on all ranks' distinct values)."""
    _needs_points(inp, "boxes")
    _check_count(inp)
    values = distinct_values(inp.comm, inp.points)
    error = None
    try:  # the values are all ranks': every rank raises or none
        part, axis_index, offsets = box_partition(inp.points, inp.N, values)
    except ValueError as e:
        error = f"{e}: use fewer subdomains or {inp.option('partition', 'rcb')} (or metis)"
    collective_check(inp.comm, error is None, str(error))
    return Labels(part, inp.N, (axis_index, offsets))


def rcb(inp: PartitionInput) -> Labels:
    """Recursive coordinate bisection, every cut collective."""
    _needs_points(inp, "rcb")
    _check_count(inp)
    g = inp.graph
    return Labels(rcb_labels(g.mpi, inp.points, np.arange(g.lo, g.hi), inp.N, g.n), inp.N)


def metis(inp: PartitionInput) -> Labels:
    """METIS on the whole graph, gathered on rank 0."""
    _check_count(inp)
    g = inp.graph
    whole = gather_rows(g.mpi, g.rows)
    pieces = on_root(g.mpi, lambda: np.split(metis_partition(whole, inp.N), g.ranges[1:-1]))
    return Labels(g.mpi.scatter(pieces, root=0), inp.N)


def local_metis(inp: PartitionInput) -> Labels:
    """METIS on each rank's own nodes, into its share of ``N``."""
    _check_count(inp)
    g, N = inp.graph, inp.N
    nodes = np.diff(g.ranges)
    me = g.mpi.Get_rank()
    shares = rank_shares(nodes, N)
    collective_check(inp.comm, shares[me] <= nodes[me],
                     f"{inp.option('partition', 'local_metis')} gives this rank {shares[me]} of "
                     f"the {N} subdomains but it owns {nodes[me]} nodes: use fewer subdomains or "
                     f"{inp.option('partition', 'metis')} (or rcb)")
    return Labels(int(shares[:me].sum()) + metis_partition(g.local_block(), int(shares[me])), N)


#: clusters per subdomain in the first stage of ``cluster_metis`` (16 gave jaggier parts and
#: more iterations on examples/petsc_client.py's channels; the clusters' graph stays O(N))
CLUSTERS = 64


def cluster_metis(inp: PartitionInput) -> Labels:
    r"""METIS in two stages, nothing of size :math:`n` on one rank: each rank's own nodes cut
    by METIS (its diagonal block) into about ``CLUSTERS`` clusters per subdomain of its
    share; the clusters' graph (:math:`\approx 64N` vertices weighted by their nodes, edges by
    the couplings between them) gathered and cut into ``N`` parts by METIS on rank 0; each
    rank's clusters take their parts back. Parts cross rank boundaries freely. A graph of at
    most ``4 CLUSTERS N`` nodes is gathered and cut by :func:`metis` instead."""
    _check_count(inp)
    g, N = inp.graph, inp.N
    mpi, nodes = g.mpi, g.hi - g.lo
    total = mpi.allreduce(nodes)
    if total <= 4 * CLUSTERS * N:
        # clusters of fewer than 4 nodes: the whole graph is no larger than the clusters'
        # would be (a coarse level's), so it is gathered
        return metis(inp)
    # at least 4 nodes a cluster: METIS asked for nearly one part per vertex leaves most empty
    k = int(min(max(1, nodes // 4), max(1, round(CLUSTERS * N * nodes / max(total, 1))))) \
        if nodes else 0
    block = g.local_block()
    local_cluster = metis_partition(block, k) if k else np.zeros(0, np.int64)
    # clusters are the connected pieces of METIS's (a part of a rank's rows may be several);
    # one left empty is no vertex of the clusters' graph
    B = block.tocoo()
    same = local_cluster[B.row] == local_cluster[B.col]
    local_cluster = connected_components(
        sp.csr_matrix((np.ones(int(same.sum())), (B.row[same], B.col[same])),
                      shape=(nodes, nodes)), directed=False)[1].astype(np.int64)
    k = int(local_cluster.max(initial=-1)) + 1
    first = mpi.exscan(k) or 0
    clusters = int(mpi.allreduce(k))
    cluster = first + local_cluster
    E = g.rows.tocoo()
    col = E.col.astype(np.int64)
    away = (col < g.lo) | (col >= g.hi)
    halo = np.unique(col[away])
    of = np.empty(len(col), dtype=np.int64)
    of[~away] = cluster[col[~away] - g.lo]
    of[away] = fetch_values(mpi, g.ranges, cluster[:, None], halo)[
        np.searchsorted(halo, col[away]), 0]
    C = sp.csr_matrix((np.ones(len(col), dtype=np.int64), (local_cluster[E.row], of)),
                      shape=(k, clusters))
    C.sum_duplicates()
    C = C.tocoo()
    inner = C.col != first + C.row  # couplings inside a cluster are no edge
    edges = mpi.gather(np.column_stack([first + C.row[inner], C.col[inner], C.data[inner]]),
                       root=0)
    weights = mpi.gather(np.bincount(local_cluster, minlength=k), root=0)

    def top():  # on rank 0; a METIS failure is raised on every rank
        e = np.concatenate(edges)
        G = sp.csr_matrix((e[:, 2], (e[:, 0], e[:, 1])), shape=(clusters, clusters))
        return np.split(metis_partition(G, N, np.concatenate(weights), edge_weights=True),
                        np.cumsum([len(w) for w in weights])[:-1])
    mine = mpi.scatter(on_root(mpi, top), root=0)
    return Labels(mine[local_cluster] if k else np.zeros(0, np.int64), N)


def local(inp: PartitionInput) -> Labels:
    """Each rank's nodes are one part (``N`` = the number of ranks)."""
    g = inp.graph
    return Labels(np.full(g.hi - g.lo, g.mpi.Get_rank(), dtype=np.int64), g.mpi.Get_size())


def groups(inp: PartitionInput) -> Labels:
    r"""Parts of a coarse matrix made of whole column groups (one per fine subdomain,
    :func:`~.petsc_rows.column_groups`): each rank splits the groups in its rows (cut at its
    ownership range where a group crosses it) into its share of the ``N`` parts, proportional
    to its number of groups, by METIS on the groups' graph :math:`G = S^T|A_{rr}|S`
    (:math:`S`: row-to-group incidence, :math:`A_{rr}` this rank's diagonal block); empty parts
    are dropped. Local: no gather; the parts are unions of neighbouring fine subdomains'
    coarse functions."""
    A, mpi, N, opt = inp.matrix, inp.comm, inp.N, inp.option
    breaks = inp.groups
    collective_check(mpi, A is not None and breaks is not None,
                     f"the 'groups' partitioner cuts a coarse matrix along its column groups, "
                     f"and this {'matrix' if A is not None else 'point set'} carries none: use "
                     f"{opt('partition', 'metis')}")
    _check_count(inp)
    lo, hi = A.getOwnershipRange()
    cuts = np.unique(np.concatenate([[lo, hi], breaks[(breaks > lo) & (breaks < hi)]]))
    mine = len(cuts) - 1 if hi > lo else 0
    counts = np.array(mpi.allgather(mine))
    total = int(counts.sum())
    P = mpi.Get_size()
    collective_check(mpi, N <= total,
                     f"{opt('subdomains', N)}: this coarse matrix has {total} groups of coarse "
                     f"functions (one per fine subdomain) on {P} ranks, so use "
                     f"{opt('subdomains', f'between {P} and {total}')}, or "
                     f"{opt('partition', 'metis')} to cut its rows instead")
    shares = np.ones(len(counts), dtype=np.int64)
    for _ in range(N - len(counts)):  # the next part to the rank with most groups per part
        room = np.where(shares < counts, counts / shares, -1.0)
        shares[int(np.argmax(room))] += 1
    share = int(shares[mpi.Get_rank()])
    indptr, indices, values = A.getValuesCSR()
    diagonal = (indices >= lo) & (indices < hi)
    row_of = np.repeat(np.arange(hi - lo), np.diff(indptr))
    group = np.searchsorted(cuts, np.arange(lo, hi), side="right") - 1
    S = sp.csr_matrix((np.ones(hi - lo), (np.arange(hi - lo), group)), shape=(hi - lo, mine))
    B = sp.csr_matrix((np.abs(values[diagonal]), (row_of[diagonal], indices[diagonal] - lo)),
                      shape=(hi - lo, hi - lo))
    G = sp.csr_matrix(S.T @ B @ S)
    G.setdiag(0)
    G.eliminate_zeros()
    G = ((G + G.T) != 0).astype(np.int8).tocsr()
    part = np.arange(mine) if share == mine else metis_partition(G, share)
    used, row_part = np.unique(part[group], return_inverse=True)
    first = mpi.exscan(len(used)) or 0
    return Labels(first + row_part[::inp.block_size].astype(np.int64),
                  int(mpi.allreduce(len(used))))


#: every partitioner by name: the one list of names (options, errors, docs)
PARTITIONERS: dict[str, Callable[[PartitionInput], Labels]] = {
    "boxes": boxes,
    "rcb": rcb,
    "metis": metis,
    "local_metis": local_metis,
    "cluster_metis": cluster_metis,
    "local": local,
    "groups": groups,
}


#: PETSc's ``MatPartitioning`` packages, which this build does not configure: Debian's
#: PT-Scotch and ParMETIS link OpenMPI, the project's PETSc runs on MPICH
PETSC_PACKAGES = ("parmetis", "ptscotch", "chaco", "party")


def unknown_partitioner(name: str, option: str) -> str:
    """The error for a partitioner ``name`` not in :data:`PARTITIONERS`, given by ``option``
    (with the PC's prefix, or the keyword): a PETSc package named as what the build lacks."""
    names = ", ".join(PARTITIONERS)
    if str(name).lower() in PETSC_PACKAGES:
        return (f"{option} {name}: PETSc's MatPartitioning package {name} is not in this build "
                f"(its MPI would have to be the project's MPICH); cluster_metis partitions the "
                f"graph without gathering it (METIS on each rank's rows, then on the clusters); "
                f"choose one of {names}")
    return f"unknown partitioner {name!r} ({option}); choose one of {names}"


def default_partitioner(has_groups: bool, has_coordinates: bool, ranks: int = 1) -> str:
    """``groups`` on a coarse matrix carrying its column groups, else ``boxes`` with
    coordinates; from the graph alone ``metis`` on one rank (which holds the whole graph) and
    ``cluster_metis`` on several (nothing of size :math:`n` gathered)."""
    if has_groups:
        return "groups"
    if has_coordinates:
        return "boxes"
    return "metis" if ranks == 1 else "cluster_metis"


def partition_points(name: str, coords: np.ndarray, graph: sp.csr_matrix, N: int) -> Labels:
    """``N`` parts of the points ``coords`` (shape ``(T, dim)``) with adjacency ``graph``
    (symmetric, no diagonal) by the partitioner ``name`` of :data:`PARTITIONERS`, on this
    process alone (the token layouts' call; errors name their keywords).

    Raises
    ------
    ValueError
        For an unknown name, a partitioner that needs what a point set lacks (``groups``), a
        partitioner that does not give ``N`` parts here (``local``: one per process), or a
        partition the points do not allow (more boxes along an axis than distinct
        coordinates).
    """
    if name not in PARTITIONERS:
        raise ValueError(unknown_partitioner(name, "partitioner="))
    T = len(coords)
    G = DistributedGraph(MPI.COMM_SELF, sp.csr_matrix(graph), np.array([0, T]))
    found = PARTITIONERS[name](PartitionInput(G, coords, N, prefix=None))
    if found.N != N:
        raise ValueError(f"partitioner={name!r} makes {found.N} part(s) of one process's points "
                         f"where {N} were asked for: use rcb, metis or boxes")
    return found
