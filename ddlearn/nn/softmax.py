r"""Global softmax attention (the quadratic reference), multi-head attention as Vaswani et al.
define it and PyTorch builds it (``torch.nn.MultiheadAttention``): per head :math:`h`

.. math::

    Y = [\mathrm{softmax}(Q_1K_1^T/\sqrt d)\,V_1,\;\dots,\;
    \mathrm{softmax}(Q_HK_H^T/\sqrt d)\,V_H]\,W^O + b^O,\qquad
    [Q, K, V] = X W^{QKV} + b^{QKV},

over all tokens, fused ``scaled_dot_product_attention`` (the score matrix never reaches memory
on kernels that fuse), :math:`O(T^2 d)` time.

Its settings, point by point, against ``torch.nn.MultiheadAttention(channels, heads,
batch_first=True)`` (the tests copy the weights into one and check equal outputs):

- **projections**: one ``channels x 3 channels`` linear map for :math:`Q, K, V` with bias (its
  ``in_proj_weight``, ``in_proj_bias``: the same row order, query, key, value), heads
  contiguous blocks of ``channels / heads`` channels; an output linear map with bias
  (``out_proj``);
- **scale**: :math:`1/\sqrt d`, :math:`d` = ``channels / heads``;
- **normalisation, dropout, mask**: none;
- **initialisation**: PyTorch's ``nn.Linear`` default for both maps (``MultiheadAttention``
  draws its input projection xavier-uniform with zero biases instead: the initial draws differ,
  the function of the weights does not).
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from .mixer import TokenMixer, merge_heads, split_heads

__all__ = ["SoftmaxMixer"]


class SoftmaxMixer(TokenMixer):
    """Multi-head softmax self-attention over all tokens (module docstring)."""

    name = "softmax"

    def __init__(self, channels: int, heads: int = 4):
        super().__init__(channels, heads)
        self.qkv = nn.Linear(channels, 3 * channels)
        self.out = nn.Linear(channels, channels)

    def mix(self, x):
        q, k, v = (split_heads(z, self.heads) for z in self.qkv(x).chunk(3, dim=-1))
        return self.out(merge_heads(F.scaled_dot_product_attention(q, k, v)))
