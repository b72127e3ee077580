r"""FLARE (Puri et al., arXiv:2508.12594) as its authors build the mixer: ``M`` learned latent
queries per head route all tokens through a rank-:math:`\le M` encode/decode.

Per head :math:`h`, with keys and values from residual MLPs and latent queries
:math:`\tilde Q_h\in\mathbb R^{M\times d}` (parameters),

.. math:: K = \mathrm{MLP}_K(X),\quad V = \mathrm{MLP}_V(X),\qquad
          Z_h = \mathrm{softmax}_{\text{tokens}}(\tilde Q_hK_h^T)\,V_h,\qquad
          Y_h = \mathrm{softmax}_{\text{latents}}(K_h\tilde Q_h^T)\,Z_h,

:math:`\mathrm{mixer}(X) = [Y_1,\dots,Y_H]W_O + b_O`: two fused
``scaled_dot_product_attention`` calls with scale 1 (:func:`~ddlearn.nn.kernels.route`),
:math:`O(TMd)` time. The residual MLP (:class:`ResidualMLP`, ``L`` hidden layers, tanh-GELU
:math:`\sigma`) is

.. math:: h_0 = x + \sigma(W_0x + b_0),\quad h_l = h_{l-1} + \sigma(W_lh_{l-1} + b_l)
          \ (l = 1..L),\quad \mathrm{MLP}(x) = h_L + W_{L+1}h_L + b_{L+1}.

The authors' settings, point by point (repository ``vpuri3/FLARE.py``, file
``pdebench/models/flare.py``: classes ``FLARE``, ``ResidualMLP``, ``FLAREModel``; defaults of
``pdebench/__main__.py``; per-dataset runs in ``ablation/run_comp.sh``; the encode/decode
formula and the per-head latents from the paper's abstract and the repository's README):

- **scale**: the logits are :math:`\tilde QK^T` and :math:`K\tilde Q^T` unscaled
  (``attn_scale=1.0``, the ``'one'`` default; ``'sqrt'`` is their non-default option);
- **projections**: no query projection (the queries are the parameters); keys and values each
  from its own residual MLP with 3 hidden layers (``num_layers_k_proj = num_layers_v_proj =
  3``), hidden width = channels (MLP ratio 1), input and output residuals (``x + f(x)``), so 5
  linear layers each; output projection one ``Linear(C, C)`` with bias;
- **normalisations**: none inside the mixer (their ``qk_norm`` option is off by default and in
  every published run; not offered here); no dropout;
- **activation**: GELU, tanh approximation;
- **initialisation**: latent queries :math:`\mathcal N(0, 0.1^2)`; every linear weight
  :math:`\mathcal N(0, 0.02^2)`, every bias zero (``FLAREModel._init_weights``, applied by
  their model to the whole network, here by the mixer to itself);
- **heads, latents**: ``heads`` must divide ``channels`` (their assertion); defaults 8 heads
  and :math:`M = 64` latents per head (``pdebench/__main__.py``), disjoint latents per head
  (the parameter holds :math:`H\times M` queries of size :math:`d`). Their Darcy run uses 16
  heads and :math:`M = 256` (``ablation/run_comp.sh``; airfoil 8 / 256, pipe 8 / 128,
  elasticity 8 / 64), all at width 64 with 8 blocks.
"""
from __future__ import annotations

import torch
from torch import nn

from .kernels import route
from .mixer import TokenMixer, merge_heads, split_heads

__all__ = ["ResidualMLP", "FLAREMixer", "init_linear"]

#: the authors' key/value MLP: hidden layers, hidden width over the channels
KV_LAYERS, KV_RATIO = 3, 1


def init_linear(module: nn.Module) -> None:
    """The authors' initialisation of every ``nn.Linear`` in ``module``: weight
    :math:`\\mathcal N(0, 0.02^2)`, bias zero (LayerNorms keep their ``1, 0``)."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class ResidualMLP(nn.Module):
    r"""The authors' residual MLP (module docstring): an input layer ``n_in -> hidden``,
    ``layers`` residual hidden layers ``hidden -> hidden``, an output layer ``hidden -> n_out``.

    ``input_residual`` / ``output_residual`` add the layer's input to its output; as in the
    authors' code they apply only where the two widths match.
    """

    def __init__(self, n_in: int, hidden: int, n_out: int, layers: int,
                 input_residual: bool, output_residual: bool):
        super().__init__()
        self.act = nn.GELU(approximate="tanh")
        self.fc_in = nn.Linear(n_in, hidden)
        self.hidden = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
        self.fc_out = nn.Linear(hidden, n_out)
        self.input_residual = input_residual and n_in == hidden
        self.output_residual = output_residual and hidden == n_out

    def forward(self, x):
        h = self.act(self.fc_in(x))
        h = x + h if self.input_residual else h
        for fc in self.hidden:
            h = h + self.act(fc(h))
        y = self.fc_out(h)
        return h + y if self.output_residual else y


class FLAREMixer(TokenMixer):
    """FLARE with ``latents`` learned queries per head, as its authors build it (module
    docstring)."""

    name = "flare"

    def __init__(self, channels: int, heads: int = 8, latents: int = 64):
        if channels < 1 or heads < 1 or channels % heads:
            valid = [h for h in range(1, max(channels, 0) + 1) if channels % h == 0]
            raise ValueError(f"{type(self).__name__}: channels ({channels}) must be a positive "
                             f"multiple of heads ({heads}): use heads in {valid}")
        if latents < 1:
            raise ValueError(f"{self.name} mixer: latents must be positive (an integer >= 1), "
                             f"got {latents}")
        super().__init__(channels, heads)
        self.latents = int(latents)
        self.queries = nn.Parameter(torch.empty(heads, latents, self.head_dim))
        hidden = KV_RATIO * channels
        self.k_proj = ResidualMLP(channels, hidden, channels, KV_LAYERS, True, True)
        self.v_proj = ResidualMLP(channels, hidden, channels, KV_LAYERS, True, True)
        self.out = nn.Linear(channels, channels)
        init_linear(self)
        nn.init.normal_(self.queries, mean=0.0, std=0.1)

    def routing_queries(self, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        r"""The queries the tokens are routed through: FLARE's fixed :math:`\tilde Q`."""
        return self.queries

    def mix(self, x):
        k = split_heads(self.k_proj(x), self.heads)
        v = split_heads(self.v_proj(x), self.heads)
        return self.out(merge_heads(route(self.routing_queries(k, v), k, v, attn_scale=1.0)))
