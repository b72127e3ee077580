r"""Where the refinement (:mod:`.refinement`) of the learned coarse space starts: the
network's vectors :math:`X_i = f_\theta(A_i^N, D_i)` (:mod:`.network`), or one of the classical
starts fed to the same refinement, for comparison and for loops over fields:

- ``random``: seeded Gaussian vectors, drawn per subdomain from the seed and its global id
  (the same on any number of ranks);
- ``polynomial``: the monomials of the coordinates (:func:`monomials`): the constant is
  Nicolaides' vector, the multilinear ones span the Q1 hats on a box;
- ``previous``: the previous set-up's coarse vectors :math:`V_i` of the same subdomain (a
  subdomain without them starts from the network).
"""
from __future__ import annotations

import numpy as np
import torch

from .network import LocalCoarseNet
from .patches import PatchBatch

__all__ = ["STARTS", "monomials", "start_vectors"]


#: where the refinement starts: the network's vectors; the classical alternatives fed to the
#: same refinement: seeded Gaussian vectors, low-order polynomials of the coordinates (the
#: constant is Nicolaides' vector, the multilinear ones span the Q1 hats on a box), the previous
#: set-up's coarse vectors of the same subdomain (a loop over fields)
STARTS = ("network", "random", "polynomial", "previous")


def _random(name, rows: int, width: int, seed: int) -> np.ndarray:
    """``rows x width`` standard normal entries from ``seed`` and the subdomain id ``name``."""
    return np.random.default_rng([seed, int(name)]).standard_normal((rows, width))


def monomials(x: np.ndarray, m: int) -> np.ndarray:
    r"""The first ``m`` monomials of the coordinates ``x`` (``(rows, dim)``, centred and scaled
    to :math:`[-1, 1]` on the rows given): :math:`1`, the multilinear ones by degree
    (:math:`x, y, z, xy, xz, yz, xyz`), then :math:`x^2, y^2, \dots` and the rest of degree 3
    (:math:`x^2y, xy^2, \dots`)."""
    lo, hi = x.min(axis=0), x.max(axis=0)
    t = (x - (lo + hi) / 2) / np.where(hi > lo, (hi - lo) / 2, 1.0)
    dim = x.shape[1]
    powers = [p for degree in range(4) for p in np.ndindex(*(degree + 1,) * dim)
              if sum(p) == degree]
    # multilinear before the rest of each degree: Q1 before the quadratic ones
    powers.sort(key=lambda p: (max(p) > 1, sum(p)))
    if m > len(powers):
        raise ValueError(f"{m} polynomial start vectors asked for, {len(powers)} monomials of "
                         f"degree <= 3 in {dim}D")
    return np.stack([np.prod(t ** np.asarray(p), axis=1) for p in powers[:m]], axis=1)


def start_vectors(model: LocalCoarseNet, batch: PatchBatch, start: str = "network",
                  seed: int = 0, coordinates=None, previous=None) -> torch.Tensor:
    """The stacked start vectors, without gradients (``start`` one of :data:`STARTS`): the
    network's; ``random`` ones drawn per subdomain from ``seed`` and its global id (the same on
    any number of ranks); the :func:`monomials` of ``coordinates`` (one ``(rows, dim)`` array
    per subdomain); or ``previous`` (one array or ``None`` per subdomain: the network's vectors
    stand in for ``None``, seeded random columns for the missing ones)."""
    width = model.config["vectors"]
    if not len(batch):
        return torch.zeros((0, width), dtype=torch.float64)
    if start == "random":
        return torch.from_numpy(np.concatenate([_random(i, m, width, seed)
                                                for i, m in zip(batch.names, batch.sizes)]))
    if start == "polynomial":
        return torch.from_numpy(np.concatenate([monomials(x, width) for x in coordinates]))
    with torch.no_grad():
        X = model(batch)
    if start != "previous":
        return X
    out = []
    for name, x, V in zip(batch.names, batch.split(X), previous):
        if V is None:
            out.append(x)
        else:
            out.append(torch.from_numpy(np.hstack([V[:, :width], _random(
                name, len(V), width - min(V.shape[1], width), seed)])))
    return torch.cat(out)
