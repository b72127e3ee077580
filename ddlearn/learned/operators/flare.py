r"""FLARE and FLARE++ (latent-routing attention) adapted to learning :math:`f\mapsto A^{-1}f`.

Tokens are the ``n`` grid points. Token ``j`` carries fixed positional features
:math:`p_j = (x_j, \sin(2^l\pi x_j), \cos(2^l\pi x_j))_{l<L}` per coordinate; the value carried
by a token is the right-hand side :math:`f_j`. For each of ``H`` heads, keys
:math:`K_h = pW_{K,h}\in\mathbb R^{n\times d}` and ``M`` latent queries
:math:`\tilde Q_h\in\mathbb R^{M\times d}` define

.. math:: W_{enc,h} = \mathrm{softmax}_{\text{tokens}}(\tilde Q_hK_h^T/\sqrt d),\quad
          W_{dec,h} = \mathrm{softmax}_{\text{latents}}(K_h\tilde Q_h^T/\sqrt d),\quad
          u = \sum_h W_{dec,h}\,\mathrm{diag}(s_h)\,W_{enc,h}\,f,

a rank-:math:`\le HM` encode/decode; :math:`s_h\in\mathbb R^M` is a learned latent value scale
(the only value map a scalar field admits). In **FLARE** the queries are parameters, so the model
is one fixed linear operator. **FLARE++** synthesises its queries from the input tokens with one
more encode call driven by learned seeds :math:`\hat Q_h`:
:math:`\tilde Q_h(f) = \mathrm{softmax}_{\text{tokens}}(\hat Q_h K_h'^T/\sqrt d)V_h'`, where
:math:`K_h', V_h'` are linear maps of the token features :math:`(p_j, f_j/\mathrm{rms}(f))`.
The normalisation makes FLARE++ positively homogeneous, :math:`M(\alpha f) = \alpha M(f)` for
:math:`\alpha>0`, but it is not linear in ``f``: its "operator error" is measured on unit vectors
and means less than for the linear models.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .attention import check_input, torch_dtype

__all__ = ["FLARE", "FLAREPlusPlus", "positional_features"]


def positional_features(grid, levels: int, dtype) -> torch.Tensor:
    """Fixed token features, shape ``(n, dim * (2 levels + 1))``, natural ordering."""
    axes = [torch.arange(1, m + 1, dtype=dtype) / (m + 1) for m in grid]
    coords = torch.stack([c.reshape(-1) for c in torch.meshgrid(*axes[::-1], indexing="ij")][::-1],
                         dim=1)  # (n, dim), x fastest
    feats = [coords]
    for l in range(levels):
        feats += [torch.sin(2**l * math.pi * coords), torch.cos(2**l * math.pi * coords)]
    return torch.cat(feats, dim=1)


class FLARE(nn.Module):
    """FLARE with fixed learned latent queries (see module docstring)."""

    kind = "flare"

    def __init__(self, grid, heads: int = 4, latents: int = 32, width: int = 16,
                 levels: int = 8, dtype: str = "float64", seed: int = 0):
        super().__init__()
        for name, v in (("heads", heads), ("latents", latents), ("width", width)):
            if v < 1:
                raise ValueError(f"{name} must be positive, got {v}")
        dt = torch_dtype(dtype)
        self.config = {"kind": self.kind, "grid": list(grid), "heads": heads, "latents": latents,
                       "width": width, "levels": levels, "dtype": dtype, "seed": seed}
        self.register_buffer("p", positional_features(grid, levels, dt), persistent=False)
        self.n, d_pos = self.p.shape
        g = torch.Generator().manual_seed(seed)
        self.W_K = nn.Parameter(torch.randn(heads, d_pos, width, generator=g, dtype=dt) / math.sqrt(d_pos))
        self.latent = nn.Parameter(torch.randn(heads, latents, width, generator=g, dtype=dt))
        self.scale = nn.Parameter(torch.full((heads, latents), 1.0 / (heads * self.n), dtype=dt))
        self.width = width

    def queries(self, f: torch.Tensor) -> torch.Tensor:
        """Latent queries: ``(H, M, d)`` (the same for every input) or ``(B, H, M, d)``."""
        return self.latent

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        shape = f.shape
        f = check_input(f, self.n)
        K = torch.einsum("nc,hcd->hnd", self.p, self.W_K)            # (H, n, d)
        Q = self.queries(f)
        # Fixed queries (H, M, d) give one operator for the whole batch; synthesised ones
        # (B, H, M, d) give one per sample.
        b = "" if Q.ndim == 3 else "b"
        S = torch.einsum(f"{b}hmd,hnd->{b}hmn", Q, K) / math.sqrt(self.width)
        z = torch.einsum(f"{b}hmn,bn->bhm", torch.softmax(S, dim=-1), f) * self.scale
        u = torch.einsum(f"{b}hmn,bhm->bn", torch.softmax(S, dim=-2), z)
        return u.reshape(shape)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def extra_repr(self) -> str:
        c = self.config
        return (f"n={self.n}, heads={c['heads']}, latents M={c['latents']}, width={c['width']}, "
                f"params={self.num_parameters()}")


class FLAREPlusPlus(FLARE):
    """FLARE++: routing queries synthesised from the input tokens (see module docstring)."""

    kind = "flare++"

    def __init__(self, grid, heads: int = 4, latents: int = 32, width: int = 16,
                 levels: int = 8, dtype: str = "float64", seed: int = 0):
        super().__init__(grid, heads, latents, width, levels, dtype, seed)
        dt = torch_dtype(dtype)
        g = torch.Generator().manual_seed(seed + 1)
        d_in = self.p.shape[1] + 1
        self.W_K2 = nn.Parameter(torch.randn(heads, d_in, width, generator=g, dtype=dt) / math.sqrt(d_in))
        self.W_V2 = nn.Parameter(torch.randn(heads, d_in, width, generator=g, dtype=dt) / math.sqrt(d_in))

    def queries(self, f: torch.Tensor) -> torch.Tensor:
        rms = torch.sqrt((f * f).mean(dim=1, keepdim=True)).clamp_min(torch.finfo(f.dtype).tiny)
        X = torch.cat([self.p.expand(f.shape[0], -1, -1), (f / rms)[..., None]], dim=2)
        K2 = torch.einsum("bnc,hcd->bhnd", X, self.W_K2)
        V2 = torch.einsum("bnc,hcd->bhnd", X, self.W_V2)
        A = torch.softmax(torch.einsum("hmd,bhnd->bhmn", self.latent, K2) / math.sqrt(self.width), dim=-1)
        return torch.einsum("bhmn,bhnd->bhmd", A, V2)
