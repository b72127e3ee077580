import numpy as np
import pytest
import scipy.sparse as sp

from ddlearn.decomposition import Decomposition, assign_ranks, box_grid


CASES = [((63,), 4, 2), ((1023,), 8, 2), ((100,), 7, 3), ((50,), 5, 0), ((12, 12), 4, 1),
         ((15, 15), 9, 2), ((16, 10), 6, 1), ((31, 31), 16, 0)]


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
    owners = assign_ranks(10, 4)
    assert owners.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]


@pytest.mark.parametrize("args,match", [
    (((10,), 11, 1), "N must not exceed"),
    (((10,), 2, -1), "non-negative"),
    (((10,), 2, 6), "wider than the smallest subdomain"),
    (((8, 8), 16, 3), "wider than the smallest subdomain"),
    (((10,), 0, 1), "positive integer"),
    (((8, 8), 6, 1), None),
])
def test_bad_decomposition(args, match):
    if match is None:
        Decomposition(*args)  # a valid 2x3 box grid
        return
    with pytest.raises(ValueError, match=match):
        Decomposition(*args)


def test_more_ranks_than_subdomains():
    with pytest.raises(ValueError, match="5 MPI ranks but only 4 subdomains"):
        assign_ranks(4, 5)
