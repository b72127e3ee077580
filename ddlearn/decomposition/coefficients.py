r"""Seeded families of high-contrast coefficient fields :math:`\kappa` on the unit square or cube.

Each family maps ``(contrast, seed)`` to an array of :math:`\kappa` at the ``(n+2)^dim`` grid
points (boundary included, indexed ``[iy, ix]`` in 2D and ``[iz, iy, ix]`` in 3D), as
:class:`~.problems.Diffusion` takes it; values lie in :math:`[1, \mathrm{contrast}]`. The same seed
gives the same field at every resolution (the geometry is drawn first, then sampled), so a model
trained on coarse grids can be tested on fine ones.

2D (``dim=2``):

- ``channels``: 2–6 straight channels of random position, width (1/60–1/20) and orientation
  (horizontal or vertical), value ``contrast``;
- ``inclusions``: 10–40 disks of random centre and radius (0.02–0.06), value ``contrast``;
- ``lognormal``: :math:`\kappa = \mathrm{contrast}^{(g - \min g)/(\max g - \min g)}` for a
  Gaussian random field :math:`g` with squared-exponential covariance of correlation length
  ``0.1`` (sampled by a seeded random Fourier-feature expansion, resolution independent).

3D (``dim=3``; sizes larger than in 2D because 3D grids are coarser):

- ``channels``: a layered background, 3–8 layers in z (random interfaces) of values
  :math:`\kappa_\ell = b^{\,u_\ell}`, :math:`u_\ell = \mathrm{clip}(\mathcal N(1/2, 1/4), 0, 1)`,
  :math:`b = \min(10, \mathrm{contrast})` (log-normal, truncated to :math:`[1, b]`), crossed by
  2–6 straight channels of value ``contrast`` through the whole cube along a random axis:
  square tubes of side 1/20–1/10 (three in four) or slabs of that thickness (one in four);
- ``inclusions``: 10–40 balls of random centre and radius (0.06–0.12), value ``contrast``;
- ``lognormal``: as in 2D, with 3D random Fourier features.
"""
from __future__ import annotations

import numpy as np

from .structured import grid_coordinates

__all__ = ["FAMILIES", "coefficient", "family_field"]

_CONTRAST_RANGE = (1.0, 1e12)


def _grid(n, dim=2):
    """Coordinates of the ``(n+2)^dim`` grid points, ``(X, Y[, Z])``, each indexed
    ``[..., iy, ix]`` (x on the last, fastest axis)."""
    shape = (n + 2,) * dim
    return [c.reshape(shape) for c in grid_coordinates(shape).T]


# Each family draws its whole geometry from ``rng`` first and returns ``kappa(X, Y[, Z])``,
# vectorised over points of any shape: the same seed gives the same field on every grid or mesh.

def _channels(contrast, rng, dim):
    if dim == 3:
        return _channels3d(contrast, rng)
    channels = []
    for _ in range(rng.integers(2, 7)):
        c, w = rng.uniform(0.05, 0.95), rng.uniform(1 / 60, 1 / 20)
        channels.append((c, w, rng.random() < 0.5))  # True: vertical (a function of x)

    def kappa(*X):
        inside = np.zeros_like(X[0], dtype=bool)
        for c, w, vertical in channels:
            inside |= np.abs((X[0] if vertical else X[1]) - c) <= w / 2
        return np.where(inside, contrast, 1.0)
    return kappa


def _channels3d(contrast, rng):
    layers = rng.integers(3, 9)
    interfaces = np.sort(rng.uniform(0.0, 1.0, layers - 1))
    exponents = np.clip(rng.normal(0.5, 0.25, layers), 0.0, 1.0)
    channels = []
    for _ in range(rng.integers(2, 7)):
        axis = int(rng.integers(3))              # the channel runs along this axis
        centre = rng.uniform(0.05, 0.95, 2)      # position in the two other coordinates
        width = rng.uniform(1 / 20, 1 / 10)
        slab = rng.random() < 0.25               # thin in one transverse direction only
        channels.append((axis, centre, width, slab))
    # background range 10 at most, and never above the contrast (values stay in [1, contrast])
    base = min(10.0, contrast)

    def kappa(*X):
        out = base ** exponents[np.searchsorted(interfaces, X[2])]
        for axis, centre, width, slab in channels:
            u, v = (X[a] for a in range(3) if a != axis)
            inside = np.abs(u - centre[0]) <= width / 2
            if not slab:
                inside &= np.abs(v - centre[1]) <= width / 2
            out = np.where(inside, contrast, out)
        return out
    return kappa


def _inclusions(contrast, rng, dim):
    radii = (0.02, 0.06) if dim == 2 else (0.06, 0.12)
    balls = [(rng.uniform(0.05, 0.95, dim), rng.uniform(*radii))
             for _ in range(rng.integers(10, 41))]

    def kappa(*X):
        inside = np.zeros_like(X[0], dtype=bool)
        for c, r in balls:
            d2 = (X[0] - c[0]) ** 2
            for a in range(1, dim):
                d2 = d2 + (X[a] - c[a]) ** 2
            inside |= d2 <= r ** 2
        return np.where(inside, contrast, 1.0)
    return kappa


def _lognormal(contrast, rng, dim, length=0.1, features=256):
    # random Fourier features of the squared-exponential kernel exp(-|x-y|^2 / (2 l^2)):
    # g(x) = sum_k w_k cos(omega_k . x + phase_k)
    omega = rng.standard_normal((features, dim)) / length
    phase = rng.uniform(0, 2 * np.pi, features)
    weight = rng.standard_normal(features)

    def g_at(X):
        arg = X[0][..., None] * omega[:, 0]
        for a in range(1, dim):
            arg = arg + X[a][..., None] * omega[:, a]
        return np.cos(arg + phase) @ weight

    def kappa(*X):
        if dim == 2:
            g = g_at(X)
        else:
            # a block of points at a time: all points times all features at once would need
            # 256 doubles per point (4.5 GB on a 130^3 grid)
            flat = [np.asarray(x, dtype=float).reshape(-1) for x in X]
            step = 1 << 14
            g = np.concatenate([g_at([x[k:k + step] for x in flat])
                                for k in range(0, flat[0].size, step)]).reshape(np.shape(X[0]))
        # normalised over the points evaluated (the grid, or a mesh's centroids)
        g = (g - g.min()) / (g.max() - g.min())
        return contrast ** g
    return kappa


FAMILIES = {"channels": _channels, "inclusions": _inclusions, "lognormal": _lognormal}


def _checked(family, contrast, dim):
    if family not in FAMILIES:
        raise ValueError(f"unknown coefficient family {family!r}; choose one of "
                         f"{', '.join(FAMILIES)}")
    if dim not in (2, 3):
        raise ValueError(f"coefficient family {family!r} is defined in 2D and 3D, not "
                         f"dim = {dim!r}")
    lo, hi = _CONTRAST_RANGE
    if not lo <= contrast <= hi:
        raise ValueError(f"contrast {contrast!r} is outside [{lo:g}, {hi:g}]: a contrast below 1 "
                         f"swaps inclusions and background, above 1e12 float64 round-off "
                         f"dominates")


def family_field(family: str, contrast: float, seed: int, dim: int = 2):
    """The seeded field of ``family`` as a function ``kappa(x, y[, z])`` of points in the unit
    square or cube (arrays of any one shape), values in ``[1, contrast]``: for meshes, e.g.
    element centroids. ``lognormal`` normalises its Gaussian field over the points given.

    Raises
    ------
    ValueError
        As :func:`coefficient`.
    """
    _checked(family, contrast, dim)
    return FAMILIES[family](float(contrast), np.random.default_rng(seed), int(dim))


def coefficient(family: str, n: int, contrast: float, seed: int, dim: int = 2) -> np.ndarray:
    """:math:`\\kappa` of ``family`` at the ``(n+2)^dim`` grid points (``dim`` 2 or 3), seeded;
    shape ``(n+2,) * dim``, indexed ``[iy, ix]`` or ``[iz, iy, ix]``.

    Raises
    ------
    ValueError
        For an unknown family, a dimension other than 2 or 3 or a contrast outside
        ``[1, 1e12]``.
    """
    kappa = family_field(family, contrast, seed, dim)
    return np.asarray(kappa(*_grid(int(n), int(dim))), dtype=float)
