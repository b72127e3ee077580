r"""The Fourier neural operator of the ``neuraloperator`` package (``neuralop.models.FNO``),
behind the token interface of :class:`ddlearn.nn.model.NeuralOperator`, so that the study trains
and evaluates it with the same loop: ``model(fields [B, T, 1], coords [T, dim])`` with the
tokens of a tensor grid (x fastest) reshaped to ``[B, 1, *grid]``. A grid model: it runs on
tensor grids only (any resolution, as its spectral weights are resolution-free).
"""
from __future__ import annotations

import warnings

import numpy as np
from neuralop.models import FNO
from torch import nn

from ..nn.train import parameter_count

__all__ = ["GridFNO", "fno_matching"]

# neuralop and tensorly-torch index with lists, which torch deprecates at every forward pass;
# the warning is theirs to fix and would bury the study's own output
warnings.filterwarnings("ignore", message="Using a non-tuple sequence for multidimensional",
                        category=UserWarning, module=r"(neuralop|tltorch)\.")


class GridFNO(nn.Module):
    """``neuralop`` FNO with ``hidden`` channels, ``modes`` Fourier modes per axis and
    ``layers`` Fourier layers (its default grid positional embedding)."""

    def __init__(self, dim: int = 2, hidden: int = 16, modes: int = 8, layers: int = 4):
        super().__init__()
        self.config = {"mixer": "fno", "dim": dim, "hidden": hidden, "modes": modes,
                       "layers": layers}
        self.fno = FNO(n_modes=(modes,) * dim, hidden_channels=hidden, in_channels=1,
                       out_channels=1, n_layers=layers)

    def use_mesh(self, coords):
        """Record the grid shape of ``coords`` (a tensor grid, x fastest)."""
        coords = np.asarray(coords)
        self.grid = tuple(len(np.unique(coords[:, a])) for a in range(coords.shape[1]))[::-1]
        if int(np.prod(self.grid)) != len(coords):
            raise ValueError("GridFNO needs the tokens of a tensor grid")

    def state_dict(self, *args, **kwargs):
        """The parameters and buffers only: ``neuralop``'s models add their constructor's
        arguments under the key ``_metadata`` (functions among them, e.g. the activation, which
        a checkpoint read with ``weights_only=True`` refuses); this model is rebuilt from
        :attr:`config` instead."""
        state = super().state_dict(*args, **kwargs)
        state.pop("_metadata", None)
        return state

    def forward(self, fields, coords):
        B = fields.shape[0]
        return self.fno(fields.reshape(B, 1, *self.grid)).reshape(B, -1, 1)


def fno_matching(target: int, dim: int = 2, layers: int = 4, tolerance: float = 0.1) -> dict:
    """The first FNO settings (``hidden``, ``modes``, ``layers``) whose real parameter count is
    within ``tolerance`` of ``target``, trying ``layers`` first and more modes before fewer;
    raises when none is."""
    best = None
    for depth in range(layers, 0, -1):  # fewer layers only where none of ``layers`` fits
        for modes in range(12, 1, -1):
            for hidden in range(2, 65, 2):
                n = parameter_count(FNO(n_modes=(modes,) * dim, hidden_channels=hidden,
                                    in_channels=1, out_channels=1, n_layers=depth))
                if abs(n - target) <= tolerance * target:
                    return {"hidden": hidden, "modes": modes, "layers": depth, "parameters": n}
                if best is None or abs(n - target) < abs(best[0] - target):
                    best = (n, hidden, modes, depth)
    raise ValueError(f"no FNO within {tolerance:.0%} of {target} parameters (nearest {best})")
