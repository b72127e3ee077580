r"""Transolver's network in its authors' own configuration (Wu et al., ICML 2024), beside the
one-backbone swap of its mixer (:class:`~ddlearn.nn.model.NeuralOperator` with ``"physics"``).

.. math::

    h_0 = \mathrm{MLP}_{pre}([\pi(p_t), a_t]) \;(+\, e),\qquad
    h_{b+1} = g_b + \mathrm{MLP}_b(\mathrm{LN}(g_b)),\quad
    g_b = h_b + \mathrm{PhysicsAttn}_b(\mathrm{LN}(h_b)),\qquad
    u_t = \mathrm{LN}(h_B)\,W_{out} + b_{out},

for tokens at coordinates :math:`p_t` carrying input fields :math:`a_t`. The authors' settings,
from ``thuml/Transolver``, folder ``PDE-Solving-StandardBenchmark``:
``model/Transolver_Structured_Mesh_2D.py`` and ``model/Transolver_Structured_Mesh_3D.py``
(``form="grid"``), ``model/Transolver_Irregular_Mesh.py`` (``form="points"``) and
``scripts/Transolver_Darcy.sh`` (the defaults here):

- **positions** :math:`\pi`: the coordinates, or with ``unified_pos`` (their Darcy script: on,
  ``ref`` 8) the Euclidean distances to the ``ref^dim`` points of a reference grid on
  :math:`[0, 1]^{dim}` (first coordinate slowest); their structured models take the grid's
  normalised indices ``linspace(0, 1, n)`` per axis, which are the coordinates of
  :func:`~ddlearn.nn.data.grid_coords`; their irregular model has a 2D reference grid only, so
  the points form's ``unified_pos`` is 2D here too;
- **preprocess** :math:`\mathrm{MLP}_{pre}`: linear ``(positions + in_fields) -> 2 width``,
  GELU, linear ``-> width``;
- **placeholder** :math:`e`: a learned vector of ``width``, initial values
  :math:`U(0, 1/\mathrm{width})`, added to every token: always in the irregular model, and in
  the structured models only for a model without input fields (``in_fields=0``; with input fields
  they never read it, so this network has none then);
- **block**: pre-norm, ``LayerNorm`` (eps 1e-5, affine) before the physics attention
  (:mod:`ddlearn.nn.physics`, ``form`` as the network's) and before the MLP, both residual; the
  MLP linear ``width -> mlp_ratio width``, GELU, linear ``-> width`` (``mlp_ratio`` 1 in their
  Darcy script and most others, 2 on the pipe); no dropout (0 in every script);
- **head**: inside their last block, ``LayerNorm`` and one linear ``width -> out_fields``;
- **initialisation**: after construction, every linear layer's weight truncated normal with std
  0.02 (truncated at :math:`\pm 2`, timm's ``trunc_normal_``), biases zero, LayerNorms weight 1
  and bias 0, convolutions at PyTorch's default, temperatures 0.5; this overwrites the
  orthogonal initialisation of the slice projection, as their models' ``initialize_weights``
  does; the placeholder is drawn after it;
- **size**: their Darcy script width 128, depth 8, 8 heads, 64 slices (``slice_num``); a study
  scales down width and depth only.

Their training recipe (not part of the network; for the record): AdamW, learning rate 1e-3,
weight decay 1e-5, one-cycle schedule, gradient norm clipped at 0.1, batch 4, 500 epochs, loss
the relative L2 error plus 0.1 times that of the finite-difference gradients (``exp_darcy.py``).
"""
from __future__ import annotations

import torch
from torch import nn

from .block import Block, mlp
from .physics import FORMS, PhysicsAttentionMixer

__all__ = ["TransolverNetwork"]


class TransolverNetwork(nn.Module):
    """Coordinates and input fields on tokens to output fields, as Transolver's authors build it
    (module docstring).

    Parameters
    ----------
    dim : int
        Coordinate dimension (2 or 3 for ``form="grid"``).
    in_fields, out_fields : int
        Channels of the input fields (0: positions only, their ``fx=None``) and the output.
    width, depth, heads, slices : int
        Their ``n_hidden``, ``n_layers``, ``n_head``, ``slice_num``.
    form : {"grid", "points"}
        Their structured-mesh models (convolutional projections; the tokens must be a tensor
        grid) or their irregular-mesh model.
    mlp_ratio : int
        Hidden width of the block MLPs over ``width``.
    unified_pos : bool
        Distances to a ``ref^dim`` reference grid as the positional input, else the coordinates.
    ref : int
        Reference points per axis.

    Notes
    -----
    ``config`` holds ``network`` (the name in :data:`ddlearn.nn.registry.NETWORKS`) and all
    constructor arguments: a checkpoint rebuilds the network from it
    (:func:`ddlearn.nn.registry.build_network`).
    """

    name = "transolver"

    def __init__(self, dim: int = 2, in_fields: int = 1, out_fields: int = 1, width: int = 128,
                 depth: int = 8, heads: int = 8, slices: int = 64, form: str = "grid",
                 mlp_ratio: int = 1, unified_pos: bool = True, ref: int = 8):
        super().__init__()
        for name, v, low in (("dim", dim, 1), ("in_fields", in_fields, 0),
                             ("out_fields", out_fields, 1), ("width", width, 1),
                             ("depth", depth, 1), ("mlp_ratio", mlp_ratio, 1), ("ref", ref, 1)):
            if int(v) < low:
                raise ValueError(f"TransolverNetwork: {name} must be at least {low}, got {v}")
        if form not in FORMS:
            raise ValueError(f"TransolverNetwork: unknown form {form!r}, use one of "
                             f"{list(FORMS)}")
        if unified_pos and form == "points" and dim != 2:
            raise ValueError(f"TransolverNetwork: unified_pos in the points form is 2D (their "
                             f"irregular-mesh model's reference grid), got dim {dim}: use "
                             f"unified_pos=False, or dim=2")
        self.config = {"network": self.name, "dim": int(dim), "in_fields": int(in_fields),
                       "out_fields": int(out_fields), "width": int(width), "depth": int(depth),
                       "heads": int(heads), "slices": int(slices), "form": form,
                       "mlp_ratio": int(mlp_ratio), "unified_pos": bool(unified_pos),
                       "ref": int(ref)}
        positions = ref ** dim if unified_pos else dim
        grid_dim = {"dim": dim} if form == "grid" else {}
        self.preprocess = mlp(positions + in_fields, 2 * width, width)
        # their Transolver_block without the head: h + attn(LN h), then + MLP(LN .)
        self.blocks = nn.ModuleList(
            Block(width, PhysicsAttentionMixer(width, heads, slices, form, **grid_dim),
                  mlp(width, mlp_ratio * width, width)) for _ in range(depth))
        self.head = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, out_fields))
        self.apply(self._init_weights)
        # drawn after the initialisation, as theirs
        self.placeholder = nn.Parameter(torch.rand(width) / width) \
            if form == "points" or in_fields == 0 else None

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02, a=-2.0, b=2.0)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def use_mesh(self, coords) -> None:
        """Give every mixer the points ``coords`` ``(T, dim)`` (the grid form derives its grid
        shape from them; another resolution is another call)."""
        for b in self.blocks:
            b.mixer.set_points(coords)

    def positions(self, coords: torch.Tensor) -> torch.Tensor:
        """The positional input of ``coords`` ``[T, dim]``: the coordinates, or with
        ``unified_pos`` their distances to the reference grid ``[T, ref^dim]``."""
        if not self.config["unified_pos"]:
            return coords
        axis = torch.linspace(0, 1, self.config["ref"], dtype=coords.dtype,
                              device=coords.device)
        grids = torch.meshgrid(*[axis] * coords.shape[1], indexing="ij")
        reference = torch.stack([g.reshape(-1) for g in grids], dim=1)
        return torch.cdist(coords, reference)

    def forward(self, fields: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
        """``fields`` ``[B, T, in_fields]``, ``coords`` ``[T, dim]`` -> ``[B, T, out_fields]``.

        Raises
        ------
        ValueError
            For shapes that do not match the configuration or the mesh given to
            :meth:`use_mesh`, and for NaN or inf in the inputs.
        """
        c = self.config
        if fields.dim() != 3 or fields.shape[-1] != c["in_fields"]:
            raise ValueError(f"fields must have shape [batch, tokens, {c['in_fields']}], got "
                             f"{tuple(fields.shape)}")
        if coords.shape != (fields.shape[1], c["dim"]):
            raise ValueError(f"coords must have shape ({fields.shape[1]}, {c['dim']}) (one "
                             f"point per token), got {tuple(coords.shape)}")
        if not (torch.isfinite(fields).all() and torch.isfinite(coords).all()):
            raise ValueError("the inputs contain NaN or inf: clean or drop those samples")
        p = self.positions(coords).expand(fields.shape[0], -1, -1)
        h = self.preprocess(torch.cat([p, fields], dim=-1))
        if self.placeholder is not None:
            h = h + self.placeholder
        for block in self.blocks:
            h = block(h)
        return self.head(h)
