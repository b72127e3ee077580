r"""FLARE and FLARE++ as their authors build them, and FLARE's authors' network.

The mixers against a dense numpy re-derivation of the papers' formulas with the authors'
settings (weights copied from the module, written here independently of the mixers' code):
residual-MLP keys and values with tanh-GELU, unscaled logits, softmax over the tokens to
encode and over the latents to decode, FLARE++'s queries from one more encode driven by the
seeds; the initialisation statistics; the defaults; the refused options with their valid
values; the network's shapes, input checks, initialisation and checkpoint round trip.
"""
import json

import numpy as np
import pytest
import torch

from ddlearn.nn import MIXERS, make_mixer
from ddlearn.nn import checkpoint as ckpt
from ddlearn.nn.flare import FLAREMixer
from ddlearn.nn.flare_network import FLARENetwork
from ddlearn.nn.flarepp import FLAREPlusPlusMixer
from ddlearn.nn.registry import NETWORKS, build_network


def gelu_tanh(z):
    return 0.5 * z * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (z + 0.044715 * z ** 3)))


def softmax(s, axis):
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def residual_mlp(P, prefix, x, layers=3, input_residual=True, output_residual=True):
    """``h0 = [x +] g(W0 x + b0)``, ``h_l = h_{l-1} + g(W_l h_{l-1} + b_l)``,
    ``[h_L +] W h_L + b`` (the authors' key / value map and feed-forward: both residuals)."""
    lin = lambda name, z: z @ P[f"{prefix}.{name}.weight"].T + P[f"{prefix}.{name}.bias"]
    h = gelu_tanh(lin("fc_in", x)) + (x if input_residual else 0.0)
    for l in range(layers):
        h = h + gelu_tanh(lin(f"hidden.{l}", h))
    return lin("fc_out", h) + (h if output_residual else 0.0)


def dense_flare(m, x, plus_plus=False):
    r"""The FLARE (or FLARE++) mixer by its formula, a loop over samples and heads::

        K = MLP_K(X), V = MLP_V(X)
        FLARE++: Q_h = softmax_tokens(Qhat_h K_h^T) V_h;  FLARE: Q_h = Qtilde_h
        W_enc = softmax_tokens(Q_h K_h^T)      (M x T, scale 1)
        W_dec = softmax_latents(K_h Q_h^T)     (T x M, scale 1)
        Y_h = W_dec W_enc V_h                  (a rank <= M token-mixing matrix)
        mixer(X) = [Y_1 .. Y_H] W_O^T + b_O
    """
    P = {k: v.detach().numpy() for k, v in m.state_dict().items()}
    H, d = m.heads, m.head_dim
    B, T, C = x.shape
    K, V = residual_mlp(P, "k_proj", x), residual_mlp(P, "v_proj", x)
    Y = np.zeros((B, T, C))
    for b in range(B):
        for h in range(H):
            cols = slice(h * d, (h + 1) * d)
            k, v, q = K[b, :, cols], V[b, :, cols], P["queries"][h]
            if plus_plus:
                q = softmax(q @ k.T, axis=1) @ v
            W_enc = softmax(q @ k.T, axis=1)
            W_dec = softmax(k @ q.T, axis=1)
            mixing = W_dec @ W_enc
            assert np.linalg.matrix_rank(mixing) <= q.shape[0]
            Y[b, :, cols] = mixing @ v
    return Y @ P["out.weight"].T + P["out.bias"]


def built(cls, channels=16, heads=4, latents=3, seed=0):
    torch.manual_seed(seed)
    m = cls(channels, heads, latents).double()
    with torch.no_grad():  # biases away from their zero start, so the reference sees them
        for name, p in m.named_parameters():
            if name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return m


@pytest.mark.parametrize("cls, plus_plus", [(FLAREMixer, False), (FLAREPlusPlusMixer, True)],
                         ids=["flare", "flare++"])
@pytest.mark.parametrize("heads, latents", [(4, 3), (2, 7), (1, 5)])
def test_mixer_equals_the_dense_formula(cls, plus_plus, heads, latents):
    m = built(cls, 16, heads, latents)
    x = torch.randn(2, 11, 16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    ref = dense_flare(m, x.numpy(), plus_plus)
    assert np.abs(m(x).detach().numpy() - ref).max() <= 1e-12 * max(1.0, np.abs(ref).max())


def test_flare_and_flare_plus_plus_share_their_parameters():
    """FLARE++ adds no parameters: its seeds are FLARE's queries, the same key/value MLPs."""
    a, b = built(FLAREMixer), built(FLAREPlusPlusMixer)
    assert [(n, p.shape) for n, p in a.named_parameters()] == \
        [(n, p.shape) for n, p in b.named_parameters()]
    x = torch.randn(1, 9, 16, dtype=torch.float64)
    assert not torch.allclose(a(x), b(x))


@pytest.mark.parametrize("name", ["flare", "flare++"])
def test_initialisation_statistics(name):
    """Every linear weight N(0, 0.02^2), every bias zero, latent queries N(0, 0.1^2)."""
    torch.manual_seed(0)
    m = make_mixer(name, 64, 8, latents=64)
    weights = torch.cat([mod.weight.detach().flatten() for mod in m.modules()
                         if isinstance(mod, torch.nn.Linear)])
    assert weights.numel() == 11 * 64 * 64  # 5 layers each for K and V, one output layer
    assert abs(float(weights.std()) - 0.02) < 0.001 and abs(float(weights.mean())) < 0.001
    for mod in m.modules():
        if isinstance(mod, torch.nn.Linear):
            assert torch.equal(mod.bias, torch.zeros_like(mod.bias))
    q = m.queries.detach()
    assert q.shape == (8, 64, 8)
    assert abs(float(q.std()) - 0.1) < 0.005 and abs(float(q.mean())) < 0.005


def test_authors_structure_and_defaults():
    m = FLAREMixer(64)
    assert (m.heads, m.latents, m.head_dim) == (8, 64, 8)
    for proj in (m.k_proj, m.v_proj):
        assert len(proj.hidden) == 3 and proj.fc_in.out_features == 64  # 3 hidden, ratio 1
        assert proj.input_residual and proj.output_residual
        assert proj.act.approximate == "tanh"
    assert not any(isinstance(mod, (torch.nn.LayerNorm, torch.nn.Dropout))
                   for mod in m.modules())
    assert MIXERS["flare"] is FLAREMixer and MIXERS["flare++"] is FLAREPlusPlusMixer


def test_shapes_and_dtypes():
    for cls in (FLAREMixer, FLAREPlusPlusMixer):
        for dtype in (torch.float32, torch.float64):
            m = cls(16, 4, 5).to(dtype)
            y = m(torch.randn(3, 13, 16, dtype=dtype))
            assert y.shape == (3, 13, 16) and y.dtype == dtype and torch.isfinite(y).all()


@pytest.mark.parametrize("name", ["flare", "flare++"])
def test_bad_options_are_refused_with_the_valid_values(name):
    with pytest.raises(ValueError, match=r"channels \(12\) must be a positive multiple of "
                                         r"heads \(5\): use heads in \[1, 2, 3, 4, 6, 12\]"):
        make_mixer(name, 12, 5)
    with pytest.raises(ValueError, match=r"latents must be positive \(an integer >= 1\), "
                                         r"got 0"):
        make_mixer(name, 12, 4, latents=0)


# -- the authors' network -------------------------------------------------------------------------

def network(seed=0, **kw):
    torch.manual_seed(seed)
    return FLARENetwork(**{"dim": 2, "in_fields": 1, "out_fields": 2, "width": 16, "depth": 2,
                           "heads": 4, "latents": 8, **kw}).double()


def test_network_forward_shape_and_registry():
    net = network()
    assert NETWORKS["flare"] is FLARENetwork
    assert net.use_mesh(np.random.rand(20, 2)) is None
    y = net(torch.randn(3, 20, 1, dtype=torch.float64), torch.rand(20, 2, dtype=torch.float64))
    assert y.shape == (3, 20, 2) and torch.isfinite(y).all()
    assert len(net.blocks) == 2 and isinstance(net.blocks[0].mixer, FLAREMixer)
    assert len(net.blocks[0].mlp.hidden) == 3 and len(net.embed.hidden) == 2


def layer_norm(P, prefix, z, eps=1e-5):
    z = (z - z.mean(-1, keepdims=True)) / np.sqrt(z.var(-1, keepdims=True) + eps)
    return z * P[f"{prefix}.weight"] + P[f"{prefix}.bias"]


def test_network_equals_its_formula():
    r"""``h0 = P_in([p, a])`` (2 hidden layers, output residual), per block
    ``g = h + FLARE(LN h)``, ``h = g + F(LN g)`` (3 hidden layers, both residuals),
    ``u = P_out(LN h)`` (2 hidden layers, input residual), every piece by its formula."""
    net = network(seed=2)
    with torch.no_grad():  # biases and norms away from their 0 / 1 start
        for name, p in net.named_parameters():
            if name.endswith("bias") or "norm" in name or name.startswith("decode.0"):
                p.add_(0.1 * torch.randn_like(p))
    P = {k: v.detach().numpy() for k, v in net.state_dict().items()}
    f = torch.randn(2, 13, 1, dtype=torch.float64)
    c = torch.rand(13, 2, dtype=torch.float64)
    z = np.concatenate([np.broadcast_to(c.numpy(), (2, 13, 2)), f.numpy()], axis=-1)
    h = residual_mlp(P, "embed", z, 2, input_residual=False)
    for b, block in enumerate(net.blocks):
        h = h + dense_flare(block.mixer, layer_norm(P, f"blocks.{b}.norm1", h))
        h = h + residual_mlp(P, f"blocks.{b}.mlp", layer_norm(P, f"blocks.{b}.norm2", h))
    u = residual_mlp(P, "decode.1", layer_norm(P, "decode.0", h), 2, output_residual=False)
    assert np.abs(net(f, c).detach().numpy() - u).max() <= 1e-12 * max(1.0, np.abs(u).max())


def test_network_authors_initialisation():
    torch.manual_seed(0)
    net = FLARENetwork(2, 1, 1, width=64, depth=2, heads=8, latents=64)
    linears = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    w = torch.cat([m.weight.detach().flatten() for m in linears])
    assert abs(float(w.std()) - 0.02) < 0.001
    assert all(torch.equal(m.bias, torch.zeros_like(m.bias)) for m in linears)
    for m in net.modules():
        if isinstance(m, torch.nn.LayerNorm):
            assert torch.equal(m.weight, torch.ones_like(m.weight))
            assert torch.equal(m.bias, torch.zeros_like(m.bias))
    assert abs(float(net.blocks[1].mixer.queries.detach().std()) - 0.1) < 0.005


def test_network_input_checks():
    net = network()
    c = torch.rand(20, 2, dtype=torch.float64)
    f = torch.randn(2, 20, 1, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"fields must have shape \[batch, tokens, 1\], got "
                                         r"\(2, 20, 3\)"):
        net(torch.randn(2, 20, 3, dtype=torch.float64), c)
    with pytest.raises(ValueError, match=r"fields must have shape"):
        net(f[0], c)
    with pytest.raises(ValueError, match=r"coords must have shape \(20, 2\) \(one point per "
                                         r"token\), got \(19, 2\)"):
        net(f, c[:19])
    for bad in (float("nan"), float("inf")):
        g = f.clone()
        g[1, 3, 0] = bad
        with pytest.raises(ValueError, match="the inputs contain NaN or inf"):
            net(g, c)
    with pytest.raises(ValueError, match=r"use heads in \[1, 2, 4, 8, 16\]"):
        network(heads=3)
    with pytest.raises(ValueError, match="latents must be positive"):
        network(latents=0)
    with pytest.raises(ValueError, match="FLARENetwork: depth must be positive, got 0"):
        network(depth=0)


def test_network_checkpoint_round_trip(tmp_path):
    net = network(seed=4)
    assert json.loads(json.dumps(net.config)) == net.config
    path = str(tmp_path / "flare.pt")
    ckpt.save(path, net.config, net.state_dict(), epoch=3)
    saved = ckpt.load(path, expect=net.config)
    cfg = saved["config"]
    again = build_network(cfg).double()
    again.load_state_dict(saved["state"])
    f = torch.randn(2, 15, 1, dtype=torch.float64)
    c = torch.rand(15, 2, dtype=torch.float64)
    assert torch.equal(again(f, c), net(f, c))
    with pytest.raises(ValueError, match="checkpoint .* was made for another model"):
        ckpt.load(path, expect=network(width=32).config)
    with pytest.raises(ValueError, match="config names network 'fare', which is not one of"):
        build_network({**cfg, "network": "fare"})
