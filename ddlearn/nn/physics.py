r"""Transolver's physics attention (Wu et al., ICML 2024) as its authors build it: tokens
soft-assigned to ``M`` learned slices, attention among the slice tokens, spread back with the
same weights.

Per head :math:`h` (of ``H``, width :math:`d = C/H`), with the projections
:math:`X_h = P_x(X)_h` and :math:`F_h = P_f(X)_h` (``[T, d]``, the heads' column blocks of the
two projections of the input :math:`X\in\mathbb R^{T\times C}`):

.. math:: W_h = \mathrm{softmax}_{\text{slices}}\big((X_hW_s + b_s)/\tau_h\big),\qquad
          Z_h = \mathrm{diag}(W_h^T\mathbf 1 + 10^{-5})^{-1}\,W_h^TF_h,

.. math:: Y_h = W_h\,\mathrm{softmax}\big(Z_hW_q(Z_hW_k)^T/\sqrt d\big)\,Z_hW_v,\qquad
          \mathrm{mixer}(X) = [Y_1, \dots, Y_H]W_o + b_o,

:math:`W_h\in\mathbb R^{T\times M}`, :math:`Z_h\in\mathbb R^{M\times d}`;
:math:`O(TMd + M^2d)` time in the points form.

The authors' settings, from ``thuml/Transolver``,
``PDE-Solving-StandardBenchmark/model/Physics_Attention.py`` (classes
``Physics_Attention_Irregular_Mesh``, ``Physics_Attention_Structured_Mesh_2D`` and ``_3D``), all
kept here:

- **projections** :math:`P_x, P_f`: two separate maps ``C -> H d``; in the irregular-mesh class
  (``form="points"``) linear layers with bias; in the structured-mesh classes
  (``form="grid"``) ``kernel x kernel`` convolutions, kernel 3, stride 1, zero padding 1, with
  bias (``Conv2d`` on 2D grids, ``Conv3d`` (3x3x3) on 3D grids), over the tokens reshaped to
  the grid (their ``x.reshape(B, H, W, C)``: the last grid axis fastest, as here). PyTorch's
  default initialisation for both;
- **slice projection** :math:`W_s, b_s`: one linear ``d -> M`` with bias, shared across heads,
  weight initialised orthogonal (``torch.nn.init.orthogonal_``), bias at PyTorch's default;
- **temperature** :math:`\tau_h`: one learned scalar per head, initial value 0.5; the
  structured-mesh classes divide by ``clamp(tau, 0.1, 5)``, the irregular-mesh class by
  :math:`\tau` unclamped (both kept as they are);
- **slice normalisation**: the slice token is the weighted mean of :math:`F_h`, the slice
  weights summed over the tokens plus ``1e-5``;
- **attention among slices**: :math:`W_q, W_k, W_v` three bias-free linear maps ``d -> d``
  shared across heads, scale :math:`1/\sqrt d`, softmax over the slices, no mask;
- **output**: linear ``H d -> C`` with bias (their ``to_out``); no normalisation inside the
  mixer (the block's LayerNorm precedes it);
- **heads and slices**: their defaults 8 heads and 64 slices (``slice_num=64``; the 3D class
  defaults to 32, but every model passes ``slice_num`` explicitly); ``dim_head = C / H``, as
  their models construct it;
- **dropout**: theirs is 0 in every script (attention and output dropout); none here.

The structured form needs the grid's shape: :meth:`PhysicsAttentionMixer.set_points` derives it
from the token coordinates (a tensor grid, x fastest, as
:func:`ddlearn.nn.data.grid_coords` makes them), so one set of weights runs on any resolution,
as the convolutions hold no parameter that depends on it. Their structured meshes may be
curvilinear (airfoil, pipe: ``H, W`` given by the data); a point set that is not a tensor grid is
refused here, and the points form is what runs on it.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .mixer import TokenMixer, merge_heads, split_heads

__all__ = ["PhysicsAttentionMixer", "FORMS", "tensor_grid_shape"]

#: the mixer's forms: the authors' irregular-mesh class and their structured-mesh classes
FORMS = ("points", "grid")
#: the grid dimensions the authors' structured-mesh classes cover (Conv2d, Conv3d)
GRID_DIMS = (2, 3)
KERNEL = 3  # every structured-mesh model of the authors uses 3 (their ``kernel`` default)
EPS = 1e-5  # their slice-normalisation guard


def tensor_grid_shape(coords) -> tuple[int, ...]:
    """The shape ``(..., n_y, n_x)`` (slowest axis first) of the tensor grid whose points are
    ``coords`` ``(T, dim)`` in order x fastest, each axis's values increasing.

    Raises
    ------
    ValueError
        For points that are not the tokens of a tensor grid in that order.
    """
    c = np.asarray(coords.detach().cpu() if isinstance(coords, torch.Tensor) else coords)
    if c.ndim != 2 or len(c) == 0:
        raise ValueError(f"coordinates must have shape (tokens, dim), got {c.shape}")
    values = [np.unique(c[:, a]) for a in range(c.shape[1])]
    counts = [len(v) for v in values]
    # token index of each point on the grid of the unique values, x fastest
    index, stride = np.zeros(len(c), dtype=np.int64), 1
    for a, v in enumerate(values):
        index += stride * np.searchsorted(v, c[:, a])
        stride *= counts[a]
    if stride != len(c) or not np.array_equal(index, np.arange(len(c))):
        raise ValueError(f"the {len(c)} points are not the tokens of a tensor grid in order x "
                         f"fastest ({' x '.join(map(str, counts))} distinct coordinates per axis, x first)")
    return tuple(counts[::-1])


class PhysicsAttentionMixer(TokenMixer):
    """Transolver's physics attention with ``slices`` slices per head (module docstring).

    Parameters
    ----------
    channels, heads : int
        Width ``C`` and heads ``H`` (``d = C / H``; their default 8 heads).
    slices : int
        Slices ``M`` (their default 64).
    form : {"points", "grid"}
        ``"points"``: linear projections, the authors' irregular-mesh class (any point set,
        equivariant to a permutation of the tokens). ``"grid"``: 3x3 (3x3x3) convolutional
        projections and the clamped temperature, their structured-mesh classes; reads the token
        coordinates (:meth:`set_points`), which must be a tensor grid.
    dim : int, optional
        The coordinate dimension (what :func:`~ddlearn.nn.registry.make_mixer` and the backbone
        fill in): the grid form's convolutions, 2 or 3 (2 when not given); the points form
        does not use it.

    Notes
    -----
    One class for both forms, chosen by ``form``, rather than two registered mixers: the two
    differ only in the two input projections and the temperature clamp and share every other
    layer, so that a checkpoint names the form in its mixer options; the registered default, the
    points form, meets the contract every registered mixer is tested against (any point set,
    equivariance to a permutation of the tokens), which a convolution on the grid cannot.
    """

    name = "physics"

    def __init__(self, channels: int, heads: int = 8, slices: int = 64, form: str = "points",
                 dim: int | None = None):
        super().__init__(channels, heads)
        if slices < 1:
            raise ValueError(f"physics mixer: slices must be positive, got {slices}")
        if form not in FORMS:
            raise ValueError(f"physics mixer: unknown form {form!r}, use one of {list(FORMS)}")
        dim = GRID_DIMS[0] if dim is None else dim
        if form == "grid" and dim not in GRID_DIMS:
            raise ValueError(f"physics mixer: the grid form has dim {list(GRID_DIMS)} (the "
                             f"authors' 2D and 3D structured-mesh classes), got {dim}: use "
                             f"form='points' on other point sets")
        d = self.head_dim
        self.slices, self.form = int(slices), form
        self.needs_points = form == "grid"
        self.grid_dim = int(dim) if form == "grid" else None
        self.grid: tuple[int, ...] | None = None
        if form == "grid":
            conv = nn.Conv2d if dim == 2 else nn.Conv3d
            self.project_x = conv(channels, channels, KERNEL, 1, KERNEL // 2)
            self.project_f = conv(channels, channels, KERNEL, 1, KERNEL // 2)
        else:
            self.project_x = nn.Linear(channels, channels)
            self.project_f = nn.Linear(channels, channels)
        self.to_slices = nn.Linear(d, slices)
        nn.init.orthogonal_(self.to_slices.weight)
        self.temperature = nn.Parameter(torch.full((1, heads, 1, 1), 0.5))
        self.to_q = nn.Linear(d, d, bias=False)
        self.to_k = nn.Linear(d, d, bias=False)
        self.to_v = nn.Linear(d, d, bias=False)
        self.out = nn.Linear(channels, channels)

    def set_points(self, coords) -> None:
        """Use the token coordinates ``coords`` ``(T, dim)`` from now on: the grid form derives
        the grid's shape from them (:func:`tensor_grid_shape`); the points form needs none.

        Raises
        ------
        ValueError
            In the grid form, for points of another dimension or not a tensor grid, naming the
            points form as the fix.
        """
        if not self.needs_points:
            return
        c = torch.as_tensor(coords)
        if c.dim() != 2 or c.shape[1] != self.grid_dim:
            raise ValueError(f"physics mixer (grid form, dim {self.grid_dim}) needs "
                             f"{self.grid_dim}D coordinates (tokens, {self.grid_dim}), got "
                             f"{tuple(c.shape)}")
        try:
            grid = tensor_grid_shape(c)
        except ValueError as e:
            raise ValueError(f"physics mixer (grid form): {e}; use form='points' on such a "
                             f"point set") from None
        self.grid, self.points = grid, c

    def _project(self, layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """``layer`` on the tokens ``x`` ``[B, T, C]``: directly (points), or on the tokens
        reshaped to the grid, channels first (grid)."""
        if self.form == "points":
            return layer(x)
        B, T, C = x.shape
        y = layer(x.transpose(1, 2).reshape(B, C, *self.grid))
        return y.reshape(B, C, T).transpose(1, 2)

    def mix(self, x):
        xs = split_heads(self._project(self.project_x, x), self.heads)  # [B, H, T, d]
        f = split_heads(self._project(self.project_f, x), self.heads)
        tau = self.temperature.clamp(0.1, 5.0) if self.form == "grid" else self.temperature
        w = torch.softmax(self.to_slices(xs) / tau, dim=-1)  # [B, H, T, M]
        z = (w.transpose(-1, -2) @ f) / (w.sum(dim=2)[..., None] + EPS)  # [B, H, M, d]
        z = F.scaled_dot_product_attention(self.to_q(z), self.to_k(z), self.to_v(z))
        return self.out(merge_heads(w @ z))
