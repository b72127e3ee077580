r"""The token-mixer contract, for every mixer of :data:`ddlearn.nn.MIXERS` (a new mixer is
tested by registering it): ``[batch, tokens, channels]`` in and out in float32 and float64,
gradients reaching every parameter, samples of a batch independent, equivariance to a
permutation of the tokens (for a mixer with a layout: the layout rebuilt from the permuted
coordinates), and clear errors.

Schwarz attention and its layout against their definitions: a dense reference looping over the
subdomains (:math:`R_i`, :math:`D_i^{1/2}`, softmax and Galerkin attention, the coarse level
through a dense :math:`\Phi`) to 1e-12 in float64, the index sets against graph distances,
:math:`\sum_i R_i^TD_iR_i = I`, the levels adding up, and the layout's errors and cache.
"""
import numpy as np
import pytest
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import shortest_path

from ddlearn.nn import MIXERS, TokenLayout, make_mixer, mixer_class
from ddlearn.nn.layout import token_graph

NAMES = list(MIXERS)
CHANNELS, HEADS = 8, 2
DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def random_points(T: int, dim: int, seed: int = 0) -> np.ndarray:
    """``T`` uniform random points: no two share a coordinate or a distance (no ties for the
    partitioners or the nearest-neighbour graph to break by token number)."""
    return np.random.default_rng(seed).random((T, dim))


def grid_points(*shape) -> np.ndarray:
    """The points of a tensor grid, x fastest."""
    axes = np.meshgrid(*[np.arange(n, dtype=np.float64) for n in shape], indexing="ij")
    return np.stack([a.ravel(order="F") for a in axes], axis=1)


POINTS = random_points(60, 2)
LAYOUT = TokenLayout.build(POINTS, subdomains=4, overlap=1)


def build(name, dtype=torch.float64, layout=LAYOUT, seed=0, **options):
    torch.manual_seed(seed)
    m = make_mixer(name, CHANNELS, HEADS, layout=layout, dim=POINTS.shape[1], **options)
    m.set_points(POINTS)
    return m.to(dtype)


def inputs(batch, tokens, dtype=torch.float64, seed=1, channels=CHANNELS):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, tokens, channels, generator=g, dtype=torch.float64).to(dtype)


def close(a, b, tol):
    """``max |a - b| <= tol max(1, max |b|)``."""
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max()) <= tol * max(1.0, float(b.abs().max()))


# -- the contract, for every registered mixer ----------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NAMES)
def test_shape_dtype_and_finite(name, dtype):
    m = build(name, dtype)
    x = inputs(3, LAYOUT.tokens, dtype)
    y = m(x)
    assert y.shape == x.shape and y.dtype == dtype
    assert torch.isfinite(y).all()
    assert all(p.dtype == dtype for p in m.parameters())


@pytest.mark.parametrize("name", NAMES)
def test_gradients_reach_every_parameter_and_the_input(name):
    m = build(name)
    x = inputs(2, LAYOUT.tokens).requires_grad_()
    m(x).square().sum().backward()
    for pname, p in m.named_parameters():
        assert p.grad is not None, f"{name}: no gradient reaches {pname}"
        assert torch.isfinite(p.grad).all() and p.grad.abs().max() > 0, f"{name}: {pname}"
    assert x.grad.abs().max() > 0


@pytest.mark.parametrize("name", NAMES)
def test_samples_of_a_batch_are_independent(name):
    m = build(name)
    x = inputs(3, LAYOUT.tokens).requires_grad_()
    y = m(x)
    # sample 0's output does not depend on samples 1 and 2: exactly zero Jacobian blocks
    (g,) = torch.autograd.grad(y[0].sum(), x)
    assert g[0].abs().max() > 0 and torch.equal(g[1:], torch.zeros_like(g[1:]))
    # and equals the output of sample 0 run alone
    for b in range(3):
        assert close(m(x[b:b + 1])[0], y[b], 1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_equivariant_to_a_permutation_of_the_tokens(name):
    """``mixer(x[:, p]) = mixer(x)[:, p]``; a mixer with a layout gets the layout of the
    permuted coordinates (here tie-free random points, so that the partition and the graph do
    not depend on the token numbering)."""
    perm = np.random.default_rng(5).permutation(LAYOUT.tokens)
    m = build(name)
    x = inputs(2, LAYOUT.tokens)
    y = m(x)
    if m.needs_layout:
        m.set_layout(TokenLayout.build(POINTS[perm], subdomains=4, overlap=1))
    m.set_points(POINTS[perm])
    assert close(m(x[:, perm]), y[:, perm], 1e-12)


@pytest.mark.parametrize("partitioner", ["boxes", "rcb"])
@pytest.mark.parametrize("attention", ["softmax", "galerkin"])
def test_schwarz_equivariant_with_the_layout_of_the_permuted_points(partitioner, attention):
    """Boxes and RCB cut by coordinate value, so on points with distinct coordinates the
    subdomains (and the nicolaides coarse basis) move with the tokens; 3D, overlap 2."""
    pts = random_points(90, 3, seed=2)
    perm = np.random.default_rng(6).permutation(len(pts))
    kw = dict(subdomains=8, overlap=2, partitioner=partitioner)
    m = build("schwarz", layout=TokenLayout.build(pts, **kw), attention=attention)
    x = inputs(2, len(pts))
    y = m(x)
    m.set_layout(TokenLayout.build(pts[perm], **kw))
    assert close(m(x[:, perm]), y[:, perm], 1e-12)


# -- clear errors --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_wrong_input_shapes_are_named(name):
    m = build(name)
    with pytest.raises(ValueError, match=rf"\[batch, tokens, {CHANNELS}\], got \(2, 60, 9\)"):
        m(inputs(2, LAYOUT.tokens, channels=CHANNELS + 1))
    with pytest.raises(ValueError, match="input must have shape"):
        m(inputs(2, LAYOUT.tokens)[0])


@pytest.mark.parametrize("name", NAMES)
def test_channels_not_a_multiple_of_heads(name):
    with pytest.raises(ValueError, match=r"channels \(10\) must be a positive multiple of "
                                         r"heads \(4\)"):
        make_mixer(name, 10, 4, layout=LAYOUT)


@pytest.mark.parametrize("name", [n for n in NAMES if MIXERS[n].needs_layout])
def test_layout_errors(name):
    m = build(name, layout=None)
    with pytest.raises(ValueError, match="has no token layout: call set_layout"):
        m(inputs(1, LAYOUT.tokens))
    m.set_layout(LAYOUT)
    with pytest.raises(ValueError, match="input has 59 tokens but the layout has 60"):
        m(inputs(1, LAYOUT.tokens - 1))


def test_unknown_names_and_options():
    with pytest.raises(ValueError, match=r"unknown mixer 'transformer': use one of \["):
        make_mixer("transformer", CHANNELS, HEADS)
    with pytest.raises(ValueError, match="unknown mixer"):
        mixer_class("Schwarz")
    with pytest.raises(ValueError, match=r"unknown attention 'linear', use one of"):
        make_mixer("schwarz", CHANNELS, HEADS, layout=LAYOUT, attention="linear")
    with pytest.raises(ValueError, match=r"unknown levels 'fine', use one of"):
        make_mixer("schwarz", CHANNELS, HEADS, layout=LAYOUT, levels="fine")
    for name, option in (("flare", "latents"), ("flare++", "latents"), ("physics", "slices")):
        with pytest.raises(ValueError, match=f"{option} must be positive"):
            make_mixer(name, CHANNELS, HEADS, **{option: 0})
    with pytest.raises(TypeError, match="latents"):  # an option another mixer does not take
        make_mixer("softmax", CHANNELS, HEADS, latents=8)


# -- Schwarz attention against its definition ------------------------------------------------------

def dense_phi(L: TokenLayout) -> np.ndarray:
    return sp.coo_matrix((L.phi_vals, (L.phi_rows, L.phi_cols)), shape=(L.tokens, L.n0)).toarray()


def index_sets(L: TokenLayout):
    """``(I_i, diag D_i^{1/2})`` for every subdomain, without the padding."""
    return [(L.index[i, :n], L.sqrt_D[i, :n]) for i, n in enumerate(L.sizes)]


def reference(m, L: TokenLayout, x: np.ndarray) -> np.ndarray:
    r"""Schwarz attention by its formula, a loop over samples, heads and subdomains in numpy::

        Y_h = sum_i R_i^T D_i^{1/2} Att(R_i Q, R_i K, D_i^{1/2} R_i V)
              + Phi Att(Phihat^T Q, Phihat^T K, Phihat^T V)

    with ``Phihat`` the columns of ``Phi`` scaled to sum to one; ``Att`` softmax
    ``softmax(Q K^T / sqrt d) V`` or Galerkin ``Q (K^T V) / n`` with ``K, V`` layer-normalised
    (on the tokens, before the weights, in the local level); restricted, the local level is
    ``sum_i Rt_i^T Att(Rt_i Q, R_i K, R_i V)`` with ``Rt_i`` the rows of part ``i``; the two
    levels summed per head
    (``combine='sum'``), side by side (``'concat'``) or on separate heads (``'split'``), and
    ``prolongation='attention'`` reading the coarse tokens by softmax attention."""
    P = {k: v.detach().numpy() for k, v in m.state_dict().items()}
    H, d, C = m.heads, m.head_dim, m.channels
    qkv = x @ P["qkv.weight"].T + P["qkv.bias"]
    heads = [qkv[..., j * C:(j + 1) * C].reshape(*x.shape[:2], H, d) for j in range(3)]

    def norm(z, which):
        z = (z - z.mean(-1, keepdims=True)) / np.sqrt(z.var(-1, keepdims=True) +
                                                     getattr(m, which).eps)
        return z * P[f"{which}.weight"] + P[f"{which}.bias"]

    def softmax_att(q, k, v):
        s = q @ k.T / np.sqrt(d)
        e = np.exp(s - s.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)) @ v

    def att(q, k, v, normed=False):
        if m.attention == "softmax":
            return softmax_att(q, k, v)
        if not normed:
            k, v = norm(k, "norm_k"), norm(v, "norm_v")
        return q @ (k.T @ v) / len(k)  # the mean over the keys

    Phi = dense_phi(L)
    Phihat = Phi / Phi.sum(axis=0)
    split = m.combine == "split"
    local_heads = range(H // 2) if split else range(H)
    coarse_heads = range(H // 2, H) if split else range(H)
    y_loc, y_co = np.zeros((*x.shape[:2], H, d)), np.zeros((*x.shape[:2], H, d))
    for b in range(x.shape[0]):
        for h in range(H):
            q, k, v = (z[b, :, h] for z in heads)
            if m.levels in ("both", "local") and h in local_heads:
                kn, vn = (norm(k, "norm_k"), norm(v, "norm_v")) if m.attention == "galerkin" \
                    else (k, v)
                for i, (I, w) in enumerate(index_sets(L)):
                    if m.restricted:
                        own = np.flatnonzero(L.part == i)
                        y_loc[b, own, h] += att(q[own], kn[I], vn[I], True)
                    else:
                        y_loc[b, I, h] += w[:, None] * att(q[I], kn[I], w[:, None] * vn[I], True)
            if m.levels in ("both", "coarse") and h in coarse_heads:
                k0 = Phihat.T @ k
                y0 = att(Phihat.T @ q, k0, Phihat.T @ v)
                y_co[b, :, h] += softmax_att(q, k0, y0) if m.prolongation == "attention" \
                    else Phi @ y0
    B, T = x.shape[:2]
    if split:
        y = np.concatenate([y_loc[:, :, local_heads], y_co[:, :, coarse_heads]], axis=2)
    elif m.combine == "concat":
        y = np.concatenate([y_loc.reshape(B, T, C), y_co.reshape(B, T, C)], axis=-1)
    else:
        y = y_loc + y_co
    return y.reshape(B, T, -1) @ P["out.weight"].T + P["out.bias"]


CASES = [  # dim, points, N, partitioner, coarse, overlap
    (2, "grid", 4, "boxes", "nicolaides", 0),
    (2, "grid", 6, "boxes", "hats", 1),
    (2, "random", 4, "boxes", "hats", 2),
    (2, "random", 5, "rcb", "nicolaides", 1),
    (2, "grid", 4, "metis", "nicolaides", 2),
    (3, "grid", 8, "boxes", "hats", 1),
    (3, "random", 6, "rcb", "nicolaides", 2),
    (3, "random", 4, "metis", "nicolaides", 0),
]


def case_points(dim, kind):
    return grid_points(*((9, 8) if dim == 2 else (5, 4, 6))) if kind == "grid" else \
        random_points(70 if dim == 2 else 110, dim, seed=dim)


def case_id(c):
    return f"{c[0]}d-{c[1]}-N{c[2]}-{c[3]}-{c[4]}-overlap{c[5]}"


@pytest.mark.parametrize("restricted", [False, True], ids=["weighted", "restricted"])
@pytest.mark.parametrize("levels", ["both", "local", "coarse"])
@pytest.mark.parametrize("attention", ["softmax", "galerkin"])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_schwarz_equals_the_dense_reference(case, attention, levels, restricted):
    dim, kind, N, partitioner, coarse, overlap = case
    L = TokenLayout.build(case_points(dim, kind), subdomains=N, overlap=overlap,
                          partitioner=partitioner, coarse=coarse)
    assert L.N == N and L.dim == dim
    m = build("schwarz", layout=L, attention=attention, levels=levels, restricted=restricted)
    if attention == "galerkin":  # LayerNorm affine parameters away from their 1, 0 start
        with torch.no_grad():
            for p in (*m.norm_k.parameters(), *m.norm_v.parameters()):
                p.add_(0.3 * torch.randn_like(p))
    x = inputs(2, L.tokens)
    assert close(m(x), torch.from_numpy(reference(m, L, x.numpy())), 1e-12)
    if not restricted:
        return
    parts = L.part_index()  # every token asks in exactly one subdomain, its own part's
    assert np.array_equal(np.sort(parts[parts < L.tokens]), np.arange(L.tokens))
    if overlap == 0:  # no overlap: the restricted and the weighted forms are one operator
        w = build("schwarz", layout=L, attention=attention, levels=levels)
        w.load_state_dict(m.state_dict())
        assert close(m(x), w(x), 1e-12)


def test_restricted_needs_each_part_inside_its_set():
    sets = [np.arange(18), np.arange(18, 36)]
    part = (np.arange(36) >= 12).astype(int)  # tokens 12..17 in part 1, outside set 1
    L = TokenLayout.of_sets(sets, part, dim=2)
    m = build("schwarz", layout=L, restricted=True)
    with pytest.raises(ValueError, match="outside the overlapping set of their own part"):
        m(inputs(1, 36))
    assert torch.isfinite(build("schwarz", layout=L)(inputs(1, 36))).all()  # weighted: fine


@pytest.mark.parametrize("prolongation", ["phi", "attention"])
@pytest.mark.parametrize("combine", ["sum", "concat", "split"])
@pytest.mark.parametrize("attention", ["softmax", "galerkin"])
def test_schwarz_combinations_equal_the_dense_reference(attention, combine, prolongation):
    L = TokenLayout.build(case_points(2, "grid"), subdomains=4, overlap=1)
    m = build("schwarz", layout=L, attention=attention, combine=combine,
              prolongation=prolongation)
    x = inputs(2, L.tokens)
    assert close(m(x), torch.from_numpy(reference(m, L, x.numpy())), 1e-12)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_layout_subdomains_partition_of_unity_and_coarse_basis(case):
    r""":math:`I_i` = the tokens within ``overlap`` graph layers of part ``i``;
    :math:`\sum_i R_i^TD_iR_i = I`; :math:`\Phi\ge 0` with rows summing to one, and for ``nicolaides``
    :math:`\Phi e_i = R_i^TD_iR_i\mathbf 1`."""
    dim, kind, N, partitioner, coarse, overlap = case
    pts = case_points(dim, kind)
    L = TokenLayout.build(pts, subdomains=N, overlap=overlap, partitioner=partitioner,
                          coarse=coarse)
    T = L.tokens
    assert sorted(np.unique(L.part)) == list(range(N))
    hops = shortest_path(token_graph(pts), unweighted=True)
    total = np.zeros((T, T))
    for i, (I, w) in enumerate(index_sets(L)):
        near = np.flatnonzero(hops[:, L.part == i].min(axis=1) <= overlap)
        assert np.array_equal(np.sort(I), near), f"subdomain {i}"
        R = np.zeros((len(I), T))
        R[np.arange(len(I)), I] = 1.0
        total += R.T @ np.diag(w ** 2) @ R
    assert np.allclose(total, np.eye(T), rtol=0, atol=1e-14)
    assert np.all(L.index[L.sqrt_D == 0] == T)  # padding points at the dummy token
    Phi = dense_phi(L)
    assert Phi.min() >= 0 and np.allclose(Phi.sum(axis=1), 1.0, rtol=0, atol=1e-14)
    if coarse == "nicolaides":
        for i, (I, w) in enumerate(index_sets(L)):
            col = np.zeros(T)
            col[I] = w ** 2
            assert np.allclose(Phi[:, i], col, rtol=0, atol=1e-15)
    if overlap == 0:
        assert L.sizes.sum() == T and np.all(L.sqrt_D[L.sqrt_D > 0] == 1.0)


@pytest.mark.parametrize("attention", ["softmax", "galerkin"])
def test_schwarz_levels_add_up_before_the_output_projection(attention):
    """``local + coarse = both`` on what enters ``out`` with the paper's ``combine='sum'`` (an
    affine map, so after it the bias is counted twice)."""
    L = TokenLayout.build(grid_points(6, 7, 3), subdomains=6, overlap=1, coarse="hats")
    x = inputs(2, L.tokens)
    merged = {}
    for levels in ("both", "local", "coarse"):
        m = build("schwarz", layout=L, attention=attention, levels=levels, combine="sum")
        m.out.register_forward_pre_hook(lambda mod, args, lv=levels: merged.update({lv: args[0]}))
        merged[levels + " out"] = m(x)
    assert close(merged["local"] + merged["coarse"], merged["both"], 1e-12)
    bias = m.out.bias
    assert close(merged["local out"] + merged["coarse out"] - bias, merged["both out"], 1e-12)
    assert merged["local"].abs().max() > 0 and merged["coarse"].abs().max() > 0


# -- the layout's errors and cache ----------------------------------------------------------------

def test_layout_empty_part_errors():
    diagonal = np.repeat(np.arange(8.0)[:, None], 2, axis=1)  # the 2 x 2 boxes off it are empty
    with pytest.raises(ValueError, match=r"boxes partition of 8 tokens into 4 parts left 2 "
                                         r"part\(s\) empty \(e.g. \[1, 2\]\): use fewer"):
        TokenLayout.build(diagonal, subdomains=4)
    line = np.stack([np.arange(10.0), np.zeros(10)], axis=1)  # one distinct y value
    with pytest.raises(ValueError, match="2 boxes along axis 1 but only 1 distinct coordinates"
                                         ": use fewer subdomains or partitioner='rcb'"):
        TokenLayout.build(line, subdomains=4)
    # rcb on the same line splits by x alone: every part holds points
    assert TokenLayout.build(line, subdomains=4, partitioner="rcb").N == 4


def test_layout_argument_errors():
    pts = random_points(30, 2)
    bad = pts.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="coords contain NaN or inf"):
        TokenLayout.build(bad)
    bad[3, 1] = np.inf
    with pytest.raises(ValueError, match="coords contain NaN or inf"):
        TokenLayout.build(bad)
    with pytest.raises(ValueError, match=r"coords must have shape \(tokens, dim\)"):
        TokenLayout.build(pts[:, 0])
    with pytest.raises(ValueError, match="unknown partitioner 'kway'"):
        TokenLayout.build(pts, partitioner="kway")
    with pytest.raises(ValueError, match="partitioner= parmetis: PETSc's MatPartitioning"):
        TokenLayout.build(pts, partitioner="parmetis")
    with pytest.raises(ValueError, match="unknown coarse basis 'spectral'"):
        TokenLayout.build(pts, coarse="spectral")
    with pytest.raises(ValueError, match="coarse='hats' needs partitioner='boxes'"):
        TokenLayout.build(pts, partitioner="rcb", coarse="hats")
    with pytest.raises(ValueError, match=r"subdomains must be in 1\.\.30"):
        TokenLayout.build(pts, subdomains=31)
    with pytest.raises(ValueError, match="overlap must be >= 0"):
        TokenLayout.build(pts, overlap=-1)
    with pytest.raises(ValueError, match=r"graph has shape \(29, 29\); it needs \(30, 30\)"):
        TokenLayout.build(pts, graph=sp.identity(29, format="csr"))


def test_layout_cache():
    pts = random_points(50, 2, seed=9)
    L = TokenLayout.build(pts, subdomains=4, overlap=1)
    assert TokenLayout.build(pts.copy(), subdomains=4, overlap=1) is L
    assert TokenLayout.build(pts.astype(np.float32).astype(np.float64), 4, 1) is not L
    assert TokenLayout.build(pts, subdomains=4, overlap=2) is not L
    assert TokenLayout.build(pts, subdomains=4, overlap=1, partitioner="rcb") is not L
    G = token_graph(pts)
    assert TokenLayout.build(pts, subdomains=4, overlap=1, graph=G) is \
        TokenLayout.build(pts, subdomains=4, overlap=1, graph=G.copy())
    # subdomain_size is a way to choose N: the same N is the same layout
    assert TokenLayout.build(pts, subdomain_size=12, overlap=1) is \
        TokenLayout.build(pts, subdomains=4, overlap=1)
    assert L.tensors("cpu", torch.float64) is L.tensors("cpu", torch.float64)


# -- CUDA ----------------------------------------------------------------------------------------

@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
@pytest.mark.parametrize("name", NAMES)
def test_cuda_matches_cpu(name):
    m = build(name)
    x = inputs(2, LAYOUT.tokens).requires_grad_()
    y = m(x)
    y.square().sum().backward()
    mc = build(name).cuda()
    xc = x.detach().cuda().requires_grad_()
    yc = mc(xc)
    yc.square().sum().backward()
    assert yc.device.type == "cuda" and close(yc.cpu(), y, 1e-10)
    assert close(xc.grad.cpu(), x.grad, 1e-10)
    for (n, p), pc in zip(m.named_parameters(), mc.parameters()):
        assert close(pc.grad.cpu(), p.grad, 1e-10), n
