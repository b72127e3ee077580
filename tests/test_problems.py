import numpy as np
import pytest
import scipy.sparse as sp

from ddlearn.decomposition.coefficients import coefficient
from ddlearn.decomposition.problems import Diffusion2D, Poisson1D, Poisson2D, channels, make_problem


def test_poisson1d_is_paper_eq4():
    n = 7
    A = Poisson1D(n).matrix().toarray()
    h = 1.0 / (n + 1)
    expected = (2 * np.eye(n) - np.eye(n, k=1) - np.eye(n, k=-1)) / h**2
    np.testing.assert_allclose(A, expected, rtol=0, atol=1e-9)


def test_poisson2d_is_kronecker_sum():
    n = 6
    T = Poisson1D(n).matrix()
    I = sp.identity(n)
    expected = (sp.kron(I, T) + sp.kron(T, I)).toarray()
    np.testing.assert_allclose(Poisson2D(n).matrix().toarray(), expected, rtol=1e-14)


def test_rows_subset_matches_matrix():
    for p in (Poisson1D(20), Poisson2D(9), make_problem("channels", 9, contrast=1e3)):
        idx = np.array([0, 5, 3, p.n - 1])
        np.testing.assert_array_equal(p.rows(idx).toarray(), p.matrix()[idx].toarray())


def test_channels_is_spd_with_requested_contrast():
    p = make_problem("channels", 15, contrast=1e6)
    A = p.matrix()
    assert abs(A - A.T).max() == 0
    assert p.kappa.max() / p.kappa.min() == pytest.approx(1e6)
    assert np.linalg.eigvalsh(A.toarray()).min() > 0


def test_channels_cross_the_whole_height():
    k = channels(contrast=10.0, count=5)
    x = np.full(50, 0.1)
    assert np.all(k(x, np.linspace(0, 1, 50)) == 10.0)
    assert k(np.array([0.2]), np.array([0.5]))[0] == 1.0


def test_constant_kappa_is_scaled_poisson():
    n = 8
    A = Diffusion2D(n, lambda x, y: 3.0 + 0 * x).matrix()
    np.testing.assert_allclose(A.toarray(), 3.0 * Poisson2D(n).matrix().toarray())


@pytest.mark.parametrize("name,n,match", [
    ("poisson3d", 10, "unknown problem 'poisson3d'"),
    ("poisson1d", 0, "n must be a positive integer"),
    ("poisson2d", 2.5, "n must be a positive integer"),
])
def test_bad_problem(name, n, match):
    with pytest.raises(ValueError, match=match):
        make_problem(name, n)


def test_bad_kappa():
    with pytest.raises(ValueError, match="shape"):
        Diffusion2D(4, np.ones((4, 4)))
    with pytest.raises(ValueError, match="positive"):
        Diffusion2D(4, lambda x, y: 0 * x)


@pytest.mark.parametrize("family", ["channels", "inclusions", "lognormal"])
def test_coefficient_families_are_seeded_and_in_range(family):
    a, b = coefficient(family, 31, 1e6, 3), coefficient(family, 31, 1e6, 3)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, coefficient(family, 31, 1e6, 4))
    assert a.shape == (33, 33) and a.min() >= 1.0 and a.max() <= 1e6
    assert a.max() / a.min() > 1e5  # the contrast is there
    p = make_problem(f"random_{family}", 31, contrast=1e6, seed=3)
    assert p.describe()["seed"] == 3 and p.describe()["contrast"] == 1e6
    A = p.matrix()
    assert abs(A - A.T).max() == 0


def test_coefficient_family_bad_input():
    with pytest.raises(ValueError, match="outside"):
        coefficient("channels", 15, 0.5, 0)
    with pytest.raises(ValueError, match="unknown coefficient family"):
        coefficient("stripes", 15, 10.0, 0)
