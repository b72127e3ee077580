r"""Transolver as its authors build it: the physics-attention mixer in its points form (linear
projections) and its grid form (3x3 / 3x3x3 convolutional projections, clamped temperature)
against a dense re-derivation of the paper's formula with the authors' settings, written here
and independent of the module (only the weights are copied from it), its initialisation, one set
of grid weights on two resolutions, the refusals; and the authors' network: shapes,
initialisation, positional input, input checks and a checkpoint round trip.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ddlearn.nn import checkpoint, make_mixer
from ddlearn.nn.data import grid_coords
from ddlearn.nn.model import NeuralOperator
from ddlearn.nn.physics import PhysicsAttentionMixer, tensor_grid_shape
from ddlearn.nn.registry import NETWORKS, build_network
from ddlearn.nn.transolver_network import TransolverNetwork

C, H, M = 16, 4, 8  # channels, heads (d = 4), slices
TAUS = [0.05, 0.5, 2.0, 8.0]  # two outside the authors' clamp [0.1, 5]


def mixer(form="points", dim=None, seed=0, slices=M, **kw):
    torch.manual_seed(seed)
    m = make_mixer("physics", C, H, slices=slices, form=form,
                   **({"dim": dim} if dim else {}), **kw).double()
    with torch.no_grad():
        m.temperature.copy_(torch.tensor(TAUS, dtype=torch.float64).view(1, H, 1, 1))
        for p in m.parameters():  # biases away from PyTorch's small defaults
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return m


def inputs(batch, tokens, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, tokens, C, generator=g, dtype=torch.float64)


def softmax(z, axis=-1):
    z = z - z.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def reference(m, x, grid=None):
    r"""Physics attention by the paper's formula, a loop over samples and heads in numpy::

        W_h = softmax_slices((X_h W_s + b_s) / tau_h),   tau_h clamped to [0.1, 5] on grids
        Z_h = diag(W_h^T 1 + 1e-5)^{-1} W_h^T F_h
        Y_h = W_h softmax(Z_h W_q (Z_h W_k)^T / sqrt d) Z_h W_v,   Y = [Y_1 .. Y_H] W_o + b_o

    with ``X = P_x(x)``, ``F = P_f(x)`` linear maps (points) or convolutions with kernel 3,
    padding 1 over the tokens reshaped to ``grid`` (x fastest), by ``F.conv2d`` / ``F.conv3d``.
    """
    P = {k: v.detach().numpy() for k, v in m.state_dict().items()}
    xn = x.detach().numpy()
    B, T, _ = xn.shape
    d = C // H

    def project(name):
        if grid is None:
            return xn @ P[f"{name}.weight"].T + P[f"{name}.bias"]
        conv = F.conv2d if len(grid) == 2 else F.conv3d
        y = conv(torch.as_tensor(xn).permute(0, 2, 1).reshape(B, C, *grid),
                 torch.as_tensor(P[f"{name}.weight"]), torch.as_tensor(P[f"{name}.bias"]),
                 padding=1)
        return y.reshape(B, C, T).permute(0, 2, 1).numpy()

    X, Fx = project("project_x"), project("project_f")
    out = np.zeros((B, T, C))
    for b in range(B):
        Y = []
        for h in range(H):
            cols = slice(h * d, (h + 1) * d)
            tau = P["temperature"][0, h, 0, 0]
            tau = np.clip(tau, 0.1, 5.0) if grid is not None else tau
            W = softmax((X[b][:, cols] @ P["to_slices.weight"].T + P["to_slices.bias"]) / tau)
            Z = (W.T @ Fx[b][:, cols]) / (W.sum(axis=0)[:, None] + 1e-5)
            Q, K, V = (Z @ P[f"to_{n}.weight"].T for n in "qkv")
            Y.append(W @ (softmax(Q @ K.T / np.sqrt(d)) @ V))
        out[b] = np.concatenate(Y, axis=1) @ P["out.weight"].T + P["out.bias"]
    return out


def close(a, b, tol=1e-12):
    a = a.detach().numpy() if isinstance(a, torch.Tensor) else a
    return float(np.abs(a - b).max()) <= tol * max(1.0, float(np.abs(b).max()))


# -- the mixer against the formula ---------------------------------------------------------------

def test_points_form_matches_the_formula_unclamped():
    m = mixer("points")
    x = inputs(2, 37)
    assert close(m(x), reference(m, x))
    # the irregular-mesh class divides by the raw temperature: the clamped formula differs
    assert not close(m(x), reference_clamped(m, x), 1e-6)


def reference_clamped(m, x):
    """The points form's formula with the temperature clamped (what it must not compute)."""
    clamped = mixer("points")
    clamped.load_state_dict(m.state_dict())
    with torch.no_grad():
        clamped.temperature.clamp_(0.1, 5.0)
    return reference(clamped, x)


@pytest.mark.parametrize("shape", [(5, 7), (3, 4, 5)])
def test_grid_form_matches_the_formula(shape):
    """2D (x 7 fastest) and 3D grids, non-square, so a transposed reshape would show."""
    m = mixer("grid", dim=len(shape))
    coords = grid_coords(shape)
    m.set_points(coords)
    assert m.grid == shape
    x = inputs(2, len(coords))
    assert close(m(x), reference(m, x, grid=shape))


def test_grid_form_runs_on_two_resolutions_with_one_set_of_weights():
    m = mixer("grid", dim=2)
    for shape in [(5, 7), (9, 13)]:
        coords = grid_coords(shape)
        m.set_points(torch.as_tensor(coords))
        x = inputs(1, len(coords), seed=shape[0])
        assert close(m(x), reference(m, x, grid=shape))
    with pytest.raises(ValueError, match="has 117 points for 35 tokens: call set_points"):
        m(inputs(1, 35))


def test_gradients_reach_every_parameter_of_the_grid_form():
    m = mixer("grid", dim=3)
    coords = grid_coords((3, 3, 4))
    m.set_points(coords)
    x = inputs(2, len(coords)).requires_grad_()
    m(x).square().sum().backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and p.grad.abs().max() > 0, name
    assert x.grad.abs().max() > 0


# -- the authors' settings -----------------------------------------------------------------------

@pytest.mark.parametrize("form", ["points", "grid"])
@pytest.mark.parametrize("slices", [3, 64])
def test_initialisation_and_layers_are_the_authors(form, slices):
    torch.manual_seed(0)
    m = PhysicsAttentionMixer(C, H, slices=slices, form=form)
    d = C // H
    W = m.to_slices.weight.detach().double()  # [slices, d], orthogonal rows or columns
    gram = W @ W.T if slices <= d else W.T @ W
    assert torch.allclose(gram, torch.eye(min(slices, d), dtype=torch.float64), atol=1e-6)
    assert m.to_slices.bias is not None and m.to_slices.bias.shape == (slices,)
    assert torch.equal(m.temperature, torch.full((1, H, 1, 1), 0.5))
    for name in ("to_q", "to_k", "to_v"):  # shared across heads, no bias
        layer = getattr(m, name)
        assert layer.weight.shape == (d, d) and layer.bias is None
    if form == "grid":
        for layer in (m.project_x, m.project_f):
            assert isinstance(layer, torch.nn.Conv2d) and layer.kernel_size == (3, 3)
            assert layer.padding == (1, 1) and layer.stride == (1, 1) and layer.bias is not None
        assert m.needs_points
    else:
        assert isinstance(m.project_x, torch.nn.Linear) and not m.needs_points
    m3 = PhysicsAttentionMixer(C, H, form="grid", dim=3)
    assert isinstance(m3.project_x, torch.nn.Conv3d) and m3.project_x.kernel_size == (3, 3, 3)


def test_defaults_are_the_authors():
    m = PhysicsAttentionMixer(64)
    assert (m.heads, m.slices, m.form) == (8, 64, "points")
    assert not any(isinstance(x, torch.nn.Dropout) for x in m.modules())


# -- refusals ------------------------------------------------------------------------------------

def test_point_sets_that_are_not_a_tensor_grid_are_refused():
    m = mixer("grid", dim=2)
    coords = grid_coords((4, 5))
    rng = np.random.default_rng(0)
    yfast = np.ascontiguousarray(coords.reshape(4, 5, 2).transpose(1, 0, 2).reshape(-1, 2))
    for bad in (rng.random((20, 2)), coords[rng.permutation(20)], yfast, coords[:-1]):
        with pytest.raises(ValueError, match=r"not the tokens of a tensor grid in order x "
                                             r"fastest .*use form='points'"):
            m.set_points(bad)
    with pytest.raises(ValueError, match=r"needs 2D coordinates \(tokens, 2\), got \(60, 3\)"):
        m.set_points(grid_coords((3, 4, 5)))
    with pytest.raises(ValueError, match="has none for 20 tokens: call set_points"):
        m(inputs(1, 20))
    assert tensor_grid_shape(coords) == (4, 5)


def test_options_the_authors_do_not_support_are_refused_with_the_valid_values():
    with pytest.raises(ValueError, match=r"unknown form 'conv', use one of \['points', 'grid'\]"):
        PhysicsAttentionMixer(C, H, form="conv")
    with pytest.raises(ValueError, match=r"the grid form has dim \[2, 3\].*got 1: use "
                                         r"form='points'"):
        PhysicsAttentionMixer(C, H, form="grid", dim=1)
    assert PhysicsAttentionMixer(C, H, form="points", dim=5).grid_dim is None  # unused there
    with pytest.raises(ValueError, match="slices must be positive"):
        PhysicsAttentionMixer(C, H, slices=0)
    with pytest.raises(ValueError, match=r"channels \(16\) must be a positive multiple of "
                                         r"heads \(3\)"):
        PhysicsAttentionMixer(C, 3)


# -- the authors' network ------------------------------------------------------------------------

def network(seed=0, **kw):
    torch.manual_seed(seed)
    return TransolverNetwork(**{"width": 16, "depth": 2, "heads": 4, "slices": 8, **kw}).double()


@pytest.mark.parametrize("form, unified_pos, in_fields", [
    ("grid", True, 1), ("grid", False, 2), ("points", True, 1), ("points", False, 0)])
def test_network_forward_shapes(form, unified_pos, in_fields):
    net = network(form=form, unified_pos=unified_pos, in_fields=in_fields, out_fields=3)
    coords = torch.as_tensor(grid_coords((6, 5)))
    net.use_mesh(coords)
    y = net(torch.rand(2, 30, in_fields, dtype=torch.float64), coords)
    assert y.shape == (2, 30, 3) and torch.isfinite(y).all()
    assert NETWORKS["transolver"] is TransolverNetwork


def test_network_initialisation_is_the_authors():
    torch.manual_seed(0)
    net = TransolverNetwork(width=64, depth=2, heads=8, slices=16, form="points")
    linears = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 2 + 2 * (2 + 7) + 1  # preprocess, per block MLP + mixer, head
    weights = torch.cat([m.weight.detach().flatten() for m in linears])
    assert abs(float(weights.std()) - 0.02) < 1e-3 and float(weights.abs().max()) < 0.2
    assert not any(m.bias.any() for m in linears if m.bias is not None)
    for m in net.modules():
        if isinstance(m, torch.nn.LayerNorm):
            assert torch.equal(m.weight, torch.ones_like(m.weight)) and not m.bias.any()
    e = net.placeholder.detach()
    assert 0 <= float(e.min()) and float(e.max()) <= 1 / 64
    # their structured model reads the placeholder only without input fields
    assert network(form="grid").placeholder is None
    assert network(form="grid", in_fields=0).placeholder is not None
    for b in net.blocks:
        assert torch.equal(b.mixer.temperature, torch.full((1, 8, 1, 1), 0.5))


def test_network_positions_are_distances_to_the_reference_grid():
    net = network(ref=3)
    coords = torch.as_tensor(grid_coords((4, 5)))
    ref = np.array([(a, b) for a in (0, 0.5, 1) for b in (0, 0.5, 1)])
    expected = np.linalg.norm(coords.numpy()[:, None] - ref[None], axis=-1)
    assert np.allclose(net.positions(coords).numpy(), expected, atol=1e-14)
    assert torch.equal(network(unified_pos=False).positions(coords), coords)


def test_network_refuses_bad_input_and_options():
    net = network()
    coords = torch.as_tensor(grid_coords((4, 5)))
    net.use_mesh(coords)
    with pytest.raises(ValueError, match=r"fields must have shape \[batch, tokens, 1\]"):
        net(torch.rand(2, 20, 2, dtype=torch.float64), coords)
    with pytest.raises(ValueError, match=r"coords must have shape \(20, 2\)"):
        net(torch.rand(2, 20, 1, dtype=torch.float64), coords[:, :1])
    bad = torch.rand(2, 20, 1, dtype=torch.float64)
    bad[0, 3] = float("nan")
    with pytest.raises(ValueError, match="NaN or inf"):
        net(bad, coords)
    with pytest.raises(ValueError, match="use form='points'"):
        net.use_mesh(torch.rand(20, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"unknown form 'mesh', use one of \['points', 'grid'\]"):
        TransolverNetwork(form="mesh")
    with pytest.raises(ValueError, match="unified_pos in the points form is 2D"):
        TransolverNetwork(dim=3, form="points")
    with pytest.raises(ValueError, match=r"the grid form has dim \[2, 3\]"):
        TransolverNetwork(dim=1, unified_pos=False)
    with pytest.raises(ValueError, match="depth must be at least 1"):
        TransolverNetwork(depth=0)


def test_network_checkpoint_round_trip(tmp_path):
    net = network(form="grid", dim=3, ref=2)
    coords = torch.as_tensor(grid_coords((3, 4, 3)))
    net.use_mesh(coords)
    fields = torch.rand(2, 36, 1, dtype=torch.float64)
    path = str(tmp_path / "transolver.pt")
    checkpoint.save(path, net.config, net.state_dict())
    saved = checkpoint.load(path, expect=net.config)
    rebuilt = build_network(saved["config"]).double()
    rebuilt.load_state_dict(saved["state"])
    rebuilt.use_mesh(coords)
    assert torch.equal(rebuilt(fields, coords), net(fields, coords))
    with pytest.raises(ValueError, match="made for another model or layout"):
        checkpoint.load(path, expect=network(form="points", dim=3, unified_pos=False).config)


def test_grid_form_in_the_backbone_runs_on_two_resolutions():
    """``NeuralOperator.use_mesh`` gives the grid form its points: one model on 9² and 17²."""
    torch.manual_seed(0)
    model = NeuralOperator(width=8, depth=1, heads=2, mixer="physics",
                           mixer_options={"slices": 4, "form": "grid", "dim": 2}).double()
    for side in (9, 17):
        coords = torch.as_tensor(grid_coords((side, side)))
        model.use_mesh(coords)
        y = model(torch.rand(2, side * side, 1, dtype=torch.float64), coords)
        assert y.shape == (2, side * side, 1) and torch.isfinite(y).all()
    assert model.blocks[0].mixer.grid == (17, 17)
