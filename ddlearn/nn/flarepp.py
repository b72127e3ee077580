r"""FLARE++ (Zhang & Kara): FLARE whose routing queries are synthesised from the input.

Learned seeds :math:`\hat Q\in\mathbb R^{M\times d}` per head drive one more call of FLARE's
own encoder (the same keys and values :math:`K = XW_K`, :math:`V = XW_V`):

.. math:: Q(X) = \mathrm{softmax}_{\text{tokens}}(\hat QK^T/\sqrt d)\,V,

and :math:`Q(X)` routes the tokens as FLARE's fixed queries do
(:func:`~ddlearn.nn.flare.route`): still rank :math:`\le M`, :math:`O(TMd)` time, three SDPA
calls per head. Reusing the encoder keeps FLARE's parameter count (plus nothing: the seeds
replace the queries), so that the two are compared at equal size.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .flare import route
from .mixer import TokenMixer, merge_heads, split_heads

__all__ = ["FLAREPlusPlusMixer"]


class FLAREPlusPlusMixer(TokenMixer):
    """FLARE++ with ``latents`` input-conditioned routing queries per head."""

    name = "flare++"

    def __init__(self, channels: int, heads: int = 4, latents: int = 64):
        super().__init__(channels, heads)
        if latents < 1:
            raise ValueError(f"flare++ mixer: latents must be positive, got {latents}")
        self.latents = int(latents)
        self.seeds = nn.Parameter(torch.randn(1, heads, latents, self.head_dim)
                                  / math.sqrt(self.head_dim))
        self.kv = nn.Linear(channels, 2 * channels)
        self.out = nn.Linear(channels, channels)

    def mix(self, x):
        k, v = (split_heads(z, self.heads) for z in self.kv(x).chunk(2, dim=-1))
        queries = F.scaled_dot_product_attention(self.seeds.expand(x.shape[0], -1, -1, -1),
                                                 k, v)
        return self.out(merge_heads(route(queries, k, v)))
