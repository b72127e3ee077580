r"""Transolver's physics attention (Wu et al.): tokens soft-assigned to ``M`` learned slices,
attention among the slice tokens, spread back with the same weights.

Per head, with :math:`X_s = XW_s`, :math:`F = XW_f` (``[T, d]``) and a learned temperature
:math:`\tau`:

.. math:: W = \mathrm{softmax}_{\text{slices}}(X_sW_M/\tau),\quad
          Z = \mathrm{diag}(W^T\mathbf 1)^{-1}W^TF,\quad
          Y = W\,\mathrm{softmax}(Z_QZ_K^T/\sqrt d)Z_V,

:math:`Z_{Q,K,V} = ZW_{Q,K,V}` (shared across heads, as Transolver has them); :math:`O(TMd +
M^2d)` time.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .mixer import TokenMixer, merge_heads, split_heads

__all__ = ["PhysicsAttentionMixer"]


class PhysicsAttentionMixer(TokenMixer):
    """Transolver's physics attention with ``slices`` slices per head."""

    name = "physics"

    def __init__(self, channels: int, heads: int = 4, slices: int = 64):
        super().__init__(channels, heads)
        if slices < 1:
            raise ValueError(f"physics mixer: slices must be positive, got {slices}")
        d = self.head_dim
        self.slices = int(slices)
        self.project_x = nn.Linear(channels, channels)
        self.project_f = nn.Linear(channels, channels)
        self.to_slices = nn.Linear(d, slices)
        self.temperature = nn.Parameter(torch.full((1, heads, 1, 1), 0.5))
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(channels, channels)

    def mix(self, x):
        xs, f = split_heads(self.project_x(x), self.heads), split_heads(self.project_f(x),
                                                                        self.heads)
        w = torch.softmax(self.to_slices(xs) / self.temperature, dim=-1)  # [B, H, T, M]
        z = (w.transpose(-1, -2) @ f) / (w.sum(dim=2)[..., None] + 1e-5)  # [B, H, M, d]
        q, k, v = self.qkv(z).chunk(3, dim=-1)
        return self.out(merge_heads(w @ F.scaled_dot_product_attention(q, k, v)))
