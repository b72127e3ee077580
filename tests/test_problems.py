import hashlib

import numpy as np
import pytest
import scipy.sparse as sp

from ddlearn.decomposition.coefficients import coefficient, family_field
from ddlearn.decomposition.problems import (PROBLEMS, Diffusion, Diffusion2D, Diffusion3D,
                                            Poisson1D, Poisson2D, Poisson3D, channels,
                                            make_problem, problem_dim)


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
    ("poisson4d", 10, "unknown problem 'poisson4d'"),
    ("poisson3d", 0, "n must be a positive integer"),
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


# -- 3D ------------------------------------------------------------------------------------


def test_poisson3d_is_kronecker_sum():
    n = 4
    T, I = Poisson1D(n).matrix(), sp.identity(n)
    expected = sp.kron(I, sp.kron(I, T)) + sp.kron(I, sp.kron(T, I)) + sp.kron(T, sp.kron(I, I))
    np.testing.assert_allclose(Poisson3D(n).matrix().toarray(), expected.toarray(), rtol=1e-14)
    assert Poisson3D(n).grid == (n, n, n) and Poisson3D(n).n == n ** 3


@pytest.mark.parametrize("name", ["random_channels3d", "random_inclusions3d",
                                  "random_lognormal3d"])
def test_diffusion3d_is_spd_and_rows_are_the_matrix_rows(name):
    p = make_problem(name, 6, contrast=1e6, seed=5)
    A = p.matrix()
    assert A.shape == (216, 216) and A.has_sorted_indices and A.dtype == np.float64
    assert abs(A - A.T).max() == 0
    assert np.linalg.eigvalsh(A.toarray()).min() > 0
    assert np.diff(A.indptr).max() == 7
    idx = np.random.default_rng(0).choice(p.n, 40)  # unsorted, with repeats
    np.testing.assert_array_equal(p.rows(idx).toarray(), A[idx].toarray())
    np.testing.assert_array_equal(p.rows(np.array([], dtype=int)).toarray(), np.zeros((0, p.n)))


def test_diffusion3d_row_sums_vanish_in_the_interior_for_constant_kappa():
    n, k = 6, 2.5
    A = Diffusion3D(n, lambda x, y, z: k + 0 * x).matrix()
    np.testing.assert_allclose(A.toarray(), k * Poisson3D(n).matrix().toarray(), rtol=1e-14)
    sub = np.stack(np.unravel_index(np.arange(n ** 3), (n,) * 3))  # (iz, iy, ix)
    interior = np.all((sub > 0) & (sub < n - 1), axis=0)
    sums = np.asarray(A.sum(axis=1)).ravel()
    np.testing.assert_allclose(sums[interior], 0.0, atol=1e-9 * A.max())
    assert np.all(sums[~interior] > 0)  # the Dirichlet boundary


@pytest.mark.parametrize("dim", [2, 3])
def test_face_coefficient_is_the_harmonic_mean_across_a_jump(dim):
    n, c = 5, 1e6
    kappa = np.ones((n + 2,) * dim)
    kappa[..., 3:] = c  # kappa = c for ix >= 2 (padded index 3): a jump between ix = 1 and 2
    p = Diffusion(n, kappa, dim)
    A, inv_h2 = p.matrix(), 1.0 / p.h ** 2
    here = 1 + n * (1 + (n if dim == 3 else 0))  # ix = iy (= iz) = 1
    assert A[here, here + 1] == pytest.approx(-2 * c / (1 + c) * inv_h2, rel=1e-14)
    assert A[here, here - 1] == pytest.approx(-inv_h2, rel=1e-14)       # both sides 1
    assert A[here + 1, here + 2] == pytest.approx(-c * inv_h2, rel=1e-14)  # both sides c
    assert A[here, here] == pytest.approx((2 * dim - 1 + 2 * c / (1 + c)) * inv_h2, rel=1e-14)


def test_diffusion3d_ordering_and_coordinates_are_x_fastest():
    n = 3
    kappa = np.ones((n + 2,) * 3)
    kappa[2, 1, 1] = 5.0  # the point (iz, iy, ix) = (1, 0, 0): natural index 9
    A = Diffusion3D(n, kappa).matrix()
    assert A[9, 9] > A[0, 0]
    p = Poisson3D(n)
    X = p.coordinates()
    assert X.shape == (27, 3)
    j = np.arange(27)
    np.testing.assert_allclose(X, np.stack([j % 3 + 1, j // 3 % 3 + 1, j // 9 + 1], 1) * p.h)
    np.testing.assert_allclose(Poisson2D(2).coordinates(), [[1, 1], [2, 1], [1, 2], [2, 2]]
                               / np.float64(3))
    # a rank's own rows only: the same values as the rows of the whole array
    np.testing.assert_array_equal(p.coordinates(np.arange(5, 20)), X[5:20])
    # a callable kappa is evaluated at (x, y, z) with the same x-fastest layout
    B = Diffusion3D(n, lambda x, y, z: 1 + 4 * ((np.abs(x - 0.25) < 1e-9)
                                               & (np.abs(y - 0.25) < 1e-9)
                                               & (np.abs(z - 0.5) < 1e-9)))
    np.testing.assert_array_equal(A.toarray(), B.matrix().toarray())


def test_diffusion_bad_input():
    with pytest.raises(ValueError, match=r"shape \(6, 6, 6\)"):
        Diffusion3D(4, np.ones((6, 6)))
    with pytest.raises(ValueError, match="positive"):
        Diffusion3D(4, lambda x, y, z: 0 * x)
    with pytest.raises(ValueError, match="2D or 3D"):
        Diffusion(4, np.ones(6), dim=1)


def test_registry_has_the_3d_problems():
    for name, dim in (("poisson1d", 1), ("poisson2d", 2), ("channels", 2), ("random_lognormal", 2),
                      ("poisson3d", 3), ("random_channels3d", 3), ("random_inclusions3d", 3),
                      ("random_lognormal3d", 3)):
        assert name in PROBLEMS and problem_dim(name) == dim
        p = make_problem(name, 4)
        assert p.dim == dim and p.name == name and p.describe()["grid"] == [4] * dim
    d = make_problem("random_inclusions3d", 5, contrast=1e8, seed=9).describe()
    assert d["contrast"] == 1e8 and d["seed"] == 9 and d["kappa_max"] == 1e8
    assert isinstance(make_problem("random_channels", 4), Diffusion2D)
    with pytest.raises(ValueError, match="unknown problem 'poisson4d'"):
        problem_dim("poisson4d")


@pytest.mark.parametrize("family", ["channels", "inclusions", "lognormal"])
def test_3d_families_are_seeded_resolution_independent_and_in_range(family):
    a = coefficient(family, 15, 1e6, 3, dim=3)
    np.testing.assert_array_equal(a, coefficient(family, 15, 1e6, 3, dim=3))
    assert not np.array_equal(a, coefficient(family, 15, 1e6, 4, dim=3))
    assert a.shape == (17, 17, 17) and a.min() >= 1.0 and a.max() <= 1e6
    assert a.max() == pytest.approx(1e6) and (a == a.max()).mean() < 0.5
    # the same geometry on a grid twice as fine: the coarse points are every other fine point
    fine = coefficient(family, 31, 1e6, 3, dim=3)[::2, ::2, ::2]
    if family == "lognormal":  # normalised over the grid's own min/max: close, not equal
        np.testing.assert_allclose(np.log(fine), np.log(a), atol=0.05 * np.log(1e6))
    else:
        np.testing.assert_array_equal(fine, a)
    # the grid values are the field's values at the grid points
    t = np.arange(17) / 16
    Z, Y, X = np.meshgrid(t, t, t, indexing="ij")
    np.testing.assert_array_equal(family_field(family, 1e6, 3, dim=3)(X, Y, Z), a)


def test_3d_channels_background_is_layered_and_moderate():
    k = coefficient("channels", 23, 1e8, 1, dim=3)
    background = k[k < 1e8]
    assert background.min() >= 1.0 and background.max() <= 10.0
    # layers in z: away from the channels the background is constant on each z plane
    for plane in k:
        values = np.unique(plane[plane < 1e8])
        assert len(values) <= 1
    assert len(np.unique(background)) >= 2
    assert np.all(coefficient("channels", 9, 5.0, 1, dim=3) <= 5.0)  # capped by the contrast


def test_2d_fields_are_unchanged():
    """Shipped models and other tests depend on the 2D fields: bit for bit what they were
    before 3D existed (arithmetic and comparisons only, so the checksums are portable)."""
    digests = {("channels", 15, 1e6, 0): "650c806486ff5669",
               ("channels", 31, 1e4, 3): "c7330f197d515659",
               ("channels", 64, 1e8, 7): "0dd2e7e99ed5484e",
               ("inclusions", 15, 1e6, 0): "b6ba424fc04694cd",
               ("inclusions", 31, 1e4, 3): "60136d69633ae63c",
               ("inclusions", 64, 1e8, 7): "0a5fc26895c1b9d5"}
    for (family, n, c, seed), digest in digests.items():
        k = coefficient(family, n, c, seed)
        assert hashlib.sha256(k.tobytes()).hexdigest()[:16] == digest, (family, n, c, seed)
        assert np.array_equal(k, coefficient(family, n, c, seed, dim=2))
    # lognormal goes through cos and pow, whose last bits may differ between math libraries
    for (n, c, seed), values in {(15, 1e6, 0): (2097.049959118525, 9658.357367215785,
                                                27.405713183245435, 59.6243274582483),
                                 (31, 1e4, 3): (5094.905193739751, 671.7038811367503,
                                                82.0184067371243, 2.6940031921287644)}.items():
        k = coefficient("lognormal", n, c, seed)
        np.testing.assert_allclose([np.log(k).sum(), k[3, 7], k[10, 2], k[n // 2, n // 3]],
                                   values, rtol=1e-12)


def test_3d_coefficient_bad_input():
    coefficient("inclusions", 4, 1e8, 0, dim=3)  # contrasts up to 1e12 are accepted
    for contrast in (0.5, 1e13, float("nan")):
        with pytest.raises(ValueError, match="outside"):
            coefficient("inclusions", 4, contrast, 0, dim=3)
    with pytest.raises(ValueError, match="outside"):
        make_problem("random_channels3d", 4, contrast=1e13)
    with pytest.raises(ValueError, match="2D and 3D, not dim = 4"):
        coefficient("lognormal", 4, 10.0, 0, dim=4)
