r"""The shared local model :math:`f_\theta` of the learned coarse space: one small graph network,
the same for every subdomain, that maps a subdomain's input features (:mod:`.patches`) to
:math:`m` start vectors,

.. math::

    H^{(0)} = \tanh(\mathrm{lift}(F)),\qquad
    H^{(l+1)} = H^{(l)} + \tanh\big(H^{(l)}W_s^{(l)} + \hat AH^{(l)}W_n^{(l)}
    + \bar H^{(l)}W_g^{(l)}\big),\qquad
    X = H^{(L)}W_o + b_o \in \mathbb R^{n_i\times m},

with :math:`F` the diffused features, :math:`\hat A` the normalised coupling graph and
:math:`\bar H` the subdomain mean (global context). All in float64; the graph product is a
fixed sparse matrix in the autograd graph (:class:`SparseProduct`).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .patches import DIFFUSION_STEPS, RANDOM_CHANNELS, PatchBatch

__all__ = ["KIND", "SparseProduct", "LocalCoarseNet"]

#: the model's kind, in its configuration and as the format of its file
KIND = "learned-local-coarse"


class SparseProduct(torch.autograd.Function):
    r""":math:`GX` with a fixed symmetric sparse matrix :math:`G` (backward: the same product,
    :math:`G^T = G`)."""

    @staticmethod
    def forward(ctx, X, G):
        ctx.G = G
        return torch.from_numpy(np.asarray(G @ X.detach().numpy()))

    @staticmethod
    def backward(ctx, grad):
        return torch.from_numpy(np.asarray(ctx.G @ grad.numpy())), None


class LocalCoarseNet(nn.Module):
    r"""The shared local model :math:`f_\theta`: per-unknown lift of the diffused features,
    ``layers`` residual message-passing layers
    :math:`H \leftarrow H + \tanh(HW_s + \hat AHW_n + \bar H W_g)` (:math:`\bar H`: the
    subdomain mean) and a linear read-out to ``vectors`` start vectors."""

    kind = KIND

    def __init__(self, vectors: int = 8, hidden: int = 24, layers: int = 4, seed: int = 0):
        super().__init__()
        self.config = {"kind": KIND, "vectors": int(vectors), "hidden": int(hidden),
                       "layers": int(layers), "seed": int(seed)}
        torch.manual_seed(seed)
        width = (3 + RANDOM_CHANNELS) * (1 + len(DIFFUSION_STEPS))
        self.lift = nn.Linear(width, hidden, dtype=torch.float64)
        self.self_ = nn.ModuleList(nn.Linear(hidden, hidden, dtype=torch.float64)
                                   for _ in range(layers))
        self.neighbour = nn.ModuleList(nn.Linear(hidden, hidden, bias=False, dtype=torch.float64)
                                       for _ in range(layers))
        self.mean = nn.ModuleList(nn.Linear(hidden, hidden, bias=False, dtype=torch.float64)
                                  for _ in range(layers))
        self.readout = nn.Linear(hidden, vectors, dtype=torch.float64)

    def forward(self, batch: PatchBatch) -> torch.Tensor:
        """The start vectors of every subdomain of ``batch``, stacked
        (:meth:`PatchBatch.split` separates them)."""
        segment = torch.from_numpy(np.repeat(np.arange(len(batch)), batch.sizes))
        counts = torch.tensor(batch.sizes, dtype=torch.float64)[:, None]
        H = torch.tanh(self.lift(torch.from_numpy(batch.features)))
        for s, nb, mean in zip(self.self_, self.neighbour, self.mean):
            pooled = torch.zeros(len(batch), H.shape[1], dtype=H.dtype).index_add_(0, segment, H)
            H = H + torch.tanh(s(H) + nb(SparseProduct.apply(H, batch.graph))
                               + mean(pooled / counts)[segment])
        return self.readout(H)
