r"""Schwarz attention as a token mixer: two-level overlapping Schwarz with input-dependent
blocks.

Per head, with :math:`Q = XW_Q,\ K = XW_K,\ V = XW_V` (``[tokens, d]``), the paper's operator
:math:`\Phi Q_0K_0^T\Phi^T + \sum_i R_i^TD_i^{1/2}Q_iK_i^TD_i^{1/2}R_i` becomes

.. math::

    Y = \underbrace{\sum_i R_i^T D_i^{1/2}\,\mathrm{Att}(R_iQ,\ R_iK,\ D_i^{1/2}R_iV)}_{\text{local}}
        \;+\; \underbrace{\Phi\,\mathrm{Att}(\hat\Phi^TQ,\ \hat\Phi^TK,\ \hat\Phi^TV)}_{\text{coarse}},

with :math:`R_i, D_i, \Phi` from a :class:`~ddlearn.nn.layout.TokenLayout` (overlapping
subdomains, partition of unity, coarse basis) and :math:`\hat\Phi` the coarse basis scaled to
columns summing to one (pooling by weighted means, independent of the mesh size). ``Att`` is

- ``softmax``: :math:`\mathrm{softmax}(QK^T/\sqrt d)V` (fused ``scaled_dot_product_attention``,
  the padding of the batched subdomains masked out);
- ``galerkin``: softmax-free, :math:`Q(\tilde K^T\tilde V)/n` with layer-normalised
  :math:`\tilde K, \tilde V` (Cao's Galerkin attention): the paper's :math:`Q_iK_i^T` made
  input-dependent, linear in the subdomain size.

Cost per head :math:`O(\sum_i n_i^2 d + n_0^2 d)` (softmax) or :math:`O(\sum_i n_i d^2)`
(galerkin): linear in the tokens at fixed subdomain size. All subdomains are gathered in one
indexing call, attended in one batched call and summed back in one ``index_add``.
``levels='local'`` or ``'coarse'`` keeps one of the two terms. The outputs of all heads are
merged by :math:`W_O`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .mixer import TokenMixer, merge_heads, split_heads

__all__ = ["SchwarzMixer", "ATTENTIONS", "LEVELS"]

ATTENTIONS = ("softmax", "galerkin")
LEVELS = ("both", "local", "coarse")


class SchwarzMixer(TokenMixer):
    """Two-level Schwarz attention (see module docstring).

    Parameters
    ----------
    channels, heads : int
    attention : {'softmax', 'galerkin'}
    levels : {'both', 'local', 'coarse'}
    layout : TokenLayout, optional
        Can be set later with :meth:`set_layout`.
    """

    name = "schwarz"
    needs_layout = True

    def __init__(self, channels: int, heads: int = 4, attention: str = "softmax",
                 levels: str = "both", layout=None):
        super().__init__(channels, heads)
        if attention not in ATTENTIONS:
            raise ValueError(f"schwarz mixer: unknown attention {attention!r}, use one of "
                             f"{ATTENTIONS}")
        if levels not in LEVELS:
            raise ValueError(f"schwarz mixer: unknown levels {levels!r}, use one of {LEVELS}")
        self.attention, self.levels = attention, levels
        self.qkv = nn.Linear(channels, 3 * channels)
        self.out = nn.Linear(channels, channels)
        if attention == "galerkin":
            self.norm_k = nn.LayerNorm(self.head_dim)
            self.norm_v = nn.LayerNorm(self.head_dim)
        self.set_layout(layout)

    def _att(self, q, k, v, mask=None, n=None):
        """Attention over the second-to-last axis; ``mask`` marks real keys, ``n`` the real
        token counts (Galerkin normalisation)."""
        if self.attention == "softmax":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        k, v = self.norm_k(k), self.norm_v(v)
        if mask is not None:
            v = v * mask[..., :, None]
        return q @ (k.transpose(-1, -2) @ v) / n[..., None, None]

    def local(self, q, k, v, L) -> torch.Tensor:
        r""":math:`\sum_i R_i^TD_i^{1/2}\mathrm{Att}(R_iQ, R_iK, D_i^{1/2}R_iV)`, inputs and
        output ``[B, H, T, d]``."""
        B, H, T, d = q.shape
        N, n_max = L["sqrt_D"].shape
        pad = q.new_zeros(B, H, 1, d)

        def restrict(z):  # R_i z for all i at once, padded: [B, H, N, n_max, d]
            return torch.cat([z, pad], dim=2)[:, :, L["index"]].view(B, H, N, n_max, d)

        w = L["sqrt_D"][..., None]
        mask = L["mask"][:, None, :] if self.attention == "softmax" else L["mask"]
        y = self._att(restrict(q), restrict(k), restrict(v) * w, mask, L["n"]) * w
        out = q.new_zeros(B, H, T + 1, d)
        return out.index_add_(2, L["index"], y.reshape(B, H, N * n_max, d))[:, :, :T]

    def coarse(self, q, k, v, L, n0: int) -> torch.Tensor:
        r""":math:`\Phi\,\mathrm{Att}(\hat\Phi^TQ, \hat\Phi^TK, \hat\Phi^TV)`."""
        B, H, T, d = q.shape
        rows, cols = L["phi_rows"], L["phi_cols"]
        pool = L["phi_mean"][:, None]

        def restrict(z):  # hat Phi^T z: [B, H, n0, d]
            return z.new_zeros(B, H, n0, d).index_add_(2, cols, z[:, :, rows] * pool)

        y0 = self._att(restrict(q), restrict(k), restrict(v), None,
                       q.new_full((1,), float(n0)))
        return q.new_zeros(B, H, T, d).index_add_(2, rows, y0[:, :, cols] * L["phi_vals"][:, None])

    def mix(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (split_heads(z, self.heads) for z in self.qkv(x).chunk(3, dim=-1))
        L = self.layout.tensors(x.device, x.dtype)
        y = 0
        if self.levels in ("both", "local"):
            y = y + self.local(q, k, v, L)
        if self.levels in ("both", "coarse"):
            y = y + self.coarse(q, k, v, L, self.layout.n0)
        return self.out(merge_heads(y))

    def extra_repr(self) -> str:
        return f"channels={self.channels}, heads={self.heads}, attention={self.attention}, " \
               f"levels={self.levels}"
