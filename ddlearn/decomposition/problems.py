"""Model problems: discretised diffusion operators ``A`` (sparse SPD).

Every problem numbers its unknowns in the *natural* order (1D: left to right; 2D: row-major,
``j = iy * nx + ix``) and can produce any subset of its matrix rows, so that a distributed
PETSc matrix is assembled from local rows only (:meth:`Problem.rows`), while serial code uses the
whole scipy CSR matrix (:meth:`Problem.matrix`).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .coefficients import FAMILIES, coefficient

__all__ = ["Problem", "Poisson1D", "Poisson2D", "Diffusion2D", "channels", "make_problem",
           "PROBLEMS"]


class Problem:
    """A sparse SPD system matrix on a structured grid of interior points.

    Attributes
    ----------
    name : str
        Registry name (see :data:`PROBLEMS`).
    grid : tuple of int
        Interior points per direction, ``(n,)`` in 1D and ``(nx, ny)`` in 2D.
    """

    name = "problem"
    grid: tuple

    @property
    def n(self) -> int:
        """Number of unknowns."""
        return int(np.prod(self.grid))

    @property
    def dim(self) -> int:
        return len(self.grid)

    @property
    def h(self) -> float:
        """Mesh width of the unit interval/square, ``h = 1/(n+1)``."""
        return 1.0 / (self.grid[0] + 1)

    def rows(self, idx) -> sp.csr_matrix:
        """Rows ``A[idx, :]`` (natural ordering), shape ``(len(idx), n)``."""
        raise NotImplementedError

    def matrix(self) -> sp.csr_matrix:
        """The whole matrix ``A`` as scipy CSR."""
        return self.rows(np.arange(self.n))

    def coordinates(self) -> np.ndarray:
        """Grid coordinates of the unknowns, shape ``(n, dim)``."""
        axes = [np.arange(1, m + 1) / (m + 1) for m in self.grid]
        mesh = np.meshgrid(*axes, indexing="xy")
        return np.stack([m.ravel() for m in mesh], axis=1)

    def describe(self) -> dict:
        """JSON-ready description of the problem."""
        return {"name": self.name, "grid": list(self.grid), "n": self.n}

    def __repr__(self):
        return f"{type(self).__name__}(grid={self.grid})"


def _check_size(value, what):
    if int(value) != value or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


class Poisson1D(Problem):
    r"""Paper eq. (4): :math:`A = h^{-2}\,\mathrm{tridiag}(-1, 2, -1)`, :math:`h = 1/(n+1)`.

    Discretises :math:`-u'' = f` on (0, 1) with :math:`u(0) = u(1) = 0`.
    """

    name = "poisson1d"

    def __init__(self, n: int):
        self.grid = (_check_size(n, "n"),)

    def rows(self, idx):
        idx = np.asarray(idx, dtype=np.int64)
        n, inv_h2 = self.n, 1.0 / self.h**2
        r, c, v = [np.arange(len(idx))], [idx], [np.full(len(idx), 2.0 * inv_h2)]
        for shift in (-1, 1):
            nb = idx + shift
            ok = (nb >= 0) & (nb < n)
            r.append(np.flatnonzero(ok)), c.append(nb[ok]), v.append(np.full(ok.sum(), -inv_h2))
        return sp.csr_matrix((np.concatenate(v), (np.concatenate(r), np.concatenate(c))),
                             shape=(len(idx), n))


class Diffusion2D(Problem):
    r"""Five-point finite differences for :math:`-\nabla\cdot(\kappa\nabla u) = f` on the unit
    square with homogeneous Dirichlet conditions, ``n x n`` interior points.

    The coefficient on the edge between grid points :math:`p` and :math:`q` is the harmonic mean
    :math:`2\kappa_p\kappa_q/(\kappa_p+\kappa_q)`, so a high-contrast jump is not smeared over an
    edge; :math:`(Au)_p = h^{-2}\sum_{q\sim p}\kappa_{pq}(u_p - u_q)`.

    Parameters
    ----------
    n : int
        Interior points per direction.
    kappa : callable or ndarray
        ``kappa(x, y)`` (vectorised) or an array of shape ``(n+2, n+2)`` of values at all grid
        points including the boundary, indexed ``[iy, ix]``.
    label : str, optional
        Registry name shown by :meth:`describe`.
    info : dict, optional
        Extra entries of :meth:`describe` (e.g. a family's contrast and seed).
    """

    name = "diffusion2d"

    def __init__(self, n: int, kappa, label: str | None = None, info: dict | None = None):
        n = _check_size(n, "n")
        self.grid = (n, n)
        t = np.arange(n + 2) / (n + 1)
        if callable(kappa):
            X, Y = np.meshgrid(t, t, indexing="xy")
            kappa = np.broadcast_to(np.asarray(kappa(X, Y), dtype=float), X.shape)
        kappa = np.asarray(kappa, dtype=float)
        if kappa.shape != (n + 2, n + 2):
            raise ValueError(f"kappa has shape {kappa.shape}; it needs one value per grid point "
                             f"including the boundary, shape {(n + 2, n + 2)}")
        if not np.all(np.isfinite(kappa)) or np.any(kappa <= 0):
            raise ValueError("kappa must be finite and positive everywhere")
        self.kappa = kappa
        self.info = dict(info or {})
        if label is not None:
            self.name = label

    def _edge(self, a, b):
        return 2.0 * a * b / (a + b)

    def rows(self, idx):
        idx = np.asarray(idx, dtype=np.int64)
        n = self.grid[0]
        inv_h2 = 1.0 / self.h**2
        ix, iy = idx % n, idx // n
        # Padded indices address kappa including its boundary ring.
        k_here = self.kappa[iy + 1, ix + 1]
        r, c, v = [], [], []
        diag = np.zeros(len(idx))
        for dx, dy in ((-1, 0), (1, 0), (0, -1), (0, 1)):
            jx, jy = ix + dx, iy + dy
            k_edge = self._edge(k_here, self.kappa[jy + 1, jx + 1]) * inv_h2
            diag += k_edge
            ok = (jx >= 0) & (jx < n) & (jy >= 0) & (jy < n)
            r.append(np.flatnonzero(ok)), c.append((jy * n + jx)[ok]), v.append(-k_edge[ok])
        r.append(np.arange(len(idx))), c.append(idx), v.append(diag)
        return sp.csr_matrix((np.concatenate(v), (np.concatenate(r), np.concatenate(c))),
                             shape=(len(idx), self.n))

    def describe(self):
        d = super().describe()
        d["kappa_min"], d["kappa_max"] = float(self.kappa.min()), float(self.kappa.max())
        return {**d, **self.info}


class Poisson2D(Diffusion2D):
    r"""The 5-point Laplacian :math:`h^{-2}(4u_p - \sum_{q\sim p} u_q)` on the unit square."""

    name = "poisson2d"

    def __init__(self, n: int):
        n = _check_size(n, "n")
        super().__init__(n, np.ones((n + 2, n + 2)))

    def describe(self):
        return Problem.describe(self)


def channels(contrast: float = 1e6, count: int = 5, width: float | None = None):
    r"""High-contrast coefficient: ``count`` vertical channels of value ``contrast`` in a
    background of 1.

    Channel ``k`` is the strip :math:`|x - (2k+1)/(2\,\mathrm{count})| \le w/2` over the full
    height, ``w = 1/(4 count)`` by default, so every channel crosses every horizontal subdomain
    interface: the situation where hat-function coarse spaces lose their robustness.
    """
    if not contrast > 0:
        raise ValueError(f"contrast must be positive, got {contrast!r}")
    count = _check_size(count, "count")
    w = 1.0 / (4 * count) if width is None else float(width)
    centres = (2 * np.arange(count) + 1) / (2 * count)

    def kappa(x, y):
        inside = np.any(np.abs(x[..., None] - centres) <= w / 2 + 1e-12, axis=-1)
        return np.where(inside, float(contrast), 1.0)

    return kappa


def _channels_problem(n, contrast=1e6, count=5):
    return Diffusion2D(n, channels(contrast, count), label="channels")


def _family(name):
    def make(n, contrast=1e6, seed=0):
        return Diffusion2D(n, coefficient(name, n, contrast, seed), label=f"random_{name}",
                           info={"contrast": contrast, "seed": seed})
    return make


PROBLEMS = {
    "poisson1d": Poisson1D,
    "poisson2d": Poisson2D,
    "channels": _channels_problem,
    **{f"random_{name}": _family(name) for name in FAMILIES},
}


def make_problem(name: str, n: int, **kwargs) -> Problem:
    """Build a problem by registry name: ``poisson1d``, ``poisson2d``, ``channels`` or a seeded
    coefficient family ``random_channels``, ``random_inclusions``, ``random_lognormal``
    (:mod:`.coefficients`).

    ``n`` is the number of interior points per direction; ``channels`` accepts ``contrast`` and
    ``count``, the families ``contrast`` and ``seed``.
    """
    try:
        factory = PROBLEMS[name]
    except KeyError:
        raise ValueError(f"unknown problem {name!r}; choose one of {sorted(PROBLEMS)}") from None
    return factory(n, **kwargs)
