r"""Global softmax attention (the quadratic reference): per head
:math:`Y = \mathrm{softmax}(QK^T/\sqrt d)V` over all tokens, fused
``scaled_dot_product_attention`` (the score matrix never reaches memory on kernels that fuse),
:math:`O(T^2 d)` time."""
from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from .mixer import TokenMixer, merge_heads, split_heads

__all__ = ["SoftmaxMixer"]


class SoftmaxMixer(TokenMixer):
    """Multi-head softmax self-attention over all tokens."""

    name = "softmax"

    def __init__(self, channels: int, heads: int = 4):
        super().__init__(channels, heads)
        self.qkv = nn.Linear(channels, 3 * channels)
        self.out = nn.Linear(channels, channels)

    def mix(self, x):
        q, k, v = (split_heads(z, self.heads) for z in self.qkv(x).chunk(3, dim=-1))
        return self.out(merge_heads(F.scaled_dot_product_attention(q, k, v)))
