"""Schwarz attention against the paper's formula built densely from R_i, D_i and Phi."""
import numpy as np
import pytest
import torch

from ddlearn.nn.operators import FLARE, FLAREPlusPlus, GlobalAttention, SchwarzAttention
from ddlearn.decomposition.coarse import grid_basis
from ddlearn.decomposition.problems import make_problem
from ddlearn.classical import reference


def dense_operator(m: SchwarzAttention) -> np.ndarray:
    """Phi Q0 K0^T Phi^T + sum_i R_i^T D_i^{1/2} Q_i K_i^T D_i^{1/2} R_i, term by term."""
    dec, c = m.dec, m.config
    M = np.zeros((dec.n, dec.n))
    for i in range(dec.N):
        R = dec.R(i).toarray()
        Dh = np.diag(np.sqrt(dec.D(i)))
        ni = len(dec.subdomains[i])
        Qi, Ki = (t[i, :ni].detach().numpy() for t in (m.Q, m.K))
        M += R.T @ Dh @ Qi @ Ki.T @ Dh @ R
    if c["coarse"] is not None:
        Phi = grid_basis(c["coarse"], dec).toarray()
        M += Phi @ m.Q0.detach().numpy() @ m.K0.detach().numpy().T @ Phi.T
    return M


CONFIGS = [dict(grid=(63,), N=4, overlap=2, r_local=3), dict(grid=(100,), N=7, overlap=3, r_local=5, coarse=None),
           dict(grid=(12, 12), N=4, overlap=1, r_local=4), dict(grid=(15, 13), N=6, overlap=2, r_local=2, coarse="nicolaides"),
           dict(grid=(63,), N=8, overlap=2, r_local=4, r0=3, symmetric=True)]


@pytest.mark.parametrize("cfg", CONFIGS)
def test_batched_apply_equals_dense_formula(cfg):
    m = SchwarzAttention(**cfg, seed=3, init_scale=1.0)
    M = dense_operator(m)
    F = torch.randn(6, m.n, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    U = m(F).detach().numpy()
    np.testing.assert_allclose(U, F.numpy() @ M.T, rtol=0, atol=1e-12 * np.abs(U).max())
    # batch dimensions are preserved
    assert m(F.reshape(2, 3, m.n)).shape == (2, 3, m.n)


def test_parameter_count_and_repr():
    m = SchwarzAttention((63,), 4, 2, 3)
    n_i = sum(len(I) for I in m.dec.subdomains)
    assert m.num_parameters() == 2 * (n_i * 3 + 3 * 3)
    text = repr(m)
    assert "N=4" in text and "r_l=3" in text and "n_0=3" in text and f"params={m.num_parameters()}" in text
    s = SchwarzAttention((63,), 4, 2, 3, symmetric=True)
    assert s.num_parameters() == n_i * 3 + 3 * 3
    assert "r_g=5" in repr(GlobalAttention(63, 5))


@pytest.mark.parametrize("grid,N", [((63,), 4), ((12, 12), 9)])
def test_symmetric_variant_is_spsd(grid, N):
    m = SchwarzAttention(grid, N, 1, 3, symmetric=True, seed=1, init_scale=1.0)
    M = dense_operator(m)
    np.testing.assert_allclose(M, M.T, atol=1e-13 * np.abs(M).max())
    assert np.linalg.eigvalsh(M).min() > -1e-12 * np.abs(M).max()


@pytest.mark.parametrize("name,n,N,overlap,coarse", [("poisson1d", 63, 4, 2, "hats"),
                                                     ("poisson2d", 11, 4, 1, "hats"),
                                                     ("channels", 10, 4, 1, "nicolaides")])
@pytest.mark.parametrize("symmetric", [True, False])
def test_full_rank_classical_blocks_reproduce_two_level_schwarz(name, n, N, overlap, coarse, symmetric):
    # Moderate contrast: the identity is under test, not the conditioning of eigh.
    p = make_problem(name, n, **({"contrast": 100.0} if name == "channels" else {}))
    A = p.matrix()
    m = SchwarzAttention(p.grid, N, overlap, "full", coarse, symmetric=symmetric).init_from_classical(A)
    assert m.num_parameters() == (1 if symmetric else 2) * (sum(m.dec.sizes**2) + m.n0**2)
    x = np.random.default_rng(0).standard_normal(p.n)
    y = m(torch.from_numpy(x)).detach().numpy()
    ref = reference.two_level(A, m.dec, grid_basis(coarse, m.dec)) @ x
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-10 * np.abs(ref).max())


def test_gradcheck_tiny():
    for m in (SchwarzAttention((12,), 3, 1, 2, seed=0, init_scale=1.0),
              SchwarzAttention((6, 6), 4, 1, 2, seed=0, symmetric=True, init_scale=1.0),
              GlobalAttention(8, 2), FLARE((8,), 2, 3, 4, levels=2), FLAREPlusPlus((8,), 2, 3, 4, levels=2)):
        f = torch.randn(2, m.n, dtype=torch.float64)
        # gradcheck on the input, and on all parameters through a functional call
        assert torch.autograd.gradcheck(lambda x: m(x), (f.clone().requires_grad_(),))
        names = [n for n, _ in m.named_parameters()]
        base = {k: v.detach().clone() for k, v in m.named_parameters()}

        def of_params(*ps):
            return torch.func.functional_call(m, dict(zip(names, ps)), (f,))

        assert torch.autograd.gradcheck(of_params, tuple(base[k].requires_grad_() for k in names))


@pytest.mark.parametrize("kwargs,match", [
    (dict(grid=(63,), N=4, overlap=2, r_local=40), "local rank r_l = 40"),
    (dict(grid=(63,), N=4, overlap=2, r_local=2, coarse="wavelets"), "unknown coarse space 'wavelets'"),
    (dict(grid=(63,), N=4, overlap=2, r_local=2, r0=9), "coarse rank r_0 = 9"),
    (dict(grid=(63,), N=4, overlap=2, r_local=2, dtype="float16"), "unknown dtype"),
])
def test_bad_configuration(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SchwarzAttention(**kwargs)


def test_wrong_input_shape():
    m = SchwarzAttention((63,), 4, 2, 2)
    with pytest.raises(ValueError, match="last dimension must be 63"):
        m(torch.zeros(3, 64, dtype=torch.float64))
    with pytest.raises(ValueError, match="r_g = 0"):
        GlobalAttention(10, 0)


def test_float32_allowed():
    m = SchwarzAttention((63,), 4, 2, 2, dtype="float32")
    assert m(torch.zeros(2, 63)).dtype == torch.float32
