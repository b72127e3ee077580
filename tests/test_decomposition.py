import numpy as np
import pytest
import scipy.sparse as sp

from mpi4py import MPI

from ddlearn.decomposition import Decomposition, assign_ranks, box_grid
from ddlearn.decomposition.coarse import grid_basis, hats_on_boxes


CASES = [((63,), 4, 2), ((1023,), 8, 2), ((100,), 7, 3), ((50,), 5, 0), ((12, 12), 4, 1),
         ((15, 15), 9, 2), ((16, 10), 6, 1), ((31, 31), 16, 0), ((6, 6, 6), 8, 1),
         ((7, 5, 6), 12, 1), ((8, 8, 8), 27, 2), ((9, 4, 5), 6, 0)]


@pytest.mark.parametrize("grid,N,overlap", CASES)
def test_partition_of_unity(grid, N, overlap):
    """Paper eq. (11): sum_i R_i^T D_i R_i = I."""
    dec = Decomposition(grid, N, overlap)
    S = sum(dec.R(i).T @ sp.diags(dec.D(i)) @ dec.R(i) for i in range(N))
    np.testing.assert_allclose(S.toarray(), np.eye(dec.n), atol=1e-15)


@pytest.mark.parametrize("grid,N,overlap", CASES)
def test_owned_sets_partition_and_perm(grid, N, overlap):
    dec = Decomposition(grid, N, overlap)
    assert sorted(dec.perm.tolist()) == list(range(dec.n))
    for I, O in zip(dec.subdomains, dec.owned):
        assert set(O) <= set(I)


def test_1d_neighbours_share_2_overlap_points():
    dec = Decomposition((1023,), 8, 2)
    for a, b in zip(dec.subdomains[:-1], dec.subdomains[1:]):
        assert len(np.intersect1d(a, b)) == 4
    # equal contiguous sets, sizes differ by at most one
    sizes = [len(o) for o in dec.owned]
    assert max(sizes) - min(sizes) <= 1
    assert dec.multiplicity.max() == 2


def test_2d_boxes_and_corner_multiplicity():
    dec = Decomposition((12, 12), 4, 1)
    assert dec.boxes == (2, 2)
    assert dec.multiplicity.max() == 4
    assert all(len(I) == 7 * 7 for I in dec.subdomains)


def test_box_grid_and_rank_assignment():
    assert box_grid(64) == (8, 8) and box_grid(8) == (2, 4) and box_grid(7) == (1, 7)
    assert box_grid(64, 3) == (4, 4, 4) and box_grid(8, 3) == (2, 2, 2)
    assert box_grid(12, 3) == (2, 2, 3) and box_grid(7, 3) == (1, 1, 7)
    owners = assign_ranks(10, 4)
    assert owners.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]


@pytest.mark.parametrize("args,match", [
    (((10,), 11, 1), "N must not exceed"),
    (((10,), 2, -1), "non-negative"),
    (((10,), 2, 6), "wider than the smallest subdomain"),
    (((8, 8), 16, 3), "wider than the smallest subdomain"),
    (((10,), 0, 1), "positive integer"),
    (((8, 8), 6, 1), None),
    (((4, 4, 4), 125, 1), "5 subdomains along x .* N must not exceed"),
    (((6, 6, 6), 7, 1), "7 subdomains along z"),
    (((6, 6, 6), 8, 4), "wider than the smallest subdomain"),
    (((4, 4, 4, 4), 2, 1), "1D, 2D or 3D"),
    (((4, 4, 0), 2, 1), "no interior points"),
    (((8, 8, 8), 12, 1), None),
])
def test_bad_decomposition(args, match):
    if match is None:
        Decomposition(*args)  # a valid 2x3 or 2x2x3 box grid
        return
    with pytest.raises(ValueError, match=match):
        Decomposition(*args)


def test_more_ranks_than_subdomains():
    with pytest.raises(ValueError, match="5 MPI ranks but only 4 subdomains"):
        assign_ranks(4, 5)


def test_3d_boxes_sizes_multiplicities_and_overlap():
    dec = Decomposition((8, 8, 8), 8, 1)
    assert dec.boxes == (2, 2, 2) and dec.n == 512
    assert all(len(O) == 64 for O in dec.owned) and all(len(I) == 125 for I in dec.subdomains)
    # faces of the overlap in 2, edges in 4, the centre corner in 8 subdomains
    assert np.bincount(dec.multiplicity).tolist() == [0, 216, 216, 0, 72, 0, 0, 0, 8]
    # x-neighbours (subdomains 0, 1) share two grid layers: 2 x 5 x 5 points
    assert len(np.intersect1d(dec.subdomains[0], dec.subdomains[1])) == 50
    # subdomain i sits at box (i % Nx, i // Nx % Ny, i // (Nx Ny)), natural index x fastest
    for i, I in enumerate(dec.subdomains):
        ix, iy, iz = I % 8, I // 8 % 8, I // 64
        box = (i % 2, i // 2 % 2, i // 4)
        for sub, b in zip((ix, iy, iz), box):
            assert set(sub) == set(range(max(4 * b - 1, 0), min(4 * b + 5, 8)))
        assert np.all(np.diff(I) > 0) and len(I) == len(set(zip(ix, iy, iz)))
    assert dec.describe() == {"subdomains": 8, "boxes": [2, 2, 2], "overlap": 1}


def test_3d_unequal_boxes_and_explicit_box_grid():
    dec = Decomposition((10, 7, 5), 12, 2, boxes=(3, 2, 2))
    sizes = [len(O) for O in dec.owned]
    assert sum(sizes) == 350 and max(sizes) - min(sizes) <= 4 * 3 + 3 * 4 + 4 * 4
    with pytest.raises(ValueError, match="do not multiply"):
        Decomposition((10, 7, 5), 12, 1, boxes=(3, 4))


@pytest.mark.parametrize("name", ["hats", "nicolaides"])
def test_3d_grid_coarse_spaces(name):
    dec = Decomposition((9, 10, 11), 27, 1)
    Phi = grid_basis(name, dec)
    if name == "hats":
        assert Phi.shape == (990, 8)
        # the tensor product of the 1D hats, column kx + 2 ky + 4 kz, as on any point cloud
        sub = np.stack(np.unravel_index(np.arange(dec.n), dec.grid[::-1])[::-1], axis=1)
        assert abs(Phi - hats_on_boxes(sub, dec.offsets)).max() == 0
        assert Phi.max() == 1.0 and Phi.min() >= 0.0
        peak = Phi[:, 0].toarray().ravel().argmax()
        assert (peak % 9, peak // 9 % 10, peak // 90) == tuple(int(o[1]) for o in dec.offsets)
    else:
        assert Phi.shape == (990, 27)
        np.testing.assert_allclose(np.asarray(Phi.sum(axis=1)).ravel(), 1.0)
    with pytest.raises(ValueError, match="empty"):
        grid_basis("hats", Decomposition((6, 6, 6), 4, 1))  # a 1 x 2 x 2 box grid


@pytest.mark.mpi
def test_3d_distributed_matrix_is_the_serial_one():
    """The 3D problem assembled from each rank's own rows in the subdomain ordering is the
    serial matrix, permuted."""
    from ddlearn.decomposition.petsc_rows import RowLayout
    from ddlearn.decomposition.problems import make_problem
    problem = make_problem("random_inclusions3d", 7, contrast=1e6, seed=2)
    dec = Decomposition(problem.grid, 8, 1)
    layout = RowLayout(dec, MPI.COMM_WORLD)
    A = layout.matrix(problem)
    v = np.random.default_rng(1).standard_normal(dec.n)
    x, y = A.createVecs()
    layout.from_natural(v, x)
    A.mult(x, y)
    np.testing.assert_allclose(layout.to_natural(y), problem.matrix() @ v, rtol=1e-13,
                               atol=1e-13 * abs(problem.matrix() @ v).max())
    for o in (A, x, y):
        o.destroy()


def test_label_groups_with_and_without_a_label_range():
    from ddlearn.decomposition.groups import label_groups

    labels = np.array([2, 0, 2, 5, 0, 2])
    # without n: the labels present, in label order, positions increasing (any integers)
    assert [g.tolist() for g in label_groups(labels)] == [[1, 4], [0, 2, 5], [3]]
    assert [g.tolist() for g in label_groups(labels + 10 ** 12)] == [[1, 4], [0, 2, 5], [3]]
    # with n: one group per label 0..n-1, empty where absent
    got = label_groups(labels, 7)
    assert [len(g) for g in got] == [2, 0, 3, 0, 0, 1, 0]
    assert label_groups([]) == [] and [len(g) for g in label_groups([], 2)] == [0, 0]
