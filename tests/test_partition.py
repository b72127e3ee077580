"""Subdomains of any matrix: box partitions reproduce ddlearn's structured boxes in any ordering,
overlap grows by graph layers, the partition of unity holds, hats on boxes are the Q1 hats."""
import numpy as np
import pytest
import scipy.sparse as sp

from ddlearn.decomposition import Decomposition
from ddlearn.decomposition.coarse import hats_on_boxes, interface_hats, q1_hats
from ddlearn.decomposition.partition import (box_partition, grow_overlap, metis_partition,
                                             rcb_partition)
from ddlearn.decomposition.problems import make_problem


def _graph(A):
    G = (abs(A) + abs(A.T) != 0).astype(np.int8).tolil()
    G.setdiag(0)
    return G.tocsr()


@pytest.mark.parametrize("grid,N", [((40,), 8), ((23, 23), 9), ((31, 31), 16)])
def test_boxes_are_ddlearns_boxes_in_any_ordering(grid, N):
    p = make_problem("poisson1d" if len(grid) == 1 else "poisson2d", grid[0])
    dec = Decomposition(p.grid, N, 1)
    shuffle = np.random.default_rng(0).permutation(p.n)  # row k holds natural unknown shuffle[k]
    part, axis_index, offsets = box_partition(p.coordinates()[shuffle], N)
    for i in range(N):
        np.testing.assert_array_equal(np.sort(shuffle[part == i]), dec.owned[i])
    ref = interface_hats(dec) if len(grid) == 1 else q1_hats(dec)
    Phi = hats_on_boxes(axis_index, offsets)
    assert abs(Phi - ref[shuffle]).max() == 0


def test_overlap_grows_by_graph_layers_and_weights_are_a_partition_of_unity():
    p = make_problem("poisson2d", 20)
    G = _graph(p.matrix())
    part = metis_partition(G, 6)
    assert sorted(np.unique(part)) == list(range(6))
    S1, S2 = grow_overlap(G, part, 6, 1), grow_overlap(G, part, 6, 2)
    for i in range(6):
        owned = np.flatnonzero(part == i)
        layer1 = np.unique(np.concatenate([owned, G[owned].indices]))
        np.testing.assert_array_equal(S1[:, i].indices, layer1)
        assert set(S1[:, i].indices) < set(S2[:, i].indices)
    m = np.asarray(S2.sum(axis=1)).ravel()
    D = sp.diags(1.0 / m.astype(float))
    total = sum(sp.diags(S2[:, i].toarray().ravel().astype(float)) @ D for i in range(6))
    np.testing.assert_allclose(total.diagonal(), 1.0)


def test_rcb_balances_any_number_of_parts():
    pts = np.random.default_rng(1).uniform(size=(1000, 2))
    for N in (3, 7, 16):
        counts = np.bincount(rcb_partition(pts, N), minlength=N)
        assert counts.min() >= 1000 // N - 1 and counts.max() <= 1000 // N + 2


def test_rcb_breaks_ties_by_point_number():
    # a cut inside a tie takes the lowest-numbered points of the tied value
    pts = np.zeros((10, 2))
    pts[:, 0] = [1, 0, 1, 0, 1, 0, 1, 0, 1, 1]  # four 0s: the fifth point on the left is 0
    np.testing.assert_array_equal(rcb_partition(pts, 2), [0, 0, 1, 0, 1, 0, 1, 0, 1, 1])


def test_every_partitioner_reaches_the_token_layouts():
    """One registry: every name of PARTITIONERS is a choice of TokenLayout.build; those that
    need what a point set lacks are refused naming the layout's keyword, not a PC option."""
    from ddlearn.decomposition.partition import PARTITIONERS
    from ddlearn.nn.layout import TokenLayout
    g = np.linspace(0.0, 1.0, 12)
    coords = np.stack(np.meshgrid(g, g, indexing="ij"), axis=-1).reshape(-1, 2)
    built = {}
    for name in PARTITIONERS:
        try:
            built[name] = TokenLayout.build(coords, subdomains=4, partitioner=name)
        except ValueError as e:
            assert "partitioner=" in str(e) and "-ddlearn_" not in str(e), str(e)
    assert {"boxes", "rcb", "metis", "local_metis"} <= set(built)
    # on one process local_metis is METIS on the whole graph
    np.testing.assert_array_equal(built["local_metis"].part, built["metis"].part)
    for layout in built.values():
        assert np.all(np.bincount(layout.part, minlength=4) > 0)
