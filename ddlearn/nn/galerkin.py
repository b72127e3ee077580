r"""Global softmax-free attention as Cao builds it (the Galerkin transformer, "Choose a
Transformer: Fourier or Galerkin", NeurIPS 2021): the paper's global operator :math:`QK^T` made
input-dependent. Per head :math:`h`, for tokens at coordinates :math:`P \in \mathbb R^{T\times
\mathrm{dim}}`,

.. math::

    \hat Q_h = [P,\; X W^Q_h],\quad \hat K_h = [P,\; \mathrm{LN}^K_h(X W^K_h)],\quad
    \hat V_h = [P,\; \mathrm{LN}^V_h(X W^V_h)],\qquad
    Y = \big[\hat Q_1 (\hat K_1^T \hat V_1)/T,\;\dots,\; \hat Q_H (\hat K_H^T \hat V_H)/T\big]\,
    W^O,

:math:`O(T (d + \mathrm{dim})^2)` time per head, rank :math:`\le d + \mathrm{dim}`.

The authors' settings, point by point (their package ``galerkin-transformer`` 0.2.1,
``layers.SimpleAttention`` with ``attention_type='galerkin'``, and the ``ex2_darcy`` entry of
their ``config.yml``):

- **projections**: three separate ``channels x channels`` linear maps for :math:`Q, K, V`
  (``SimpleAttention.linears``);
- **initialisation**: each of those weights xavier-uniform with gain ``gain`` plus
  ``diagonal`` times the identity, biases zero (``_reset_parameters``; Darcy:
  ``xavier_init: 0.01``, ``diagonal_weight: 0.01``, ``symmetric_init: False``), so that each
  head starts close to a small multiple of the identity;
- **normalisation**: one LayerNorm of its own per head on :math:`K` and one on :math:`V`, none
  on :math:`Q` (``norm=True``, ``norm_type='layer'``: ``norm_K``, ``norm_V``, one
  ``nn.LayerNorm(d)`` per head), with ``eps`` (Darcy: ``norm_eps: 1e-7``);
- **coordinates**: the token coordinates concatenated in front of every head's :math:`Q, K, V`
  after the normalisation (``pos_dim`` = the coordinate dimension, Darcy ``pos_dim: 2``); the
  mixer reads them through :meth:`~ddlearn.nn.mixer.TokenMixer.set_points`;
- **output projection**: one linear map from the heads' concatenation, ``channels + heads *
  dim`` wide, to ``channels`` (``SimpleAttention.fc``, PyTorch's default initialisation: it is
  made after their reset);
- **scale**: :math:`1/T` (``linear_attention``: ``scores / seq_len``);
- **dropout**: none (their Darcy ``dropout: 0.0``; their ``linear_attention`` calls
  ``F.dropout(p_attn)`` with PyTorch's defaults, p = 0.5 in training and evaluation alike,
  whatever ``dropout`` says; this mixer leaves that out);
- **heads**: Darcy ``n_head: 4`` of ``n_hidden: 128`` (here the backbone's ``heads`` and
  ``width``).

Constructed from the same random state, the parameters equal theirs (the same draws in the
same order); the tests check the outputs against their ``SimpleAttention``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .mixer import TokenMixer, merge_heads, split_heads

__all__ = ["GalerkinMixer", "HeadLayerNorm"]


class HeadLayerNorm(nn.Module):
    r"""A LayerNorm of its own for each head: ``[B, H, T, d]`` normalised over ``d``, then
    :math:`\gamma_h \odot \cdot + \beta_h` with ``weight`` and ``bias`` of shape ``(H, d)``
    (equal to ``H`` separate ``nn.LayerNorm(d)``, in one call)."""

    def __init__(self, heads: int, head_dim: int, eps: float):
        super().__init__()
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(heads, head_dim))
        self.bias = nn.Parameter(torch.zeros(heads, head_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.layer_norm(x, x.shape[-1:], eps=self.eps)
        return y * self.weight[:, None, :] + self.bias[:, None, :]


class GalerkinMixer(TokenMixer):
    """Multi-head Galerkin (softmax-free, linear) attention over all tokens, as Cao builds it
    (module docstring).

    Parameters
    ----------
    channels, heads : int
        Width and heads (``heads`` divides ``channels``).
    dim : int
        The coordinate dimension (their ``pos_dim``): the points given to :meth:`set_points`.
    gain : float
        Xavier gain of the :math:`Q, K, V` weights (their ``xavier_init``).
    diagonal : float
        Multiple of the identity added to those weights (their ``diagonal_weight``).
    eps : float
        The per-head LayerNorms' epsilon (their ``norm_eps``).
    """

    name = "galerkin"
    needs_points = True

    def __init__(self, channels: int, heads: int = 4, dim: int = 2, gain: float = 1e-2,
                 diagonal: float = 1e-2, eps: float = 1e-7):
        super().__init__(channels, heads)
        for option, value, ok, rule in (("dim", dim, int(dim) == dim and dim >= 1,
                                         "a positive integer (the coordinates' dimension)"),
                                        ("gain", gain, gain > 0, "positive"),
                                        ("diagonal", diagonal, diagonal >= 0, "0 or more"),
                                        ("eps", eps, eps > 0, "positive")):
            if not ok:
                raise ValueError(f"galerkin mixer: {option} must be {rule}, got {value!r}")
        self.dim = int(dim)
        # made before any reset, then reset in order: the random draws of the authors' layer
        self.q, self.k, self.v = (nn.Linear(channels, channels) for _ in range(3))
        for lin in (self.q, self.k, self.v):
            nn.init.xavier_uniform_(lin.weight, gain=gain)
            with torch.no_grad():
                lin.weight += diagonal * torch.eye(channels)
            nn.init.zeros_(lin.bias)
        self.norm_k = HeadLayerNorm(heads, self.head_dim, eps)
        self.norm_v = HeadLayerNorm(heads, self.head_dim, eps)
        self.out = nn.Linear(channels + heads * self.dim, channels)

    def set_points(self, coords) -> None:
        """Use the token coordinates ``coords`` ``(T, dim)`` from now on.

        Raises
        ------
        ValueError
            For points of another dimension than ``dim``.
        """
        coords = torch.as_tensor(coords)
        if coords.dim() != 2 or coords.shape[1] != self.dim:
            raise ValueError(f"galerkin mixer: built for points of shape (tokens, {self.dim}) "
                             f"(its option dim), got {tuple(coords.shape)}: build it with "
                             f"dim={coords.shape[-1]} or give points of dimension {self.dim}")
        super().set_points(coords)

    def mix(self, x):
        B, T, _ = x.shape
        p = self.points.to(x).expand(B, self.heads, T, self.dim)
        q = split_heads(self.q(x), self.heads)
        k = self.norm_k(split_heads(self.k(x), self.heads))
        v = self.norm_v(split_heads(self.v(x), self.heads))
        q, k, v = (torch.cat([p, z], dim=-1) for z in (q, k, v))
        return self.out(merge_heads(q @ (k.transpose(-1, -2) @ v) / T))
