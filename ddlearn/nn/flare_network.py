r"""FLARE's network as its authors configure it: their input projection, pre-norm blocks with
residual-MLP feed-forwards around the FLARE mixer, and their output projection.

.. math::

    h_0 = \mathrm{P}_{in}([p_t, a_t]),\qquad
    g_b = h_b + \mathrm{FLARE}_b(\mathrm{LN}(h_b)),\quad
    h_{b+1} = g_b + \mathrm{F}_b(\mathrm{LN}(g_b)),\qquad
    u_t = \mathrm{P}_{out}(\mathrm{LN}(h_B)),

for tokens :math:`t` at coordinates :math:`p_t` carrying input fields :math:`a_t` (the
coordinates first, as the authors' Darcy loader concatenates them). With :class:`ResidualMLP`
(``L`` hidden layers, tanh-GELU):

- :math:`\mathrm{P}_{in}`: ``dim + in_fields -> width -> width``, 2 hidden layers, output
  residual only (the input width differs);
- :math:`\mathrm{FLARE}_b`: :class:`~ddlearn.nn.flare.FLAREMixer` (scale 1, residual-MLP keys
  and values, ``heads``, ``latents``);
- :math:`\mathrm{F}_b`: the feed-forward, ``width -> width -> width``, 3 hidden layers (MLP
  ratio 1), input and output residuals;
- :math:`\mathrm{P}_{out}`: a LayerNorm, then ``width -> width -> out_fields``, 2 hidden
  layers, input residual only;
- LayerNorms (not RMSNorm), eps :math:`10^{-5}`, weight 1, bias 0; every linear weight
  :math:`\mathcal N(0, 0.02^2)`, every bias zero; latent queries :math:`\mathcal N(0, 0.1^2)`.

From ``vpuri3/FLARE.py``, ``pdebench/models/flare.py`` (``FLAREModel``, ``FLAREBlock``,
``ResidualMLP``, ``_init_weights``) with the defaults of ``pdebench/__main__.py``
(``num_layers_in_out_proj = 2``, ``num_layers_ffn = 3``, ``ffn_mlp_ratio = 1``,
``out_proj_norm``, ``rmsnorm = False``, ``act = None`` = tanh-GELU). Their runs use width 64,
8 blocks, 8 heads and 64 latents (Darcy: 16 heads, 256 latents, ``ablation/run_comp.sh``), the
defaults here; a study scales only ``width`` and ``depth``.
"""
from __future__ import annotations

import torch
from torch import nn

from .flare import FLAREMixer, ResidualMLP, init_linear
from .mixer import check_inputs
from .block import Block

__all__ = ["FLARENetwork"]

#: the authors' hidden layers of the input / output projections and of the feed-forward
IN_OUT_LAYERS, FFN_LAYERS = 2, 3


class FLARENetwork(nn.Module):
    """FLARE's authors' network (module docstring) on tokens with coordinates.

    Parameters
    ----------
    dim : int
        Coordinate dimension.
    in_fields, out_fields : int
        Channels of the input and output fields.
    width, depth : int
        Channels and FLARE blocks (the authors': 64 and 8).
    heads, latents : int
        Attention heads (dividing ``width``) and latent queries per head (the authors'
        defaults: 8 and 64).

    Notes
    -----
    ``config`` holds ``network`` (this class's name in
    :data:`~ddlearn.nn.registry.NETWORKS`) and all constructor arguments, JSON-plain: a
    checkpoint rebuilds the network with :func:`ddlearn.nn.registry.build_network`.
    """

    name = "flare"

    def __init__(self, dim: int = 2, in_fields: int = 1, out_fields: int = 1, width: int = 64,
                 depth: int = 8, heads: int = 8, latents: int = 64):
        super().__init__()
        for key, v in (("dim", dim), ("in_fields", in_fields), ("out_fields", out_fields),
                       ("width", width), ("depth", depth)):
            if int(v) < 1:
                raise ValueError(f"FLARENetwork: {key} must be positive, got {v}")
        self.config = {"network": self.name, "dim": int(dim), "in_fields": int(in_fields),
                       "out_fields": int(out_fields), "width": int(width), "depth": int(depth),
                       "heads": int(heads), "latents": int(latents)}
        self.embed = ResidualMLP(dim + in_fields, width, width, IN_OUT_LAYERS, False, True)
        # h + FLARE(LN h), then + F(LN .) with the authors' residual-MLP feed-forward
        self.blocks = nn.ModuleList(
            Block(width, FLAREMixer(width, heads, latents),
                  ResidualMLP(width, width, width, FFN_LAYERS, True, True))
            for _ in range(depth))
        self.decode = nn.Sequential(
            nn.LayerNorm(width), ResidualMLP(width, width, out_fields, IN_OUT_LAYERS, True, False))
        # the authors initialise the whole network at the end (the mixers' queries keep theirs)
        init_linear(self)

    def use_mesh(self, coords) -> None:
        """Nothing to set up: FLARE reads the coordinates only as input channels."""
        return None

    def forward(self, fields: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
        """``fields`` ``[B, T, in_fields]``, ``coords`` ``[T, dim]`` -> ``[B, T, out_fields]``.

        Raises
        ------
        ValueError
            For shapes that do not match the configuration, and for NaN or inf in the inputs.
        """
        check_inputs(fields, coords, self.config["in_fields"], self.config["dim"])
        h = self.embed(torch.cat([coords.expand(fields.shape[0], -1, -1), fields], dim=-1))
        for block in self.blocks:
            h = block(h)
        return self.decode(h)
