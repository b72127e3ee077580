r"""FLARE++ (Zhang & Kara): FLARE whose routing queries are synthesised from the input.

Learned seeds :math:`\hat Q\in\mathbb R^{M\times d}` per head drive one more call of FLARE's
own encoder (the same keys and values :math:`K = XW_K`, :math:`V = XW_V`):

.. math:: Q(X) = \mathrm{softmax}_{\text{tokens}}(\hat QK^T/\sqrt d)\,V,

and :math:`Q(X)` routes the tokens as FLARE's fixed queries do
(:func:`~ddlearn.nn.kernels.route`): still rank :math:`\le M`, :math:`O(TMd)` time, three SDPA
calls per head. Reusing the encoder keeps FLARE's parameter count (plus nothing: the seeds
replace the queries), so that the two are compared at equal size.
"""
from __future__ import annotations

import torch.nn.functional as F

from .flare import FLAREMixer
from .kernels import route
from .mixer import merge_heads, split_heads

__all__ = ["FLAREPlusPlusMixer"]


class FLAREPlusPlusMixer(FLAREMixer):
    r"""FLARE++ with ``latents`` input-conditioned routing queries per head: FLARE's parameters,
    its ``queries`` used as the seeds :math:`\hat Q` (see module docstring)."""

    name = "flare++"

    def mix(self, x):
        k, v = (split_heads(z, self.heads) for z in self.kv(x).chunk(2, dim=-1))
        queries = F.scaled_dot_product_attention(self.queries.expand(x.shape[0], -1, -1, -1),
                                                 k, v)
        return self.out(merge_heads(route(queries, k, v)))
