import numpy as np
import pytest

from ddlearn.decomposition.coarse import grid_basis, interface_hats, q1_hats
from ddlearn.decomposition import Decomposition
from ddlearn.decomposition.problems import make_problem
from ddlearn.classical.reference import coarse_matrix


@pytest.mark.parametrize("n,N,overlap", [(1023, 8, 2), (255, 4, 2), (100, 7, 3)])
def test_interface_hats_1d(n, N, overlap):
    dec = Decomposition((n,), N, overlap)
    Phi = interface_hats(dec).toarray()
    assert Phi.shape == (n, N - 1) and Phi.min() >= 0
    for k in range(N - 1):
        left, right = dec.subdomains[k], dec.subdomains[k + 1]
        shared = np.intersect1d(left, right)
        assert len(shared) == 2 * overlap
        # No centre node: the peak is the larger of the two indices nearest the centre.
        peak = shared[overlap]
        assert Phi[peak, k] == 1.0 and np.argmax(Phi[:, k]) == peak
    # Partition of unity between the first and the last peak.
    first, last = np.argmax(Phi[:, 0]), np.argmax(Phi[:, -1])
    np.testing.assert_allclose(Phi[first:last + 1].sum(axis=1), 1.0, atol=1e-14)


def test_q1_hats_2d():
    dec = Decomposition((31, 31), 16, 1)
    Phi = q1_hats(dec).toarray()
    Nx, Ny = dec.boxes
    assert Phi.shape == (31 * 31, (Nx - 1) * (Ny - 1)) and Phi.min() >= 0
    peaks_x, peaks_y = dec.offsets[0][1:-1], dec.offsets[1][1:-1]
    for ky, py in enumerate(peaks_y):
        for kx, px in enumerate(peaks_x):
            col = Phi[:, kx + ky * (Nx - 1)]
            assert col[py * 31 + px] == 1.0 and col.max() == 1.0
    inner = [(iy * 31 + ix) for iy in range(peaks_y[0], peaks_y[-1] + 1)
             for ix in range(peaks_x[0], peaks_x[-1] + 1)]
    np.testing.assert_allclose(Phi[inner].sum(axis=1), 1.0, atol=1e-14)


@pytest.mark.parametrize("grid,N", [((100,), 6), ((20, 20), 9)])
def test_nicolaides_partition_of_unity(grid, N):
    Phi = grid_basis("nicolaides", Decomposition(grid, N, 2)).toarray()
    assert Phi.shape[1] == N and Phi.min() >= 0
    np.testing.assert_allclose(Phi.sum(axis=1), 1.0, atol=1e-14)


@pytest.mark.parametrize("problem,N,space", [("poisson1d", 8, "hats"), ("poisson2d", 16, "hats"),
                                             ("channels", 16, "hats"),
                                             ("poisson2d", 9, "nicolaides")])
def test_coarse_matrix_spd(problem, N, space):
    p = make_problem(problem, 63 if problem == "poisson1d" else 23)
    dec = Decomposition(p.grid, N, 1)
    A0 = coarse_matrix(p.matrix(), grid_basis(space, dec)).toarray()
    np.testing.assert_allclose(A0, A0.T, rtol=1e-12, atol=1e-12 * np.abs(A0).max())
    assert np.linalg.eigvalsh(A0).min() > 0


def test_bad_coarse_space():
    dec = Decomposition((10, 10), 2, 1)
    with pytest.raises(ValueError, match="gdsw coarse space .* no form on a structured grid"):
        grid_basis("gdsw", dec)
    with pytest.raises(ValueError, match="unknown coarse space 'hat'.*hats, nicolaides"):
        grid_basis("hat", dec)
    with pytest.raises(ValueError, match="empty"):
        grid_basis("hats", dec)
