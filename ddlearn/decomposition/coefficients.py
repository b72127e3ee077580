r"""Seeded families of high-contrast coefficient fields :math:`\kappa` on the unit square.

Each family maps ``(contrast, seed)`` to an array of :math:`\kappa` at the ``(n+2) x (n+2)``
grid points (boundary included, indexed ``[iy, ix]``), as :class:`~.problems.Diffusion2D` takes
it; values lie in :math:`[1, \mathrm{contrast}]`. The same seed gives the same field at every
resolution (the geometry is drawn first, then sampled), so a model trained on coarse grids can
be tested on fine ones.

- ``channels``: 2–6 straight channels of random position, width (1/60–1/20) and orientation
  (horizontal or vertical), value ``contrast``;
- ``inclusions``: 10–40 disks of random centre and radius (0.02–0.06), value ``contrast``;
- ``lognormal``: :math:`\kappa = \mathrm{contrast}^{(g - \min g)/(\max g - \min g)}` for a
  Gaussian random field :math:`g` with squared-exponential covariance of correlation length
  ``0.1`` (sampled by a seeded random Fourier-feature expansion, resolution independent).
"""
from __future__ import annotations

import numpy as np

__all__ = ["FAMILIES", "coefficient"]

_CONTRAST_RANGE = (1.0, 1e12)


def _grid(n):
    t = np.arange(n + 2) / (n + 1)
    return np.meshgrid(t, t, indexing="xy")


def _channels(n, contrast, rng):
    X, Y = _grid(n)
    inside = np.zeros_like(X, dtype=bool)
    for _ in range(rng.integers(2, 7)):
        c, w = rng.uniform(0.05, 0.95), rng.uniform(1 / 60, 1 / 20)
        inside |= np.abs((X if rng.random() < 0.5 else Y) - c) <= w / 2
    return np.where(inside, contrast, 1.0)


def _inclusions(n, contrast, rng):
    X, Y = _grid(n)
    inside = np.zeros_like(X, dtype=bool)
    for _ in range(rng.integers(10, 41)):
        (cx, cy), r = rng.uniform(0.05, 0.95, 2), rng.uniform(0.02, 0.06)
        inside |= (X - cx) ** 2 + (Y - cy) ** 2 <= r ** 2
    return np.where(inside, contrast, 1.0)


def _lognormal(n, contrast, rng, length=0.1, features=256):
    X, Y = _grid(n)
    # random Fourier features of the squared-exponential kernel exp(-|x-y|^2 / (2 l^2))
    omega = rng.standard_normal((features, 2)) / length
    phase = rng.uniform(0, 2 * np.pi, features)
    weight = rng.standard_normal(features)
    g = np.cos(X[..., None] * omega[:, 0] + Y[..., None] * omega[:, 1] + phase) @ weight
    g = (g - g.min()) / (g.max() - g.min())
    return contrast ** g


FAMILIES = {"channels": _channels, "inclusions": _inclusions, "lognormal": _lognormal}


def coefficient(family: str, n: int, contrast: float, seed: int) -> np.ndarray:
    """:math:`\\kappa` of ``family`` on the ``(n+2)^2`` grid points, seeded.

    Raises
    ------
    ValueError
        For an unknown family or a contrast outside ``[1, 1e12]``.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown coefficient family {family!r}; choose one of "
                         f"{', '.join(FAMILIES)}")
    lo, hi = _CONTRAST_RANGE
    if not lo <= contrast <= hi:
        raise ValueError(f"contrast {contrast!r} is outside [{lo:g}, {hi:g}]: a contrast below 1 "
                         f"swaps inclusions and background, above 1e12 float64 round-off "
                         f"dominates")
    return FAMILIES[family](int(n), float(contrast), np.random.default_rng(seed))
