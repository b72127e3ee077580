r"""One backbone for every mixer: the neural operator the study trains.

.. math::

    h_0 = \mathrm{MLP}_{in}([p_t, a_t]),\qquad
    h_{b+1} = g_b + \mathrm{MLP}_b(\mathrm{LN}(g_b)),\quad g_b = h_b + \mathrm{mixer}_b(\mathrm{LN}(h_b)),
    \qquad u_t = \mathrm{MLP}_{out}(\mathrm{LN}(h_B)),

for tokens :math:`t` at coordinates :math:`p_t` carrying input fields :math:`a_t`: ``depth``
pre-norm residual blocks of width ``width``, the mixer chosen by name from
:data:`~ddlearn.nn.registry.MIXERS` (as FLARE++'s suite swaps only the mixer). Everything but
the mixer is the same for every mixer, so that two models of one ``width`` and ``depth`` differ
only in how tokens talk to each other.
"""
from __future__ import annotations

import torch
from torch import nn

from .block import Block, mlp
from .layout import TokenLayout
from .mixer import check_inputs
from .registry import make_mixer

__all__ = ["NeuralOperator"]


class NeuralOperator(nn.Module):
    """Coordinates and input fields on tokens to output fields on the same tokens.

    Parameters
    ----------
    dim : int
        Coordinate dimension.
    in_fields, out_fields : int
        Channels of the input and output fields.
    width, depth, heads : int
        Channels, residual blocks, attention heads.
    mixer : str
        A name of :data:`~ddlearn.nn.registry.MIXERS`.
    mixer_options : dict, optional
        Keyword arguments of the mixer (e.g. ``latents``, ``attention``, ``levels``); a mixer
        that reads the coordinates also gets ``dim``.
    layout : dict, optional
        Keyword arguments of :meth:`~ddlearn.nn.layout.TokenLayout.build` (``subdomains`` or
        ``subdomain_size``, ``overlap``, ``partitioner``, ``coarse``) for mixers that follow
        the mesh; :meth:`use_mesh` builds the layout of given coordinates from them.
    mlp_ratio : int
        Hidden width of the block MLPs over ``width``.

    Notes
    -----
    ``config`` holds all constructor arguments: a checkpoint rebuilds the model from it.
    """

    def __init__(self, dim: int = 2, in_fields: int = 1, out_fields: int = 1, width: int = 64,
                 depth: int = 4, heads: int = 4, mixer: str = "schwarz",
                 mixer_options: dict | None = None, layout: dict | None = None,
                 mlp_ratio: int = 2):
        super().__init__()
        for name, v in (("dim", dim), ("in_fields", in_fields), ("out_fields", out_fields),
                        ("width", width), ("depth", depth), ("mlp_ratio", mlp_ratio)):
            if int(v) < 1:
                raise ValueError(f"NeuralOperator: {name} must be positive, got {v}")
        self.config = {"dim": dim, "in_fields": in_fields, "out_fields": out_fields,
                       "width": width, "depth": depth, "heads": heads, "mixer": mixer,
                       "mixer_options": dict(mixer_options or {}), "layout": dict(layout or {}),
                       "mlp_ratio": mlp_ratio}
        self.embed = mlp(dim + in_fields, width, width)
        self.blocks = nn.ModuleList(
            Block(width, make_mixer(mixer, width, heads,
                                    **{"dim": dim, **self.config["mixer_options"]}),
                  mlp(width, mlp_ratio * width, width))
            for _ in range(depth))
        self.decode = nn.Sequential(nn.LayerNorm(width), mlp(width, width, out_fields))
        self.mesh = None

    @property
    def needs_layout(self) -> bool:
        return any(b.mixer.needs_layout for b in self.blocks)

    def use_mesh(self, coords, layout: dict | None = None) -> TokenLayout | None:
        """Build (cached) and set the token layout of the points ``coords`` ``(T, dim)`` from
        the ``layout`` settings, and give every mixer the points; returns the layout (``None``
        for mixers that need none).

        ``layout`` changes settings for this mesh only (e.g. ``{"overlap": 2}`` or
        ``{"subdomains": None, "subdomain_size": 30}`` on a finer grid than the training one):
        no weight depends on the layout, so a trained model runs on any."""
        layout = TokenLayout.build(coords, **{**self.config["layout"], **(layout or {})}) \
            if self.needs_layout else None
        for b in self.blocks:
            b.mixer.set_layout(layout)
            b.mixer.set_points(coords)
        self.mesh = layout
        return layout

    def forward(self, fields: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
        """``fields`` ``[B, T, in_fields]``, ``coords`` ``[T, dim]`` -> ``[B, T, out_fields]``.

        Raises
        ------
        ValueError
            For shapes that do not match the configuration or the layout, and for NaN or inf
            in the inputs.
        """
        check_inputs(fields, coords, self.config["in_fields"], self.config["dim"])
        h = self.embed(torch.cat([coords.expand(fields.shape[0], -1, -1), fields], dim=-1))
        for block in self.blocks:
            h = block(h)
        return self.decode(h)
