r"""A basis per subdomain from Schwarz attention: the network of a learned coarse space.

The tokens are the rows of the overlapping subdomains, each subdomain with its own copy of its
overlap: subdomain :math:`i` contributes the :math:`n_i` rows of :math:`I_i` (a row in two
subdomains is two tokens), so a rank holds its own subdomains' tokens and nothing else,
``x`` of shape ``[T_r, c]`` with :math:`T_r = \sum_{i\in r} n_i`. The network

.. math::

    h^0 = \mathrm{lift}(x),\qquad h^{l+1} = \mathrm{Block}_l(h^l),\qquad
    W_i = \mathrm{head}(h^L)|_{I_i}\in\mathbb R^{n_i\times m},

is the project's Schwarz attention (:class:`~ddlearn.nn.schwarz.SchwarzMixer`, the pre-norm
:class:`~ddlearn.nn.block.Block`) on the layout whose sets are the subdomains' copies (disjoint,
:meth:`~ddlearn.nn.layout.TokenLayout.of_sets`): the local level attends within each subdomain,
the coarse level among the subdomains' mean tokens, of *all* subdomains on all ranks
(:class:`SubdomainMixer`: the pooled keys and values of the rank's subdomains are summed into
``[N, channels]`` arrays by one allreduce per block, differentiable,
:func:`~ddlearn.nn.comm.shared_sum`), so a subdomain's vectors see every other subdomain's
summary, and nothing of size :math:`O(n)` ever leaves a rank.

The coarse space built from :math:`W_i` (:mod:`ddlearn.learned.coarse.schwarz_attention`) puts
the constant first, :math:`V_i = \mathrm{orth}[\mathbf 1, W_i]`, and is Galerkin, so the
preconditioner is SPD for every weight and input; the network only chooses the subspace.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .block import Block, mlp
from .comm import mpi_comm, shared_sum
from .kernels import coarse_restrict
from .layout import TokenLayout
from .schwarz import SchwarzMixer

__all__ = ["KIND", "SubdomainMixer", "SubdomainBasisNet"]

KIND = "subdomain_basis"


class SubdomainMixer(SchwarzMixer):
    r"""Schwarz attention on disjoint subdomain copies whose coarse level spans every rank:
    rank :math:`r`'s pooled queries :math:`\hat\Phi_r^TQ` attend to the pooled keys and values
    of all ``N`` subdomains,

    .. math:: Y_0|_r = \mathrm{softmax}\big(\hat\Phi_r^TQ\,(\textstyle\sum_s E_s\hat\Phi_s^TK)^T
              /\sqrt d\big)\,\textstyle\sum_s E_s\hat\Phi_s^TV,

    :math:`E_s` placing rank :math:`s`'s subdomains at their global numbers (one allreduce of
    ``[B, heads, N, 2 d]``). Set the subdomains with :meth:`set_subdomains`; serially (all
    subdomains on one rank, ``comm=None``) it is :class:`~ddlearn.nn.schwarz.SchwarzMixer`.
    ``attention`` is the local level's (``softmax``, or ``galerkin``: linear in the subdomain
    size); the coarse level is softmax among the ``N`` summaries either way."""

    name = "subdomain schwarz"

    def __init__(self, channels: int, heads: int = 4, attention: str = "softmax"):
        super().__init__(channels, heads, attention=attention, levels="both")
        self.ids, self.N, self.comm = None, 0, None

    def set_subdomains(self, layout: TokenLayout, ids: np.ndarray, N: int, comm=None) -> None:
        """Use ``layout`` (this rank's subdomain copies, one set per subdomain, in the order of
        ``ids``, their global numbers among ``N``) and ``comm`` (``None``: serial)."""
        self.set_layout(layout)
        self.ids = torch.as_tensor(np.asarray(ids, dtype=np.int64))
        self.N, self.comm = int(N), comm

    def coarse(self, q, k, v, L, n0: int) -> torch.Tensor:
        def pooled(z):  # hat Phi^T z: [B, H, n0, d], one mean token per own subdomain
            return coarse_restrict(z, L["phi_rows"], L["phi_cols"], L["phi_mean"], n0, 2)

        q0, kv0 = pooled(q), pooled(torch.cat([k, v], dim=-1))
        if self.comm is not None:
            every = kv0.new_zeros(kv0.shape[:2] + (self.N,) + kv0.shape[3:])
            kv0 = shared_sum(every.index_copy(2, self.ids, kv0), self.comm)
        k0, v0 = kv0.chunk(2, dim=-1)
        y0 = F.scaled_dot_product_attention(q0, k0, v0)
        return self.prolong(y0, q, k0, L, q.shape[2])


class SubdomainBasisNet(nn.Module):
    r"""``m`` vectors per subdomain from its tokens' features (module docstring).

    Parameters
    ----------
    features : int
        Input channels per token (:mod:`ddlearn.learned.coarse.subdomain_tokens`).
    vectors : int
        ``m``, vectors per subdomain besides the constant.
    width, depth, heads : int
        Channels, Schwarz-attention blocks and heads (half local, half coarse).
    coarse : bool
        ``False``: the coarse level off (local attention only; each subdomain alone).
    attention : {'softmax', 'galerkin'}
        Attention inside each subdomain: softmax, :math:`O(n_i^2 d)` per subdomain, or Cao's
        Galerkin form, :math:`O(n_i d^2)` (the forward pass is the set-up's cost).
    seed : int
        Initialisation.

    ``forward(x, sizes)``: ``x`` ``[T_r, features]`` (the subdomains' tokens one after the
    other, float64 by default), after :meth:`set_subdomains`; returns ``[T_r, vectors]``.
    """

    kind = KIND

    def __init__(self, features: int, vectors: int = 3, width: int = 32, depth: int = 3,
                 heads: int = 4, coarse: bool = True, seed: int = 0,
                 attention: str = "softmax"):
        super().__init__()
        self.config = {"kind": KIND, "features": int(features), "vectors": int(vectors),
                       "width": int(width), "depth": int(depth), "heads": int(heads),
                       "coarse": bool(coarse), "seed": int(seed), "attention": attention}
        torch.manual_seed(seed)
        self.lift = mlp(features, width, width)
        mixers = [SubdomainMixer(width, heads, attention) for _ in range(depth)]
        if not coarse:
            for m in mixers:
                m.levels, m.combine = "local", "sum"
        self.blocks = nn.ModuleList(Block(width, m, mlp(width, 2 * width, width))
                                    for m in mixers)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vectors)
        self.double()

    def set_subdomains(self, sizes, ids=None, N: int | None = None, comm=None) -> None:
        r"""The subdomains of the next forward: their sizes :math:`n_i` (tokens in order), global
        numbers ``ids`` among ``N`` (default ``0..len(sizes)-1``) and the communicator of the
        ranks that hold the others (``None``: all are here)."""
        sizes = np.asarray(sizes, dtype=np.int64)
        ends = np.cumsum(sizes)
        sets = [np.arange(e - s, e) for s, e in zip(sizes, ends)]
        layout = TokenLayout.of_sets(sets, np.repeat(np.arange(len(sizes)), sizes))
        ids = np.arange(len(sizes)) if ids is None else np.asarray(ids)
        comm = None if comm is None or mpi_comm(comm).Get_size() == 1 else mpi_comm(comm)
        for b in self.blocks:
            b.mixer.set_subdomains(layout, ids, len(sizes) if N is None else N, comm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2 or x.shape[1] != self.config["features"]:
            raise ValueError(f"subdomain basis network: input must have shape [tokens, "
                             f"{self.config['features']}], got {tuple(x.shape)}")
        h = self.lift(x)[None]
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h))[0]
