r"""Gather-free pieces of a partition: every rank holds its own rows, the halo its subdomains'
overlap reaches, and :math:`O(N)` metadata (``N`` subdomains), never the whole graph.

- :func:`exchange` and :func:`fetch_values`: rows of integers sent to given ranks, and the
  values other ranks hold for given nodes (a halo), by all-to-alls of the data moved only.
- :class:`DistributedGraph`: each rank's rows of the symmetrised pattern :math:`|A| + |A|^T`
  on the nodes (block size :math:`b`: node :math:`a` is dofs :math:`b a .. b a + b - 1`), and
  any rank's rows fetched on demand.
- :func:`distinct_values`: the sorted distinct coordinate values per axis, unioned over the
  ranks (:math:`n^{1/d}` per axis on a tensor grid): all a box partition needs.
- :func:`rcb_labels`: recursive coordinate bisection with every cut found collectively.
- :func:`rank_shares`: ``N`` split over the ranks in proportion to their rows.
- :func:`balanced_holders`, :func:`assign_holders` and :func:`redistribute`: who holds each
  part (every rank its share),
  and sending each holder its parts' rows (one all-to-all).
- :func:`grow_overlap_parallel`: the parts grown by graph layers, the halo rows fetched once
  per layer for all of a rank's subdomains together.

Every function is collective over the matrix's communicator unless it says otherwise, and the
number of collective calls does not grow with the number of subdomains.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

__all__ = ["exchange", "float_bits", "bits_float", "fetch_values", "gather_rows",
           "DistributedGraph", "distinct_values", "rcb_labels", "rank_shares", "balanced_holders",
           "assign_holders",
           "redistribute", "grow_overlap_parallel"]

#: entries of the histogram one RCB selection step allreduces (groups x buckets), at most
_HISTOGRAM = 1 << 16


def exchange(mpi: MPI.Comm, dest: np.ndarray, payload: np.ndarray):
    """Send row ``k`` of the integer array ``payload`` (shape ``(m, w)``) to rank ``dest[k]``;
    return the rows received and the rank each came from (one ``Alltoall`` of the counts, one
    ``Alltoallv``)."""
    P = mpi.Get_size()
    width = payload.shape[1]
    order = np.argsort(dest, kind="stable")
    send = np.ascontiguousarray(payload[order], dtype=np.int64).ravel()
    counts = np.bincount(dest, minlength=P).astype(np.int64)
    got = np.empty(P, dtype=np.int64)
    mpi.Alltoall(counts, got)
    recv = np.empty(int(got.sum()) * width, dtype=np.int64)
    mpi.Alltoallv([send, (width * counts, width * _starts(counts)), MPI.INT64_T],
                  [recv, (width * got, width * _starts(got)), MPI.INT64_T])
    return recv.reshape(-1, width), np.repeat(np.arange(P), got)


def float_bits(x: np.ndarray) -> np.ndarray:
    """Floats as the ``int64`` of their bits: real values in an integer :func:`exchange`."""
    return np.ascontiguousarray(x, dtype=np.float64).view(np.int64)


def bits_float(x: np.ndarray) -> np.ndarray:
    """The inverse of :func:`float_bits`."""
    return np.ascontiguousarray(x, dtype=np.int64).view(np.float64)


def fetch_values(mpi: MPI.Comm, ranges: np.ndarray, values: np.ndarray,
                 which: np.ndarray) -> np.ndarray:
    """The rows of ``values`` (this rank's nodes ``ranges[r]..ranges[r+1]-1``, an integer array
    of shape ``(local, w)``; floats through :func:`float_bits`) that their owners hold for
    the global nodes ``which`` (any rank's, distinct), shape ``(len(which), w)`` (collective: the
    requests go to the owners and the rows come back, two all-to-alls)."""
    which = np.asarray(which, dtype=np.int64)
    lo = int(ranges[mpi.Get_rank()])
    asked, by = exchange(mpi, np.searchsorted(ranges, which, side="right") - 1, which[:, None])
    reply, _ = exchange(mpi, by, np.column_stack([asked[:, 0], values[asked[:, 0] - lo]]))
    out = np.empty((len(which), values.shape[1]), dtype=np.int64)
    order = np.argsort(which, kind="stable")
    out[order[np.searchsorted(which[order], reply[:, 0])]] = reply[:, 1:]
    return out


def _starts(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


def _unique(a: np.ndarray) -> np.ndarray:
    """Sorted distinct integers of ``a`` (a sort and a difference: faster here than
    ``np.unique``'s hashing)."""
    a = np.sort(a)
    return a[np.concatenate([[True], a[1:] != a[:-1]])] if len(a) else a


def _pattern(rows: np.ndarray, cols: np.ndarray, shape) -> sp.csr_matrix:
    """The pattern of the entries ``(rows, cols)``: sorted, unique columns per row."""
    M = sp.csr_matrix((np.ones(len(rows), dtype=np.int8), (rows, cols)), shape=shape)
    M.sum_duplicates()
    M.data[:] = 1
    return M


def gather_rows(comm, M: sp.csr_matrix) -> sp.csr_matrix | None:
    """Each rank's rows ``M`` (in rank order) stacked into one scipy CSR matrix on rank 0
    (``None`` elsewhere; collective over ``comm``, a PETSc or mpi4py communicator): the inverse
    of :func:`~.petsc_rows.scatter_rows`. :math:`O(n)` on rank 0: only the paths that say so
    call it."""
    mpi = comm.tompi4py() if hasattr(comm, "tompi4py") else comm
    parts = mpi.gather(M, root=0)
    return sp.vstack(parts).tocsr() if parts is not None else None


class DistributedGraph:
    r"""This rank's rows of a symmetric graph of ``n`` nodes distributed in contiguous row
    blocks (``ranges``, one offset per rank and the end): ``rows``, shape ``(local, n)``,
    global columns, no diagonal.

    :meth:`from_matrix` builds the nodes' graph of a matrix, :meth:`fetch` brings any rank's
    rows; nothing here holds more than a rank's own rows and those it fetched.
    """

    def __init__(self, mpi: MPI.Comm, rows: sp.csr_matrix, ranges: np.ndarray):
        self.mpi, self.rows, self.ranges = mpi, rows, np.asarray(ranges, dtype=np.int64)
        self.lo, self.hi = (int(x) for x in self.ranges[mpi.Get_rank():mpi.Get_rank() + 2])
        self.n = int(self.ranges[-1])

    @classmethod
    def from_matrix(cls, A, bs: int = 1, nonzero: bool = False) -> "DistributedGraph":
        r"""The nodes' graph of the PETSc matrix ``A``, symmetrised: node :math:`a` and :math:`c 
e a` coupled
        if :math:`a_{jl} 
e 0` or :math:`a_{lj} 
e 0` for a dof :math:`j` of :math:`a` and
        :math:`l` of :math:`c` (block size :math:`b`: node :math:`a` is dofs
        :math:`b a .. b a + b - 1`). The transposed entries of other ranks' columns go to their
        owners in one all-to-all (the halo's size, not the matrix's). ``nonzero``: couplings
        whose entries are all stored zeros (a Dirichlet row's, zeroed in place) left out."""
        mpi = A.getComm().tompi4py()
        ranges = np.asarray(A.getOwnershipRanges(), dtype=np.int64) // bs
        lo = int(ranges[mpi.Get_rank()])
        nl, n = int(ranges[mpi.Get_rank() + 1]) - lo, int(ranges[-1])
        indptr, indices, values = A.getValuesCSR()
        if nonzero:
            keep = values != 0
            mine = _pattern(np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))[keep] // bs,
                            np.asarray(indices, dtype=np.int64)[keep] // bs, (nl, n))
        elif bs == 1:  # PETSc's rows already hold sorted, distinct columns
            mine = sp.csr_matrix((np.ones(len(indices), dtype=np.int8), indices, indptr),
                                 shape=(nl, n))
        else:
            mine = _pattern(np.repeat(np.arange(len(indptr) - 1) // bs, np.diff(indptr)),
                            np.asarray(indices, dtype=np.int64) // bs, (nl, n))
        # the transpose: of the own columns by scipy, of the others' by their owners
        own = mine[:, lo:lo + nl].T.tocsr()
        own = sp.csr_matrix((own.data, own.indices + lo, own.indptr), shape=(nl, n))
        E = mine.tocoo()
        r, c = E.row.astype(np.int64) + lo, E.col.astype(np.int64)
        owner = np.searchsorted(ranges, c, side="right") - 1
        away = owner != mpi.Get_rank()
        back, _ = exchange(mpi, owner[away], np.stack([c[away], r[away]], axis=1))
        G = (mine + own + _pattern(back[:, 0] - lo, back[:, 1], (nl, n))).tocsr()
        row = np.repeat(np.arange(nl), np.diff(G.indptr))
        keep = G.indices != row + lo  # no diagonal
        indptr = np.concatenate([[0], np.cumsum(np.bincount(row[keep], minlength=nl))])
        return cls(mpi, sp.csr_matrix((np.ones(int(keep.sum()), dtype=np.int8),
                                       G.indices[keep], indptr), shape=(nl, n)), ranges)

    def local_block(self) -> sp.csr_matrix:
        """The graph among this rank's own nodes (local numbers; not collective)."""
        return self.rows[:, self.lo:self.hi].tocsr()

    def fetch(self, which: np.ndarray) -> sp.csr_matrix:
        """The rows ``which`` (sorted distinct global nodes, any rank's), in that order
        (collective): the requests go to the owners and the rows come back, two all-to-alls."""
        which = np.asarray(which, dtype=np.int64)
        asked, by = exchange(self.mpi, np.searchsorted(self.ranges, which, side="right") - 1,
                              which[:, None])
        R = self.rows[asked[:, 0] - self.lo].tocoo()
        reply, _ = exchange(self.mpi, by[R.row],
                             np.stack([asked[R.row, 0], R.col.astype(np.int64)], axis=1))
        return _pattern(np.searchsorted(which, reply[:, 0]), reply[:, 1], (len(which), self.n))


def distinct_values(mpi: MPI.Comm, coords: np.ndarray) -> list[np.ndarray]:
    """The sorted distinct values of each coordinate axis over all ranks' points ``coords``
    (shape ``(local points, dim)``): each rank's distinct values unioned pairwise up a
    reduction tree, so no rank holds more than the global distinct values of an axis
    (:math:`n^{1/d}` on a tensor grid; up to :math:`n` on a point cloud, where ``rcb`` suits)."""
    return [mpi.allreduce(np.unique(coords[:, a]), op=np.union1d)
            for a in range(coords.shape[1])]


def _float_key(v: np.ndarray) -> np.ndarray:
    """An unsigned integer with the order of the floats ``v`` (IEEE 754: flip the sign bit
    of non-negative values, every bit of negative ones); ``-0.0`` counts as ``0.0``."""
    b = (np.asarray(v, dtype=np.float64) + 0.0).view(np.uint64)
    return np.where(b >> np.uint64(63) != 0, ~b, b | np.uint64(1 << 63))


def _select_below(mpi, group, keys, k, G):
    r"""For each of ``G`` groups, the points whose key is among the group's ``k[g]`` smallest
    over all ranks (``group[p]``: the group of local point ``p``; ``keys``: ``(unsigned
    integer array, bits)`` pairs, compared lexicographically, jointly unique). MSD radix
    selection: per digit of :math:`r` bits, one allreduce of the :math:`(G, 2^r)` histogram of
    the points still tied with the group's selected prefix fixes the next digit of the
    ``k``-th key; a group is done when the selection takes all or none of its tied points.
    :math:`r = \min(8, \log_2(2^{16}/G))`, so at most :math:`\lceil \mathrm{bits}/r \rceil`
    calls of at most :math:`2^{16}` counts however many groups. Needs ``k[g]`` smaller than the
    group's size (or 0)."""
    digit_bits = int(np.clip(np.log2(_HISTOGRAM / G), 1, 8))
    radix = 1 << digit_bits
    below = np.zeros(len(group), dtype=bool)
    tied = np.ones(len(group), dtype=bool)
    k = np.asarray(k, dtype=np.int64).copy()
    done = k == 0
    for key, bits in keys:
        for shift in range((bits - 1) // digit_bits * digit_bits, -1, -digit_bits):
            tied &= ~done[group]
            if done.all():
                return below
            digit = ((key >> np.uint64(shift)) & np.uint64(radix - 1)).astype(np.int64)
            hist = np.bincount(group[tied] * radix + digit[tied], minlength=G * radix)
            mpi.Allreduce(MPI.IN_PLACE, hist, op=MPI.SUM)
            hist = hist.reshape(G, radix)
            upto = np.cumsum(hist, axis=1)
            chosen = np.argmax(upto > k[:, None], axis=1)  # the digit holding the k-th key
            rows = np.arange(G)
            before = upto[rows, chosen] - hist[rows, chosen]
            live = ~done
            below |= tied & live[group] & (digit < chosen[group])
            tied &= digit == chosen[group]
            k[live] -= before[live]
            take_all = live & (k == hist[rows, chosen])
            below |= tied & take_all[group]
            done |= take_all | (k == 0)
    return below  # keys are jointly unique: every group is done after the last digit


def rcb_labels(mpi: MPI.Comm, coords: np.ndarray, gid: np.ndarray, N: int,
               n: int) -> np.ndarray:
    r"""Recursive coordinate bisection of all ranks' points into ``N`` parts; each rank keeps
    its own points ``coords`` (shape ``(local, dim)``, global numbers ``gid`` of ``n``).

    A group of ``c`` parts and :math:`n_g` points is cut across the longest extent of its
    global bounding box (ties: the lowest axis) after the :math:`\mathrm{round}(n_g \lfloor c/2
    \rfloor / c)` smallest points in the order (coordinate, global number); the halves get
    :math:`\lfloor c/2 \rfloor` and :math:`c - \lfloor c/2 \rfloor` parts. All groups of one
    level are cut together: per level two allreduces (counts, bounding boxes) and one
    :func:`_select_below`, so :math:`O(\log N)` levels of :math:`O(1)` calls each. The parts
    are those of the serial :func:`~.partition.rcb_partition` on the gathered points."""
    first = np.zeros(len(coords), dtype=np.int64)
    count = np.full(len(coords), N, dtype=np.int64)
    groups = np.array([[0, N]], dtype=np.int64) if N > 1 else np.zeros((0, 2), np.int64)
    gid_key = (np.asarray(gid, np.int64).astype(np.uint64), max(1, int(n - 1).bit_length()))
    while len(groups):
        G = len(groups)
        moving = count > 1
        g = np.searchsorted(groups[:, 0], first[moving])
        pts = coords[moving]
        sizes = np.bincount(g, minlength=G).astype(np.int64)
        mpi.Allreduce(MPI.IN_PLACE, sizes, op=MPI.SUM)
        box = np.full((G, 2 * coords.shape[1]), -np.inf)
        np.maximum.at(box, g, np.hstack([pts, -pts]))
        mpi.Allreduce(MPI.IN_PLACE, box, op=MPI.MAX)
        extent = np.where(sizes[:, None] > 0, box[:, :coords.shape[1]] + box[:, coords.shape[1]:],
                          0.0)
        axis = np.argmax(extent, axis=1)
        left = groups[:, 1] // 2
        cut = np.rint(sizes * left / groups[:, 1]).astype(np.int64)
        value = pts[np.arange(len(pts)), axis[g]]
        low = _select_below(mpi, g, [(_float_key(value), 64),
                                     (gid_key[0][moving], gid_key[1])], cut, G)
        count[moving] = np.where(low, left[g], groups[g, 1] - left[g])
        first[moving] += np.where(low, 0, left[g])
        children = np.stack([np.stack([groups[:, 0], left], 1),
                             np.stack([groups[:, 0] + left, groups[:, 1] - left], 1)], 1)
        groups = children.reshape(-1, 2)
        groups = groups[groups[:, 1] > 1]
    return first


def rank_shares(rows: np.ndarray, N: int) -> np.ndarray:
    r"""``N`` parts split over the ranks with ``rows[r]`` rows (not collective): one each,
    the other :math:`N - P` in proportion to the rows (largest remainders, ties to the lower
    rank). Needs ``N >= len(rows)``."""
    rows = np.asarray(rows, dtype=np.float64)
    share = (N - len(rows)) * rows / rows.sum()
    counts = 1 + np.floor(share).astype(np.int64)
    rest = N - int(counts.sum())
    counts[np.argsort(-(share - np.floor(share)), kind="stable")[:rest]] += 1
    return counts


def balanced_holders(shared: np.ndarray, rows: np.ndarray, N: int) -> np.ndarray:
    r"""The rank holding each of ``N`` parts (not collective), from the rows ``shared[k, 2]``
    that rank ``shared[k, 1]`` owns of part ``shared[k, 0]`` and every rank's ``rows``:
    rank :math:`r` holds exactly its share :math:`c_r` of :func:`rank_shares` (one part each,
    the rest in proportion to its rows), so that with parts of equal size no rank holds more
    subdomains, factorisations and overlap than another by more than one part. (Giving each
    part to the rank owning most of its rows alone leaves PETSc's row slabs unbalanced, a box
    that spans two slabs going to the lower rank on a tie.)

    The (part, rank) pairs go greedily, most shared rows first (ties: the lower part, then the
    lower rank), to the rank while it has room; a part whose every rank is full goes to the
    rank with the most room left (ties: the lowest). Needs ``N >= len(rows)``."""
    room = rank_shares(rows, N)
    shared = np.asarray(shared, dtype=np.int64).reshape(-1, 3)
    shared = shared[np.lexsort((shared[:, 1], shared[:, 0], -shared[:, 2]))]
    holder = np.full(N, -1, dtype=np.int64)
    for part, r, _ in shared:
        if holder[part] < 0 and room[r] > 0:
            holder[part], room[r] = r, room[r] - 1
    for part in np.flatnonzero(holder < 0):
        r = int(np.argmax(room))
        holder[part], room[r] = r, room[r] - 1
    return holder


def assign_holders(mpi: MPI.Comm, labels: np.ndarray, N: int) -> np.ndarray:
    r""":func:`balanced_holders` of each rank's part ``labels`` of its own rows: one allgather
    of the ranks' row counts and their (part, rows) pairs, :math:`O(N + \sum_r |\{j: r
    \text{ owns rows of part } j\}|)` on every rank, no row data."""
    mine = np.bincount(labels, minlength=N).astype(np.int64)
    touched = np.flatnonzero(mine)
    gathered = mpi.allgather((len(labels), np.stack([touched, mine[touched]], axis=1)))
    shared = [np.column_stack([pr[:, 0], np.full(len(pr), r), pr[:, 1]])
              for r, (_, pr) in enumerate(gathered)]
    return balanced_holders(np.concatenate(shared), np.array([n for n, _ in gathered]), N)


def redistribute(mpi: MPI.Comm, nodes: np.ndarray, labels: np.ndarray,
                 holder: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Send each of this rank's ``nodes`` to the holder of its part ``labels``; return the ids
    of the parts this rank holds (ascending) and their nodes (sorted): one all-to-all of
    ``(node, part)`` pairs, :math:`O(\\text{local rows})` per rank."""
    pairs, _ = exchange(mpi, holder[labels], np.stack([nodes, labels], axis=1))
    pairs = pairs[np.lexsort((pairs[:, 0], pairs[:, 1]))]
    ids = np.flatnonzero(holder == mpi.Get_rank())
    bounds = np.searchsorted(pairs[:, 1], np.concatenate([ids, [len(holder)]]))
    return ids, [pairs[bounds[k]:bounds[k + 1], 0] for k in range(len(ids))]


def grow_overlap_parallel(graph: DistributedGraph, sets, layers: int) -> list[np.ndarray]:
    r"""This rank's node ``sets`` (sorted global nodes, any rank's) grown by ``layers`` layers
    of the distributed ``graph``:
    :math:`I^{(k+1)} = I^{(k)} \cup \{c : g_{ac} \ne 0,\ a \in I^{(k)}\}`.

    Per layer one :meth:`~DistributedGraph.fetch` brings the rows of the rank's union of sets
    that it neither owns nor fetched before; then all sets grow at once, locally, by the sparse
    product :math:`S (K + E)` of the sets' incidence ``S`` with the union's rows ``K``
    (columns renumbered to the nodes they reach, :math:`E` the union itself). Memory: the
    rank's rows and its subdomains' halo rows; calls: two all-to-alls per layer."""
    lo, hi, n = graph.lo, graph.hi, graph.n
    known_ids, known = np.zeros(0, dtype=np.int64), sp.csr_matrix((0, n), dtype=np.int8)
    sets = [np.asarray(s, dtype=np.int64) for s in sets]
    for _ in range(layers):
        members = np.concatenate(sets) if sets else np.zeros(0, dtype=np.int64)
        need = _unique(members)
        mine = (need >= lo) & (need < hi)
        fetch = np.setdiff1d(need[~mine], known_ids, assume_unique=True)
        ids = np.concatenate([known_ids, fetch])
        order = np.argsort(ids, kind="stable")
        known_ids = ids[order]
        known = sp.vstack([known, graph.fetch(fetch)]).tocsr()[order]
        # the union's rows: own ones first, then fetched ones; `at` maps need -> row of K
        K = sp.vstack([graph.rows[need[mine] - lo],
                       known[np.searchsorted(known_ids, need[~mine])]]).tocsr()
        at = np.empty(len(need), dtype=np.int64)
        at[np.flatnonzero(mine)] = np.arange(int(mine.sum()))
        at[np.flatnonzero(~mine)] = np.arange(int(mine.sum()), len(need))
        reach = _unique(np.concatenate([need, K.indices]))
        step = sp.csr_matrix((np.ones(K.nnz, dtype=np.int32), np.searchsorted(reach, K.indices),
                              K.indptr), shape=(len(need), len(reach)))
        step = step + sp.csr_matrix((np.ones(len(need), dtype=np.int32),
                                     (at, np.searchsorted(reach, need))), shape=step.shape)
        S = sp.csr_matrix((np.ones(len(members), dtype=np.int32),
                           (np.repeat(np.arange(len(sets)), [len(s) for s in sets]),
                            at[np.searchsorted(need, members)])), shape=(len(sets), len(need)))
        T = (S @ step).tocsr()
        T.sort_indices()
        sets = [reach[T.indices[T.indptr[k]:T.indptr[k + 1]]] for k in range(len(sets))]
    return sets
