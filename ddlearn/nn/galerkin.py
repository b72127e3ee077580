r"""Global softmax-free attention: the paper's global operator :math:`QK^T` made
input-dependent, as Cao's Galerkin transformer: per head

.. math:: Y = Q\,(\tilde K^T\tilde V)/T,

with :math:`\tilde K, \tilde V` layer-normalised per head; :math:`O(T d^2)` time, rank
:math:`\le d` per head."""
from __future__ import annotations

from torch import nn

from .mixer import TokenMixer, merge_heads, split_heads

__all__ = ["GalerkinMixer"]


class GalerkinMixer(TokenMixer):
    """Multi-head Galerkin (softmax-free, linear) attention over all tokens."""

    name = "galerkin"

    def __init__(self, channels: int, heads: int = 4):
        super().__init__(channels, heads)
        self.qkv = nn.Linear(channels, 3 * channels)
        self.norm_k = nn.LayerNorm(self.head_dim)
        self.norm_v = nn.LayerNorm(self.head_dim)
        self.out = nn.Linear(channels, channels)

    def mix(self, x):
        q, k, v = (split_heads(z, self.heads) for z in self.qkv(x).chunk(3, dim=-1))
        y = q @ (self.norm_k(k).transpose(-1, -2) @ self.norm_v(v)) / x.shape[1]
        return self.out(merge_heads(y))
