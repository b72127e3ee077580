r"""FLARE (Puri et al.): routing all tokens through ``M`` learned latent queries per head.

Per head, with :math:`K = XW_K`, :math:`V = XW_V` and latent queries
:math:`\tilde Q\in\mathbb R^{M\times d}` (parameters),

.. math:: Z = \mathrm{softmax}_{\text{tokens}}(\tilde QK^T/\sqrt d)\,V,\qquad
          Y = \mathrm{softmax}_{\text{latents}}(K\tilde Q^T/\sqrt d)\,Z,

two fused ``scaled_dot_product_attention`` calls (encode, decode): a rank-:math:`\le M` mixing
matrix, :math:`O(TMd)` time (:func:`~ddlearn.nn.kernels.route`, shared with FLARE++ and the
paper-form FLARE).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .kernels import route
from .mixer import TokenMixer, merge_heads, split_heads

__all__ = ["FLAREMixer"]


class FLAREMixer(TokenMixer):
    """FLARE with ``latents`` learned queries per head (see module docstring)."""

    name = "flare"

    def __init__(self, channels: int, heads: int = 4, latents: int = 64):
        super().__init__(channels, heads)
        if latents < 1:
            raise ValueError(f"{self.name} mixer: latents must be positive, got {latents}")
        self.latents = int(latents)
        self.queries = nn.Parameter(torch.randn(1, heads, latents, self.head_dim)
                                    / math.sqrt(self.head_dim))
        self.kv = nn.Linear(channels, 2 * channels)
        self.out = nn.Linear(channels, channels)

    def mix(self, x):
        k, v = (split_heads(z, self.heads) for z in self.kv(x).chunk(2, dim=-1))
        return self.out(merge_heads(route(self.queries, k, v)))
