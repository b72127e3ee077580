"""The spectral coarse space's threshold (-ddlearn_spectral_threshold): SLEPc's
threshold-stopped eigensolve with a small projected dimension keeps exactly the pairs below the
threshold that a dense solve of the same pencil has, up to the nev cap; eigenvectors that give
the same coarse vector D_i v are reduced to independent ones."""
import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp

from ddlearn.classical.coarse import spectral
from ddlearn.classical.coarse.spectral import SpectralSettings, local_eigenvectors
from ddlearn.classical.neumann import regularised_pencil


def _subdomain(channels: int, n: int = 24, contrast: float = 1e6):
    """A Neumann Q1-like 5-point matrix on an n x n patch crossed by ``channels`` stiff
    channels (each adds one small eigenvalue), and an interior partition of unity."""
    kappa = np.ones((n, n))
    for c in range(channels):
        kappa[1 + 2 * c, :] = contrast  # rows of cells: channels from side to side
    rows, cols, vals = [], [], []
    idx = np.arange(n * n).reshape(n, n)
    for (a, b) in ((idx[:, :-1], idx[:, 1:]), (idx[:-1, :], idx[1:, :])):
        k = np.sqrt(kappa.ravel()[a.ravel()] * kappa.ravel()[b.ravel()])
        for p, q in ((a.ravel(), b.ravel()),):
            rows += [p, q, p, q]
            cols += [p, q, q, p]
            vals += [k, k, -k, -k]
    AN = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                       shape=(n * n, n * n))
    D = np.ones(n * n)
    D[idx[:, 0]] = D[idx[:, -1]] = 0.5  # shared with neighbours left and right
    return AN, D


def _dense(AN, D, tau, nev, vectors=False):
    """The kept eigenvalues (smallest first) of the dense solve, or their eigenvectors."""
    B, M = regularised_pencil(AN, D)
    mu, W = sla.eigh(B.toarray(), M.toarray())
    mu, W = mu[::-1][:nev], W[:, ::-1][:, :nev]
    keep = 1.0 / mu < tau
    return W[:, keep] if vectors else 1.0 / mu[keep]


@pytest.mark.parametrize("channels,nev,n,projected", [(2, 40, 24, None), (11, 40, 24, None),
                                                      (11, 9, 24, None), (19, 40, 40, 8)])
def test_threshold_keeps_the_dense_solves_pairs(channels, nev, n, projected, monkeypatch):
    """projected 8: more wanted pairs than SLEPc's projected dimension, found past it."""
    if projected is not None:
        monkeypatch.setattr(spectral, "PROJECTED", projected)
    AN, D = _subdomain(channels, n)
    tau = 0.1
    lam, V = local_eigenvectors(AN, D, SpectralSettings(nev, threshold=tau, tol=1e-12))
    want = _dense(AN, D, tau, nev)
    assert len(want) > 0
    np.testing.assert_allclose(lam, want, rtol=1e-7)
    assert V.shape == (AN.shape[0], len(want))
    B, M = regularised_pencil(AN, D)
    # M-orthonormal eigenvectors of the pencil, also past the projected dimension
    np.testing.assert_allclose(V.T @ (M @ V), np.eye(len(want)), atol=1e-4)
    # the span of the dense solve's eigenvectors (M-orthonormal W): V^T M W orthogonal
    W = _dense(AN, D, tau, nev, vectors=True)
    cosines = np.linalg.svd(V.T @ (M @ W), compute_uv=False)
    np.testing.assert_allclose(cosines, 1.0, atol=1e-4)


def test_dependent_coarse_vectors_are_dropped_keeping_the_span():
    rng = np.random.default_rng(0)
    D = np.where(np.arange(30) < 20, rng.uniform(0.2, 1.0, 30), 0.0)
    V = rng.standard_normal((30, 4))
    V[:, 3] = 2.0 * V[:, 0] - V[:, 2]
    V[20:, 3] = rng.standard_normal(10)  # differs from a combination only where D is zero
    W, dropped = spectral.independent_columns(D, V)
    assert dropped == 1 and W.shape == (30, 3)
    before, after = np.linalg.qr(D[:, None] * V)[0][:, :3], D[:, None] * W
    # the same coarse span: D V's columns lie in span(D W)
    residual = D[:, None] * V - after @ np.linalg.lstsq(after, D[:, None] * V, rcond=None)[0]
    assert np.linalg.norm(residual) < 1e-10 * np.linalg.norm(D[:, None] * V)
    assert np.linalg.matrix_rank(before) == 3
    W, dropped = spectral.independent_columns(D, V[:, :3])
    assert dropped == 0 and W is not None and np.array_equal(W, V[:, :3])
