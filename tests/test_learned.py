"""The learned two-level preconditioner, serially: scipy adapter, SPD for any parameters,
classical at initialisation."""
import numpy as np
import pytest
import scipy.sparse.linalg as spla
import torch

from ddlearn.decomposition.coarse import grid_basis
from ddlearn.decomposition import Decomposition
from ddlearn.learned.coarse.basis import LearnedBasis, aslinearoperator, basis_correction_model, perturb_
from ddlearn.decomposition.problems import make_problem
from ddlearn.learned.coarse.pc_training import PCTrainConfig
from ddlearn.classical import reference


def _dense(op, n):
    return op @ np.eye(n)


@pytest.mark.parametrize("name,n,N,overlap", [("poisson1d", 63, 4, 2), ("poisson2d", 15, 9, 1)])
def test_classical_at_start_and_spd_for_any_parameters(name, n, N, overlap):
    p = make_problem(name, n)
    dec = Decomposition(p.grid, N, overlap)
    S = basis_correction_model(dec, r_local=3, seed=1)
    A = p.matrix()
    classical = _dense(reference.two_level(A, dec, grid_basis("hats", dec)), p.n)
    np.testing.assert_allclose(_dense(aslinearoperator(S, p), p.n), classical, atol=1e-12)
    perturb_(S, 0.3, 2)
    omega = np.linspace(-0.5, 1.0, N)
    M = _dense(aslinearoperator(S, p, omega=omega), p.n)
    assert np.abs(M - classical).max() > 1e-3 * np.abs(classical).max()
    np.testing.assert_allclose(M, M.T, atol=1e-12 * np.abs(M).max())
    assert np.linalg.eigvalsh(0.5 * (M + M.T)).min() > 0
    Mr = _dense(aslinearoperator(S, p, mode="learned_restricted", omega=omega), p.n)
    assert np.abs(Mr - Mr.T).max() > 1e-3 * np.abs(Mr).max()
    # omega alone is one restricted-Schwarz smoothing step of the basis per subdomain
    with torch.no_grad():
        S.Q.zero_()
    Phi = grid_basis("hats", dec).toarray()
    ras = reference.one_level(A, dec, "restrict")
    smoothed = Phi - np.stack([ras @ c for c in (A @ Phi).T], 1)
    basis = LearnedBasis.serial(S, p, omega=np.ones(N)).to_scipy().toarray()
    np.testing.assert_allclose(basis, smoothed, atol=1e-12)


def test_adapter_preconditions_scipy_cg():
    p = make_problem("poisson1d", 255)
    S = basis_correction_model(Decomposition(p.grid, 8, 2), r_local=2)
    b = np.random.default_rng(0).uniform(-1, 1, p.n)
    its = []
    x, info = spla.cg(p.matrix(), b, M=aslinearoperator(S, p), rtol=1e-10,
                      callback=lambda xk: its.append(1))
    assert info == 0 and len(its) <= 10
    assert np.linalg.norm(p.matrix() @ x - b) <= 1e-9 * np.linalg.norm(b)


def test_adapter_bad_input():
    p = make_problem("poisson1d", 63)
    S = basis_correction_model(Decomposition(p.grid, 4, 2))
    with pytest.raises(ValueError, match="unknown mode 'magic'"):
        aslinearoperator(S, p, mode="magic")
    with pytest.raises(ValueError, match="trained on grid"):
        aslinearoperator(S, make_problem("poisson1d", 127))


def test_training_config_rejects_bad_settings():
    for kwargs, msg in (({"steps": 0}, "steps must be >= 1"), ({"lr": 0.0}, "learning rate"),
                        ({"objective": "magic"}, "unknown training objective 'magic'"),
                        ({"cg_steps": 0}, "cg_steps must be >= 1")):
        with pytest.raises(ValueError, match=msg):
            PCTrainConfig(**kwargs)
