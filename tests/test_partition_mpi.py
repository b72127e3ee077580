"""Gather-free partitions on 1-4 ranks: each equals its serial definition on the gathered
problem (boxes, recursive coordinate bisection, overlap by graph layers, multiplicities), no
partition but ``metis`` gathers, every rank holds a subdomain, and bad input is refused on every
rank without a hang."""
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components
from mpi4py import MPI
from petsc4py import PETSc

from conftest import raised_everywhere
from ddlearn.decomposition import partition, petsc_rows
from ddlearn.decomposition.coarse import hats_on_boxes
from ddlearn.decomposition.parallel_partition import assign_holders, rank_shares
from ddlearn.decomposition.partition import (box_partition, grow_overlap, metis_partition,
                                             rcb_partition)
from ddlearn.decomposition.subdomains import Subdomains

pytestmark = pytest.mark.mpi
COMM = MPI.COMM_WORLD


def _laplacian(grid) -> sp.csr_matrix:
    """The 3/5/7-point Laplacian on ``grid`` (natural ordering, x fastest)."""
    A = None
    for m in grid:
        T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
        A = T if A is None else sp.kron(sp.identity(m), A) + sp.kron(T, sp.identity(A.shape[0]))
    return sp.csr_matrix(A)


def _grid_points(grid) -> np.ndarray:
    axes = np.meshgrid(*[np.linspace(0.0, 1.0, m) for m in grid], indexing="ij")
    return np.stack([a.ravel(order="F") for a in axes], axis=1)


def _graph(S: sp.csr_matrix) -> sp.csr_matrix:
    G = ((abs(S) + abs(S.T)) != 0).astype(np.int8).tolil()
    G.setdiag(0)
    return G.tocsr()


def _distributed(S: sp.csr_matrix, bs: int = 1, weights=None):
    """``S`` on the ranks in whole-node row blocks in proportion to ``weights`` (by default
    uneven, later ranks own more): ``(A, lo, hi)``."""
    nodes = S.shape[0] // bs
    weights = 1.0 + 0.5 * np.arange(COMM.size) if weights is None else np.asarray(weights)
    off = np.concatenate([[0], np.round(np.cumsum(weights) / weights.sum() * nodes)]).astype(int)
    lo, hi = bs * off[COMM.rank], bs * off[COMM.rank + 1]
    rows = S[lo:hi].tocsr()
    rows.sort_indices()
    A = PETSc.Mat().createAIJWithArrays(
        ((hi - lo, S.shape[0]), (hi - lo, S.shape[0])),
        (rows.indptr.astype(PETSc.IntType), rows.indices.astype(PETSc.IntType), rows.data),
        comm=PETSc.COMM_WORLD)
    return A, lo, hi


@pytest.fixture
def no_gather(monkeypatch):
    """The partition must not gather the matrix or its graph on one rank."""
    def refuse(*args, **kwargs):
        raise AssertionError("the gather-free partition gathered rows on one rank")
    monkeypatch.setattr(partition, "gather_rows", refuse)  # what the partitioners call
    for name in ("gather_rows", "gather_matrix"):
        monkeypatch.setattr(petsc_rows, name, refuse)


def _by_id(s: Subdomains, which: str = "overlapping") -> dict:
    """Every rank's subdomains, gathered on all ranks, by global id."""
    mine = {int(i): x for i, x in zip(s.ids, getattr(s, which))}
    return {i: x for d in COMM.allgather(mine) for i, x in d.items()}


def _check_against(s: Subdomains, S: sp.csr_matrix, part: np.ndarray, bs: int):
    """``s`` is ``part`` (one label per node) grown serially on ``S``'s graph, with the
    multiplicities of those sets as weights."""
    G = _graph(S[::bs, ::bs]) if bs > 1 else _graph(S)
    inc = grow_overlap(G, part, s.N, s.overlap)
    m = np.repeat(np.diff(inc.tocsr().indptr), bs)
    owned, grown = _by_id(s, "owned"), _by_id(s)
    assert sorted(owned) == list(range(s.N))
    for i in range(s.N):
        nodes = inc.indices[inc.indptr[i]:inc.indptr[i + 1]]
        dofs = (bs * np.sort(nodes)[:, None] + np.arange(bs)).ravel()
        np.testing.assert_array_equal(grown[i], dofs)
        np.testing.assert_array_equal(owned[i] // bs, np.repeat(np.flatnonzero(part == i), bs))
    for I, w in zip(s.overlapping, s.weights):
        np.testing.assert_allclose(w, 1.0 / m[I])
    np.testing.assert_array_equal(s.sizes, [len(grown[i]) for i in range(s.N)])


@pytest.mark.parametrize("grid,N,bs", [((13, 11), 6, 1), ((13, 11), 6, 2), ((7, 6, 5), 8, 1),
                                       ((7, 6, 5), 12, 2)])
def test_gather_free_boxes_are_the_gathered_boxes_and_their_hats(grid, N, bs, no_gather):
    L = _laplacian(grid)
    X = _grid_points(grid)
    if bs == 1:  # rows in a shuffled numbering: the boxes follow the coordinates, not the rows
        perm = np.random.default_rng(3).permutation(len(X))
        L, X = L[perm][:, perm].tocsr(), X[perm]
    S = sp.kron(L, np.array([[2.0, 1.0], [1.0, 2.0]]), format="csr") if bs > 1 else L
    A, lo, hi = _distributed(S, bs)
    s = Subdomains.from_matrix(A, N, 1, X[lo // bs:hi // bs], "boxes", block_size=bs)
    part, axis_index, offsets = box_partition(X, N)
    _check_against(s, S, part, bs)
    np.testing.assert_array_equal(s.boxes[0], np.repeat(axis_index, bs, axis=0)[lo:hi])
    for a, b in zip(s.boxes[1], offsets):
        np.testing.assert_array_equal(a, b)
    Phi = hats_on_boxes(axis_index, offsets)
    assert abs(hats_on_boxes(*s.boxes) - Phi[np.arange(lo, hi) // bs]).max() == 0
    assert {"graph_s", "label_s", "distribute_s", "overlap_s", "multiplicity_s"} <= set(s.timing)
    A.destroy()


@pytest.mark.parametrize("grid,N", [((8, 7, 6), 5), ((8, 7, 6), 8), ((8, 7, 6), 13),
                                    ((17, 16), 7)])
def test_parallel_rcb_is_serial_rcb_and_balanced(grid, N, no_gather):
    L = _laplacian(grid)
    X = _grid_points(grid)
    A, lo, hi = _distributed(L)
    s = Subdomains.from_matrix(A, N, 1, X[lo:hi], "rcb")
    part = rcb_partition(X, N)
    _check_against(s, L, part, 1)
    counts = np.bincount(part, minlength=N)
    assert np.abs(counts - len(X) / N).max() < 1  # every part within one of the ideal share
    A.destroy()


def test_parallel_rcb_on_a_point_cloud_with_ties(no_gather):
    rng = np.random.default_rng(5)
    n = 300
    X = np.round(rng.uniform(-1, 1, size=(n, 2)), 1)  # many equal coordinates
    near = np.linalg.norm(X[:, None] - X[None], axis=2) < 0.2  # a geometric graph
    S = sp.csr_matrix(near.astype(float))
    A, lo, hi = _distributed(S)
    s = Subdomains.from_matrix(A, 9, 1, X[lo:hi], "rcb")
    _check_against(s, S, rcb_partition(X, 9), 1)
    A.destroy()


@pytest.mark.parametrize("overlap", [1, 2])
def test_user_parts_on_any_rank_grow_like_the_serial_overlap(overlap):
    """The parts of a structurally nonsymmetric matrix handed to ranks round-robin (so a rank's
    sets hold other ranks' rows) grow by layers of the symmetrised graph."""
    L = _laplacian((12, 10))
    n = L.shape[0]
    S = (L + sp.random(n, n, density=0.01, random_state=2) * 0.1).tocsr()  # a_jl != a_lj
    part = metis_partition(_graph(S), 7)
    A, _, _ = _distributed(S)
    mine = [np.flatnonzero(part == i) for i in range(7) if i % COMM.size == COMM.rank]
    s = Subdomains.from_sets(A, mine, overlapping=False, overlap=overlap)
    numbering = np.concatenate(COMM.allgather([i for i in range(7) if i % COMM.size == COMM.rank]))
    _check_against(s, S, np.argsort(numbering)[part], 1)  # from_sets numbers rank by rank
    A.destroy()


@pytest.mark.parametrize("bs", [1, 2])
def test_local_metis_cuts_each_ranks_rows_into_its_share(bs, no_gather):
    L = _laplacian((14, 13))
    S = sp.kron(L, np.eye(2), format="csr") if bs > 1 else L
    A, lo, hi = _distributed(S, bs)
    N = 3 * COMM.size + 1
    s = Subdomains.from_matrix(A, N, 1, None, "local_metis", block_size=bs)
    owned = _by_id(s, "owned")
    assert sorted(owned) == list(range(N))
    every = np.sort(np.concatenate(list(owned.values())))
    np.testing.assert_array_equal(every, np.arange(S.shape[0]))  # each row in one part
    assert all(np.all((o >= lo) & (o < hi)) for o in s.owned)  # parts stay on their rank
    shares = rank_shares(np.diff(A.getOwnershipRanges()) // bs, N)
    assert len(s.ids) == shares[COMM.rank]
    part = np.empty(S.shape[0] // bs, dtype=np.int64)
    for i, o in owned.items():
        part[o[::bs] // bs] = i
    _check_against(s, S, part, bs)
    A.destroy()


@pytest.mark.parametrize("bs", [1, 2])
def test_cluster_metis_is_the_default_without_coordinates_on_several_ranks(bs, no_gather):
    """Two-stage METIS (a graph above ``4 CLUSTERS N`` nodes: smaller ones are gathered):
    every part non-empty, each row in one part, the parts balanced and connected in the graph,
    grown like the serial overlap; the default on several ranks."""
    L = _laplacian((60, 50))
    S = sp.kron(L, np.eye(2), format="csr") if bs > 1 else L
    A, lo, hi = _distributed(S, bs)
    N = 2 * COMM.size + 3
    assert L.shape[0] > 4 * partition.CLUSTERS * N
    s = Subdomains.from_matrix(A, N, 1, None, None if COMM.size > 1 else "cluster_metis",
                               block_size=bs)
    assert s.partitioner == "cluster_metis"
    owned = _by_id(s, "owned")
    part = np.empty(S.shape[0] // bs, dtype=np.int64)
    for i, o in owned.items():
        part[o[::bs] // bs] = i
    np.testing.assert_array_equal(np.sort(np.concatenate(list(owned.values()))),
                                  np.arange(S.shape[0]))
    sizes = np.bincount(part, minlength=N)
    assert sizes.min() > 0 and sizes.max() <= 1.5 * sizes.mean(), sizes
    G = _graph(L)
    for i in range(N):
        inside = np.flatnonzero(part == i)
        assert connected_components(G[inside][:, inside])[0] == 1, i
    _check_against(s, S, part, bs)
    A.destroy()


def test_gathered_metis_still_available_and_gather_part():
    L = _laplacian((15, 15))
    A, lo, hi = _distributed(L)
    s = Subdomains.from_matrix(A, 6, 1, None, "metis")
    part = s.gather_part()
    if COMM.rank == 0:
        np.testing.assert_array_equal(part, metis_partition(_graph(L), 6))
    else:
        assert part is None
    _check_against(s, L, COMM.bcast(part, root=0), 1)
    A.destroy()


@pytest.mark.mpi(min_size=2)
def test_every_rank_holds_a_part_even_if_it_owns_the_most_rows_of_none():
    # rank 0 owns most rows of every part, the others a few rows of parts 0 and 1
    N = COMM.size + 1
    labels = np.repeat(np.arange(N), 10) if COMM.rank == 0 else np.array([0, 1])
    holder = assign_holders(COMM, labels, N)
    assert sorted(set(holder.tolist())) == list(range(COMM.size))
    assert np.count_nonzero(holder == 0) == 2  # rank 0 gives up only what the others need


@pytest.mark.mpi(min_size=2)
def test_every_rank_holds_its_share_even_where_one_rank_owns_rows_of_every_part():
    # equal rows everywhere; rank 0 owns a few rows of every part, rank r > 0 most of part r:
    # by majority alone rank 0 would hold N - P + 1 parts and the others one each
    N = 2 * COMM.size
    labels = np.repeat(np.arange(N), 4) if COMM.rank == 0 else np.full(4 * N, COMM.rank)
    holder = assign_holders(COMM, labels, N)
    assert np.array_equal(np.bincount(holder, minlength=COMM.size),
                          rank_shares(np.full(COMM.size, 4 * N), N))
    assert all(holder[r] == r for r in range(1, COMM.size))  # its own part first


@pytest.mark.mpi(min_size=2)
def test_the_default_boxes_are_spread_evenly_over_petsc_row_slabs():
    """PETSc's row slabs of a 3D grid against 4 x 4 x 4 boxes: a box spans two slabs, so
    the rank owning most of its rows would hold most boxes on some ranks; each rank holds its
    share instead."""
    L = _laplacian((8, 8, 8))
    X = _grid_points((8, 8, 8))
    A, lo, hi = _distributed(L)
    s = Subdomains.from_matrix(A, 64, 1, X[lo:hi], "boxes")
    held = COMM.allgather(len(s.ids))
    assert held == rank_shares(np.diff(A.getOwnershipRanges()), 64).tolist()
    A.destroy()


@pytest.mark.mpi(min_size=2)
def test_a_rank_without_rows_still_holds_a_subdomain(no_gather):
    L = _laplacian((9, 8))
    X = _grid_points((9, 8))
    A, lo, hi = _distributed(L, weights=[1.0] * (COMM.size - 1) + [0.0])
    s = Subdomains.from_matrix(A, COMM.size + 2, 1, X[lo:hi], "rcb")
    assert len(s.ids) >= 1
    _check_against(s, L, rcb_partition(X, COMM.size + 2), 1)
    A.destroy()


@pytest.mark.mpi(min_size=2)
def test_bad_input_is_refused_on_every_rank():
    L = _laplacian((9, 8))
    X = _grid_points((9, 8))

    def run(N, coords=lambda lo, hi: X[lo:hi], partitioner="rcb", weights=None):
        def go():
            A, lo, hi = _distributed(L, weights=weights)
            try:
                Subdomains.from_matrix(A, N, 1, coords(lo, hi), partitioner)
            finally:
                A.destroy()
        return go

    def some(lo, hi):
        return X[lo:hi] if COMM.rank == 0 else None

    def mixed_dimensions(lo, hi):
        return X[lo:hi] if COMM.rank == 0 else X[lo:hi, :1]

    def none(lo, hi):
        return None

    empty_last = [1.0] * (COMM.size - 1) + [0.0]
    cases = [(run(COMM.size - 1), "fewer than the"),
             (run(L.shape[0] + 1), "is not between 1 and the number of rows"),
             (run(4, some), "coordinates were given on some ranks only"),
             (run(4, mixed_dimensions), "all of the same dimension"),
             (run(11, partitioner="boxes"), "boxes along axis"),
             (run(4, partitioner="voronoi"), "unknown partitioner"),
             (run(4, none, partitioner="ptscotch"),
              "MatPartitioning package ptscotch is not in this build"),
             (run(4, none, partitioner="boxes"), "needs coordinates"),
             (run(COMM.size + 2, none, "local_metis", empty_last),
              "-ddlearn_partition local_metis gives this rank")]
    for go, expected in cases:
        msgs = raised_everywhere(go)
        assert all(m and expected in m for m in msgs), (expected, msgs)
