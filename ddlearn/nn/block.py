r"""The pre-norm residual block every network here is made of,

.. math:: g = h + \mathrm{mixer}(\mathrm{LN}(h)),\qquad h' = g + F(\mathrm{LN}(g)),

with its feed-forward :math:`F` given: :func:`mlp` in the one backbone
(:mod:`~ddlearn.nn.model`) and in Transolver's network, a residual MLP in FLARE's.
"""
from __future__ import annotations

from torch import nn

__all__ = ["Block", "mlp"]


def mlp(n_in: int, hidden: int, n_out: int) -> nn.Sequential:
    """Linear ``n_in -> hidden``, GELU, linear ``-> n_out``."""
    return nn.Sequential(nn.Linear(n_in, hidden), nn.GELU(), nn.Linear(hidden, n_out))


class Block(nn.Module):
    """``h + mixer(LN h)``, then ``+ feed_forward(LN .)``: the pre-norm residual block of this
    backbone (feed-forward :func:`mlp` of ``mlp_ratio * width``) and of the authors' networks
    (Transolver's the same, FLARE's a residual MLP)."""

    def __init__(self, width: int, mixer: nn.Module, feed_forward: nn.Module):
        super().__init__()
        self.norm1, self.mixer = nn.LayerNorm(width), mixer
        self.norm2, self.mlp = nn.LayerNorm(width), feed_forward

    def forward(self, h):
        h = h + self.mixer(self.norm1(h))
        return h + self.mlp(self.norm2(h))
