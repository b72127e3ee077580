"""The Schwarz-attention coarse space: the layout of given sets, the differentiable spectrum of
the two-level operator (its eigenvalues, its gradient), the network on disjoint subdomain copies
(serial = distributed), the training run (it learns, it resumes), and the PC from options on 1
to 4 ranks with its bad input refused on every rank."""
import os

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from mpi4py import MPI

from conftest import (apply_gathered, gathered_sets, natural_matrix_of, pc_from_options,
                      raised_everywhere, solve_with_pc_options, view_text)
from ddlearn.classical import reference
from ddlearn.decomposition import Decomposition
from ddlearn.decomposition.problems import make_problem
from ddlearn.learned.coarse.attention_training import AttentionTrainConfig, train_attention_coarse
from ddlearn.learned.coarse.model_file import load_model
from ddlearn.learned.coarse.schwarz_attention import serial_basis, subdomain_vectors
from ddlearn.learned.coarse.spectrum import Spectrum, orthonormal_bases, subspace_gap
from ddlearn.learned.coarse.subdomain_tokens import (PIECE_FEATURES, feature_count,
                                                     piece_features, subdomain_tokens)
from ddlearn.nn.layout import TokenLayout
from ddlearn.nn.subdomain_basis import KIND, SubdomainBasisNet

COMM = MPI.COMM_WORLD
PC = "TwoLevelSchwarzPC"


def _field(n=23, N=4, family="random_channels", contrast=1e4, seed=1):
    A = make_problem(family, n, contrast=contrast, seed=seed).matrix().tocsr()
    dec = Decomposition((n, n), N, 1)
    return A, dec, [dec.D(i) for i in range(N)]


def _dense_spectrum(A, dec, weights, V):
    """The eigenvalues of the two-level additive M^{-1}A, densely."""
    Phi = sp.csr_matrix(np.hstack([_column(A.shape[0], I, D, v)
                                   for I, D, v in zip(dec.subdomains, weights, V)]))
    M = reference.two_level(A, dec, Phi)
    Minv = np.column_stack([M @ e for e in np.eye(A.shape[0])])
    return np.sort(np.linalg.eigvals(Minv @ A.toarray()).real)


def _column(n, I, D, v):
    c = np.zeros((n, v.shape[1]))
    c[I] = D[:, None] * v
    return c


def test_layout_of_given_sets():
    """A PC's overlapping sets and parts as a token layout: weights summing to one, the
    Nicolaides basis a partition of unity; uncovered tokens and bad part numbers refused."""
    sets = [np.array([0, 1, 2, 3]), np.array([3, 4, 5]), np.array([5, 6, 7])]
    part = np.array([0, 0, 0, 1, 1, 2, 2, 2])
    L = TokenLayout.of_sets(sets, part)
    assert L.N == 3 and L.tokens == 8 and L.n0 == 3
    D = np.zeros(8)
    for i in range(3):
        k = L.sizes[i]
        np.add.at(D, L.index[i, :k], L.sqrt_D[i, :k] ** 2)
    np.testing.assert_allclose(D, 1.0)
    Phi = sp.coo_matrix((L.phi_vals, (L.phi_rows, L.phi_cols)), shape=(8, 3))
    np.testing.assert_allclose(Phi.sum(axis=1), 1.0)
    assert TokenLayout.of_sets(sets, part) is L  # cached
    with pytest.raises(ValueError, match="lie in no set"):
        TokenLayout.of_sets(sets[:2], np.array([0, 0, 0, 1, 1, 1, 1, 1]))
    with pytest.raises(ValueError, match="part numbers"):
        TokenLayout.of_sets(sets, np.array([0, 0, 0, 1, 1, 2, 2, 3]))


def test_ritz_values_are_the_operators_smallest_eigenvalues_and_H_reproduces_them():
    A, dec, weights = _field()
    S = Spectrum(A, dec.subdomains, weights)
    rng = np.random.default_rng(0)
    W = [torch.as_tensor(rng.standard_normal((len(I), 2))) for I in dec.subdomains]
    V, fallback = orthonormal_bases(W)
    assert not fallback
    Phi = S.basis(V).detach().numpy()
    values, X = S.ritz(Phi, 3, steps=120)
    exact = _dense_spectrum(A, dec, weights, [v.numpy() for v in V])
    np.testing.assert_allclose(values, exact[:3], rtol=1e-8)
    np.testing.assert_allclose(X.T @ (A @ X), np.eye(3), atol=1e-10)  # A-orthonormal
    lam = np.linalg.eigvalsh(S.ritz_matrix(V, X).detach().numpy())
    np.testing.assert_allclose(lam, values, rtol=1e-10)


def test_loss_gradient_is_the_gradient_of_the_smallest_eigenvalue():
    """Hellmann-Feynman through the Galerkin coarse solve: the loss's derivative along a
    direction of the vectors equals the finite difference of -log lambda_min of the dense
    operator."""
    A, dec, weights = _field(n=15)
    rng = np.random.default_rng(1)
    W = [torch.tensor(rng.standard_normal((len(I), 2)), requires_grad=True)
         for I in dec.subdomains]
    E = [torch.as_tensor(rng.standard_normal(w.shape)) for w in W]
    S = Spectrum(A, dec.subdomains, weights)
    loss, _ = S.loss(W, p=1, steps=200)
    loss.backward()
    slope = sum(float((w.grad * e).sum()) for w, e in zip(W, E))

    def f(t):
        V, _ = orthonormal_bases([w.detach() + t * e for w, e in zip(W, E)])
        return -np.log(_dense_spectrum(A, dec, weights, [v.numpy() for v in V])[0])

    h = 1e-5
    assert slope == pytest.approx((f(h) - f(-h)) / (2 * h), rel=1e-4, abs=1e-8)


def test_rank_deficient_vectors_fall_back_to_the_constant():
    W = [torch.ones((10, 2)), torch.as_tensor(np.random.default_rng(0).standard_normal((9, 2)))]
    V, fallback = orthonormal_bases(W)
    assert fallback == [0] and V[0].shape == (10, 1) and V[1].shape == (9, 3)
    np.testing.assert_allclose(V[1].T @ V[1], np.eye(3), atol=1e-12)


def test_subspace_gap_is_zero_on_the_same_span_and_one_on_orthogonal_ones():
    rng = np.random.default_rng(2)
    Q = torch.as_tensor(np.linalg.qr(rng.standard_normal((12, 4)))[0])
    R = torch.as_tensor(np.linalg.qr(rng.standard_normal((4, 4)))[0])
    assert float(subspace_gap([Q], [Q @ R])) == pytest.approx(0.0, abs=1e-12)
    assert float(subspace_gap([Q[:, :2]], [Q[:, 2:]])) == pytest.approx(1.0)
    assert 0.0 < float(subspace_gap([Q[:, :2]], [Q[:, 1:3]])) < 1.0


def test_network_outputs_one_row_per_token_and_each_subdomain_sees_the_others():
    A, dec, weights = _field()
    blocks = [A[I][:, I].tocsr() for I in dec.subdomains]
    X = torch.as_tensor(subdomain_tokens(blocks, weights))
    assert X.shape == (sum(dec.sizes), feature_count())
    net = SubdomainBasisNet(feature_count(), vectors=3, width=16, depth=2, heads=4)
    net.set_subdomains(dec.sizes)
    y = net(X)
    assert y.shape == (X.shape[0], 3) and y.dtype == torch.float64
    # change only the last subdomain's tokens: the first subdomain's vectors change through the
    # coarse level, and stay put without it
    X2 = X.clone()
    X2[-dec.sizes[-1]:] += 1.0
    first = slice(0, dec.sizes[0])
    assert not torch.allclose(net(X2)[first], y[first])
    local = SubdomainBasisNet(feature_count(), vectors=3, width=16, depth=2, heads=4,
                              coarse=False)
    local.set_subdomains(dec.sizes)
    torch.testing.assert_close(local(X2)[first], local(X)[first])
    with pytest.raises(ValueError, match="shape"):
        net(X[:, :5])


def test_pieces_tell_a_stiff_inclusion_from_the_soft_rest():
    """A 12 x 12 block with a 4 x 4 stiff square: two pieces, each token's code constant on its
    piece and different across them, the share log10(|P| / n) / 4 of its piece."""
    n = 12
    kappa = np.ones((n, n))
    kappa[3:7, 5:9] = 1e4
    A = make_problem("poisson2d", n).matrix().tocsr()
    rows = A.nonzero()
    scale = np.sqrt(kappa.ravel()[rows[0]] * kappa.ravel()[rows[1]])
    A = sp.csr_matrix((np.asarray(A[rows]).ravel() * scale, rows), shape=A.shape)
    F = piece_features(A)
    stiff = (kappa.ravel() > 1)
    assert F.shape == (n * n, PIECE_FEATURES)
    for where in (stiff, ~stiff):
        assert np.ptp(F[where], axis=0).max() == 0
    assert not np.allclose(F[stiff][0, :-1], F[~stiff][0, :-1])
    np.testing.assert_allclose(F[stiff][0, -1], np.log10(16 / 144) / 4)
    blocks = [A, A[:20][:, :20]]
    X = subdomain_tokens(blocks, [np.ones(144), np.ones(20)], pieces=True)
    assert X.shape == (164, feature_count(0, pieces=True))
    np.testing.assert_array_equal(X[:, :feature_count()], subdomain_tokens(
        blocks, [np.ones(144), np.ones(20)]))


@pytest.mark.mpi
@pytest.mark.parametrize("attention", ["softmax", "galerkin"])
def test_network_distributed_over_ranks_equals_serial(attention):
    """Each rank its own subdomains, the summaries shared by one allreduce per block: the
    same vectors as all subdomains on one process, with either attention inside them."""
    A, dec, weights = _field(N=8)
    blocks = [A[I][:, I].tocsr() for I in dec.subdomains]
    net = SubdomainBasisNet(feature_count(), vectors=2, width=16, depth=2, heads=4,
                            attention=attention)
    V, _ = subdomain_vectors(net, blocks, weights)
    mine = [i for i in range(8) if i % COMM.size == COMM.rank]
    Vr, _ = subdomain_vectors(net, [blocks[i] for i in mine], [weights[i] for i in mine],
                              ids=mine, N=8, comm=COMM)
    for i, v in zip(mine, Vr):
        np.testing.assert_allclose(v, V[i], atol=1e-12)


def _tiny_cfg(**kw):
    base = dict(fields_per_family=2, validation_per_family=1, fields_per_step=2, n=23, N=4,
                k=3, width=16, depth=1, heads=2, ritz=4, lanczos=40, iterations=24,
                eval_every=8, lr=3e-3)
    return AttentionTrainConfig(**{**base, **kw})


def test_training_improves_the_spectrum_and_resumes_exactly(tmp_path):
    cfg = _tiny_cfg()
    path = str(tmp_path / "a.pt")
    record = train_attention_coarse(cfg, path, progress=False)
    first = record["history"][0]["validation"]
    assert record["best_validation"] < first
    model, meta, _ = load_model(path, KIND)
    assert meta["sizes"][0] <= meta["sizes"][1] and meta["train_config"]["k"] == 3
    # a run cut at step 8 and resumed ends where the uninterrupted one did
    cut = str(tmp_path / "b.pt")
    train_attention_coarse(cfg, cut, progress=False, until=8)
    assert os.path.exists(cut + ".last") and not os.path.exists(cut)
    train_attention_coarse(cfg, cut, progress=False)
    again, _, _ = load_model(cut, KIND)
    for (k, a), b in zip(model.state_dict().items(), again.state_dict().values()):
        torch.testing.assert_close(a, b, msg=k)
    # the curriculum: the first steps fit the spectral vectors, the rest the spectrum
    pre = train_attention_coarse(_tiny_cfg(pretrain=12), str(tmp_path / "p.pt"), progress=False)
    assert np.isfinite(pre["best_validation"])
    with pytest.raises(ValueError, match="k >= 2"):
        train_attention_coarse(_tiny_cfg(k=1), str(tmp_path / "c.pt"), progress=False)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A model trained briefly on the families at 23^2, N = 4, reading the coefficient pieces
    (shared by the PC tests)."""
    path = COMM.bcast(str(tmp_path_factory.mktemp("sa") / "sa.pt") if COMM.rank == 0 else None)
    train_attention_coarse(_tiny_cfg(families=("channels",), iterations=16, pieces=True), path,
                           progress=False)
    return path


@pytest.mark.mpi
def test_pc_from_options_equals_the_serial_basis_and_views_it(trained, tmp_path):
    """-ddlearn_coarse_space schwarz_attention on 1-4 ranks: CG converges, the PC applies the
    two-level operator of the serial basis, -ksp_view names the model, k, n0 and the timing."""
    p = make_problem("random_channels", 23, contrast=1e4, seed=200_000)
    A = natural_matrix_of(p)
    b = A.createVecLeft()
    b.set(1.0)
    r = solve_with_pc_options(A, b, "sa_", pc=PC, subdomains=4, overlap=1, partition="boxes",
                              coarse_space="schwarz_attention",
                              schwarz_attention_model=trained)
    assert r.converged and r.rnorm_true < 1e-8, r
    pc = pc_from_options(A, "sa_view_", pc=PC, subdomains=4, overlap=1, partition="boxes",
                         coarse_space="schwarz_attention", schwarz_attention_model=trained)
    text = view_text(pc, tmp_path / "view.txt")
    assert "Schwarz-attention coarse space (model sa.pt): k = 3" in text, text
    assert "n0 = 12" in text and "fell back" in text
    # the reference: the PC's own sets (graph-layer overlap) and weights, all on one process
    sets, weights = gathered_sets(pc.getPythonContext())
    model, _, _ = load_model(trained, KIND)
    As = p.matrix().tocsr()
    Phi, _ = serial_basis(model, As, sets, weights, pieces=True)
    x = np.random.default_rng(0).standard_normal(p.n)
    ref = reference.two_level(As, type("dec", (), {"subdomains": sets, "owned": sets})(),
                              Phi) @ x
    y = apply_gathered(pc, A, x)
    np.testing.assert_allclose(y, ref, atol=1e-10 * np.abs(ref).max())
    for o in (pc, A, b):
        o.destroy()


@pytest.mark.mpi
def test_bad_input_is_refused_on_every_rank(trained, tmp_path):
    p = make_problem("random_channels", 23, contrast=1e4, seed=200_000)
    A = natural_matrix_of(p)
    common = dict(pc=PC, partition="boxes", coarse_space="schwarz_attention",
                  schwarz_attention_model=trained)
    msgs = raised_everywhere(lambda: pc_from_options(A, "sa_ov_", subdomains=4, overlap=2,
                                                     **common).destroy(), exc=Exception)
    assert all(m and "trained with overlap 1" in m and "-sa_ov_ddlearn_overlap 2" in m
               for m in msgs), msgs
    big = natural_matrix_of(make_problem("random_channels", 95, contrast=1e4, seed=1))
    msgs = raised_everywhere(lambda: pc_from_options(big, "sa_size_", subdomains=4, overlap=1,
                                                     **common).destroy(), exc=Exception)
    assert all(m and "-sa_size_ddlearn_subdomains" in m and "x the training's" in m
               for m in msgs), msgs
    # a model file that does not match its record is never read
    bad = COMM.bcast(str(tmp_path / "bad.pt") if COMM.rank == 0 else None)
    if COMM.rank == 0:
        with open(trained, "rb") as f, open(bad, "wb") as g:
            g.write(f.read()[:-7])
        with open(trained + ".json") as f, open(bad + ".json", "w") as g:
            g.write(f.read())
    COMM.Barrier()
    msgs = raised_everywhere(lambda: pc_from_options(
        A, "sa_hash_", subdomains=4, overlap=1, **{**common, "schwarz_attention_model": bad}
    ).destroy(), exc=Exception)
    assert all(m and "-sa_hash_ddlearn_schwarz_attention_model" in m and "SHA-256" in m
               for m in msgs), msgs
    # NaN in the matrix: refused before the network reads it
    nan = natural_matrix_of(p)
    lo, hi = nan.getOwnershipRange()
    if lo <= 100 < hi:
        nan.setValue(100, 100, np.nan)
    nan.assemble()
    msgs = raised_everywhere(lambda: pc_from_options(nan, "sa_nan_", subdomains=4, overlap=1,
                                                     **common).destroy(), exc=Exception)
    assert all(m and "non-finite" in m for m in msgs), msgs
    nan.destroy(), big.destroy(), A.destroy()
