"""The spectral coarse space's threshold (-ddlearn_spectral_threshold): SLEPc's growing,
threshold-stopped eigensolve keeps exactly the pairs below the threshold that a dense solve of
the same pencil has, up to the nev cap, and asks for fewer pairs than the cap when few are
wanted."""
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


@pytest.mark.parametrize("channels,nev", [(2, 40), (11, 40), (11, 9)])
def test_threshold_keeps_the_dense_solves_pairs(channels, nev, monkeypatch):
    AN, D = _subdomain(channels)
    tau = 0.1
    asked = []
    solve = spectral._slepc

    def recording(*args, **kwargs):
        mu, V, info = solve(*args, **kwargs)
        asked.append(info["rounds"])
        return mu, V, info

    monkeypatch.setattr(spectral, "_slepc", recording)
    lam, V = local_eigenvectors(AN, D, SpectralSettings(nev, threshold=tau, tol=1e-12))
    want = _dense(AN, D, tau, nev)
    assert len(want) > 0
    np.testing.assert_allclose(lam, want, rtol=1e-7)
    assert V.shape == (AN.shape[0], len(want))
    B, M = regularised_pencil(AN, D)
    # M-orthonormal eigenvectors of the pencil, also across the rounds' deflation
    np.testing.assert_allclose(V.T @ (M @ V), np.eye(len(want)), atol=1e-4)
    # the span of the dense solve's eigenvectors (M-orthonormal W): V^T M W orthogonal
    W = _dense(AN, D, tau, nev, vectors=True)
    cosines = np.linalg.svd(V.T @ (M @ W), compute_uv=False)
    np.testing.assert_allclose(cosines, 1.0, atol=1e-4)
    # more wanted pairs than the first round holds: the solve grew past it
    assert (asked[0] > 1) == (len(want) >= spectral.GROW_FROM)
