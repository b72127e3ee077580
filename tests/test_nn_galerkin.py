r"""The Galerkin mixer against its authors' layer: ``SimpleAttention`` of the
``galerkin-transformer`` package (``attention_type='galerkin'``, one LayerNorm per head on
:math:`K` and :math:`V`, the coordinates in every head) gives the same parameters from the same
random state and the same outputs from the same weights; shapes, missing coordinates and bad
options are refused clearly."""
import numpy as np
import pytest
import torch

from ddlearn.nn import make_mixer
from ddlearn.nn.galerkin import GalerkinMixer
from ddlearn.nn.model import NeuralOperator

C, H, T, DIM = 12, 3, 40, 2
#: the authors' Darcy settings (their config.yml, ex2_darcy)
GAIN, DIAGONAL, EPS = 1e-2, 1e-2, 1e-7


def points(T=T, dim=DIM, seed=0):
    return np.random.default_rng(seed).random((T, dim))


def authors(dim=DIM):
    """Their layer with their Darcy settings; dropout off (their ``linear_attention`` applies
    ``F.dropout(p_attn)`` with p = 0.5 whenever its ``dropout`` argument is not ``None``)."""
    layers = pytest.importorskip("galerkin_transformer.layers")
    ref = layers.SimpleAttention(n_head=H, d_model=C, pos_dim=dim, attention_type="galerkin",
                                 dropout=0.0, xavier_init=GAIN, diagonal_weight=DIAGONAL,
                                 symmetric_init=False, norm=True, norm_type="layer", eps=EPS)
    ref.dropout = None
    return ref


def their_names(h: int = H) -> dict:
    """Our parameter name -> a function of their layer giving the same tensor."""
    names = {f"{ours}.{p}": (lambda r, i=i, p=p: getattr(r.linears[i], p))
             for i, ours in enumerate("qkv") for p in ("weight", "bias")}
    names.update({"out.weight": lambda r: r.fc.weight, "out.bias": lambda r: r.fc.bias})
    for ours, theirs in (("norm_k", "norm_K"), ("norm_v", "norm_V")):
        for p in ("weight", "bias"):
            names[f"{ours}.{p}"] = (lambda r, t=theirs, p=p:
                                    torch.stack([getattr(n, p) for n in getattr(r, t)]))
    return names


def test_same_parameters_from_the_same_random_state():
    """Their initialisation (xavier with gain 0.01 plus 0.01 I, zero biases, default output
    projection) drawn in their order."""
    torch.manual_seed(3)
    ref = authors()
    torch.manual_seed(3)
    ours = GalerkinMixer(C, H, dim=DIM, gain=GAIN, diagonal=DIAGONAL, eps=EPS)
    names = their_names()
    assert set(names) == {n for n, _ in ours.named_parameters()}
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p, names[name](ref), rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("dim", [2, 3])
def test_equal_outputs_to_the_authors_layer(dim):
    """Every parameter moved off its initial value (norm affine weights too), copied into both;
    float64 outputs equal to 1e-12."""
    ref = authors(dim).double()
    ours = GalerkinMixer(C, H, dim=dim, gain=GAIN, diagonal=DIAGONAL, eps=EPS).double()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in ours.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
        for i, lin in enumerate((ours.q, ours.k, ours.v)):
            ref.linears[i].load_state_dict(lin.state_dict())
        ref.fc.load_state_dict(ours.out.state_dict())
        for norm, theirs in ((ours.norm_k, ref.norm_K), (ours.norm_v, ref.norm_V)):
            for h, n in enumerate(theirs):
                n.weight.copy_(norm.weight[h])
                n.bias.copy_(norm.bias[h])
    for name, p in ours.named_parameters():  # the copy is complete
        torch.testing.assert_close(p, their_names()[name](ref), rtol=0, atol=0, msg=name)
    pts = points(dim=dim)
    ours.set_points(pts)
    x = torch.randn(2, T, C, generator=g, dtype=torch.float64)
    pos = torch.as_tensor(pts).expand(2, T, dim)
    want = ref(x, x, x, pos=pos)[0].detach()
    got = ours(x).detach()
    assert got.shape == want.shape == (2, T, C)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12 * float(want.abs().max()))


def test_shapes_and_any_mesh():
    """One mixer on two meshes of other sizes; in the backbone it gets the coordinates and their
    dimension from the model."""
    m = GalerkinMixer(C, H, dim=3).double()
    for n in (17, 50):
        m.set_points(points(n, 3))
        assert m(torch.randn(4, n, C, dtype=torch.float64)).shape == (4, n, C)
    assert m.out.in_features == C + H * 3
    model = NeuralOperator(dim=3, width=C, depth=1, heads=H, mixer="galerkin").double()
    model.use_mesh(points(20, 3))
    coords = torch.as_tensor(points(20, 3))
    assert model(torch.randn(2, 20, 1, dtype=torch.float64), coords).shape == (2, 20, 1)
    assert model.blocks[0].mixer.dim == 3


def test_missing_or_wrong_coordinates_are_refused():
    m = make_mixer("galerkin", C, H, dim=DIM)
    x = torch.randn(1, T, C)
    with pytest.raises(ValueError, match=r"reads the token coordinates and has none for 40 "
                                         r"tokens: call set_points"):
        m(x)
    m.set_points(points(T - 1))
    with pytest.raises(ValueError, match="has 39 points for 40 tokens"):
        m(x)
    with pytest.raises(ValueError, match=r"built for points of shape \(tokens, 2\) \(its option "
                                         r"dim\), got \(40, 3\): build it with dim=3"):
        m.set_points(points(T, 3))


@pytest.mark.parametrize("kwargs, match", [
    ({"channels": 12, "heads": 5}, r"channels \(12\) must be a positive multiple of heads \(5\)"
                                   r": heads for 12 channels: \[1, 2, 3, 4, 6, 12\]"),
    ({"dim": 0}, r"dim must be a positive integer \(the coordinates' dimension\), got 0"),
    ({"dim": 1.5}, "dim must be a positive integer"),
    ({"gain": 0.0}, "gain must be positive, got 0.0"),
    ({"diagonal": -1e-2}, "diagonal must be 0 or more, got -0.01"),
    ({"eps": 0}, "eps must be positive, got 0"),
])
def test_bad_options_are_refused_with_the_valid_values(kwargs, match):
    args = {"channels": C, "heads": H, **kwargs}
    with pytest.raises(ValueError, match=match):
        GalerkinMixer(**args)
