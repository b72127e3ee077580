"""Model problems: discretised diffusion operators ``A`` (sparse SPD).

Every problem numbers its unknowns in the *natural* order (1D: left to right; 2D: row-major,
``j = iy * nx + ix``; 3D: ``j = iz * nx * ny + iy * nx + ix``, x fastest) and can produce any
subset of its matrix rows, so that a distributed PETSc matrix is assembled from local rows only
(:meth:`Problem.rows`), while serial code uses the whole scipy CSR matrix
(:meth:`Problem.matrix`).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .coefficients import FAMILIES, coefficient
from .structured import grid_coordinates

__all__ = ["Problem", "Poisson1D", "Poisson2D", "Poisson3D", "Diffusion", "Diffusion2D",
           "Diffusion3D", "channels", "make_problem", "problem_dim", "family_problem_name",
           "PROBLEMS", "FACES"]

#: the face coefficients :class:`Diffusion` knows: the mean of the two point values
FACES = ("harmonic", "arithmetic")


class Problem:
    """A sparse SPD system matrix on a structured grid of interior points.

    Attributes
    ----------
    name : str
        Registry name (see :data:`PROBLEMS`).
    grid : tuple of int
        Interior points per direction, ``(n,)`` in 1D, ``(nx, ny)`` in 2D, ``(nx, ny, nz)`` in
        3D.
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
        """Mesh width of the unit interval/square/cube, ``h = 1/(n+1)``."""
        return 1.0 / (self.grid[0] + 1)

    def rows(self, idx) -> sp.csr_matrix:
        """Rows ``A[idx, :]`` (natural ordering), shape ``(len(idx), n)``."""
        raise NotImplementedError

    def matrix(self) -> sp.csr_matrix:
        """The whole matrix ``A`` as scipy CSR."""
        return self.rows(np.arange(self.n))

    def coordinates(self, rows=None) -> np.ndarray:
        r"""Grid coordinates of the unknowns ``rows`` (natural indices, default all), shape
        ``(len(rows), dim)``: row ``j`` holds :math:`((i_x+1)h_x, (i_y+1)h_y, \dots)`, x
        fastest. A rank asks for its own rows only, never forming all ``n``."""
        return grid_coordinates(self.grid, rows, interior=True)

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


class Diffusion(Problem):
    r"""Finite differences for :math:`-\nabla\cdot(\kappa\nabla u) = f` on the unit square
    (``dim = 2``, five-point stencil) or cube (``dim = 3``, seven-point stencil) with homogeneous
    Dirichlet conditions, ``n`` interior points per direction, natural ordering with x fastest
    (2D ``j = iy n + ix``, 3D ``j = iz n^2 + iy n + ix``).

    The coefficient on the face (edge in 2D) between neighbouring grid points :math:`p` and
    :math:`q` is, with ``faces="harmonic"`` (the default), the harmonic mean
    :math:`\kappa_{pq} = 2\kappa_p\kappa_q/(\kappa_p+\kappa_q)`, so a high-contrast jump is
    not smeared over a face; with ``faces="arithmetic"`` the arithmetic mean
    :math:`\kappa_{pq} = (\kappa_p+\kappa_q)/2`, as the Darcy data of the Fourier neural
    operator (Li et al. 2021) are made;

    .. math:: (Au)_p = h^{-2}\sum_{q\sim p}\kappa_{pq}(u_p - u_q),\qquad h = 1/(n+1),

    where :math:`q` runs over the :math:`2\,\mathrm{dim}` grid neighbours and a neighbour on the
    boundary contributes to the diagonal only (:math:`u_q = 0`).

    Parameters
    ----------
    n : int
        Interior points per direction.
    kappa : callable or ndarray
        ``kappa(x, y)`` / ``kappa(x, y, z)`` (vectorised) or an array of shape ``(n+2,)*dim`` of
        values at all grid points including the boundary, indexed ``[iy, ix]`` / ``[iz, iy, ix]``.
    dim : {2, 3}
    label : str, optional
        Registry name shown by :meth:`describe`.
    info : dict, optional
        Extra entries of :meth:`describe` (e.g. a family's contrast and seed).
    faces : {"harmonic", "arithmetic"}
        The mean of the two point values that gives a face's coefficient (:data:`FACES`).
    """

    name = "diffusion"

    def __init__(self, n: int, kappa, dim: int = 2, label: str | None = None,
                 info: dict | None = None, faces: str = "harmonic"):
        n = _check_size(n, "n")
        if dim not in (2, 3):
            raise ValueError(f"Diffusion is 2D or 3D, got dim = {dim!r}; use Poisson1D in 1D")
        if faces not in FACES:
            raise ValueError(f"unknown faces={faces!r}: the face coefficient is one of "
                             f"{', '.join(FACES)} (mean of the two point values)")
        self.faces = faces
        self.grid = (n,) * dim
        shape = (n + 2,) * dim
        if callable(kappa):
            # arrays indexed [..., iy, ix]: the x axis last, so x varies fastest
            X = [c.reshape(shape) for c in grid_coordinates(shape).T]
            kappa = np.broadcast_to(np.asarray(kappa(*X), dtype=float), shape)
        kappa = np.asarray(kappa, dtype=float)
        if kappa.shape != shape:
            raise ValueError(f"kappa has shape {kappa.shape}; it needs one value per grid point "
                             f"including the boundary, shape {shape}")
        if not np.all(np.isfinite(kappa)) or np.any(kappa <= 0):
            raise ValueError("kappa must be finite and positive everywhere")
        self.kappa = kappa
        self.info = dict(info or {})
        if label is not None:
            self.name = label

    def _edge(self, a, b):
        """The face coefficient from the two point values: the harmonic mean
        :math:`2ab/(a+b)` or the arithmetic mean :math:`(a+b)/2` (``faces``)."""
        if self.faces == "arithmetic":
            return 0.5 * (a + b)
        return 2.0 * a * b / (a + b)

    def rows(self, idx):
        """Rows ``A[idx, :]`` (natural ordering), vectorised over ``idx``: every rank assembles
        only its own rows of a distributed matrix."""
        idx = np.asarray(idx, dtype=np.int64)
        n, dim, m = self.grid[0], self.dim, len(idx)
        inv_h2 = 1.0 / self.h**2
        sub = np.unravel_index(idx, self.grid[::-1])[::-1]  # (ix, iy[, iz])
        # flat index into the padded kappa (boundary ring included), x fastest
        kflat = self.kappa.reshape(-1)
        pad = np.zeros(m, dtype=np.int64)
        for a in reversed(range(dim)):
            pad = pad * (n + 2) + (sub[a] + 1)
        k_here = kflat[pad]
        # One column per stencil slot, in increasing column order (-z, -y, -x, centre, +x,
        # +y, +z), so that the CSR rows come out sorted without a sort.
        slots = 2 * dim + 1
        cols = np.empty((m, slots), dtype=np.int64)
        vals = np.empty((m, slots))
        keep = np.ones((m, slots), dtype=bool)
        diag = np.zeros(m)
        # The diagonal sums the faces in the order -x, +x, -y, +y(, -z, +z): the 2D matrix
        # stays bit for bit what it has always been.
        for a in range(dim):
            stride, pstride = n ** a, (n + 2) ** a
            for s in (-1, 1):
                k_face = self._edge(k_here, kflat[pad + s * pstride]) * inv_h2
                diag += k_face
                slot = dim + s * (a + 1)
                j = sub[a] + s
                keep[:, slot] = (j >= 0) & (j < n)
                cols[:, slot] = idx + s * stride
                vals[:, slot] = -k_face
        cols[:, dim], vals[:, dim] = idx, diag
        indptr = np.concatenate([[0], np.cumsum(keep.sum(axis=1))])
        return sp.csr_matrix((vals[keep], cols[keep], indptr), shape=(m, self.n))

    def describe(self):
        d = super().describe()
        d["kappa_min"], d["kappa_max"] = float(self.kappa.min()), float(self.kappa.max())
        if self.faces != "harmonic":
            d["faces"] = self.faces
        return {**d, **self.info}


class Diffusion2D(Diffusion):
    r"""Five-point :class:`Diffusion` on the unit square, ``n x n`` interior points;
    ``kappa(x, y)`` or an ``(n+2, n+2)`` array indexed ``[iy, ix]``."""

    name = "diffusion2d"

    def __init__(self, n: int, kappa, label: str | None = None, info: dict | None = None,
                 faces: str = "harmonic"):
        super().__init__(n, kappa, 2, label, info, faces)


class Diffusion3D(Diffusion):
    r"""Seven-point :class:`Diffusion` on the unit cube, ``n^3`` interior points, natural
    ordering ``j = iz n^2 + iy n + ix``; ``kappa(x, y, z)`` or an ``(n+2, n+2, n+2)`` array
    indexed ``[iz, iy, ix]``."""

    name = "diffusion3d"

    def __init__(self, n: int, kappa, label: str | None = None, info: dict | None = None,
                 faces: str = "harmonic"):
        super().__init__(n, kappa, 3, label, info, faces)


class Poisson2D(Diffusion2D):
    r"""The 5-point Laplacian :math:`h^{-2}(4u_p - \sum_{q\sim p} u_q)` on the unit square."""

    name = "poisson2d"

    def __init__(self, n: int):
        n = _check_size(n, "n")
        super().__init__(n, np.ones((n + 2, n + 2)))

    def describe(self):
        return Problem.describe(self)


class Poisson3D(Diffusion3D):
    r"""The 7-point Laplacian :math:`h^{-2}(6u_p - \sum_{q\sim p} u_q)` on the unit cube."""

    name = "poisson3d"

    def __init__(self, n: int):
        n = _check_size(n, "n")
        super().__init__(n, np.ones((n + 2,) * 3))

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


def _family(name, dim=2):
    suffix = "3d" if dim == 3 else ""  # the 2D names predate 3D and keep no suffix

    def make(n, contrast=1e6, seed=0):
        cls = Diffusion2D if dim == 2 else Diffusion3D
        return cls(n, coefficient(name, n, contrast, seed, dim=dim),
                   label=f"random_{name}{suffix}", info={"contrast": contrast, "seed": seed})
    return make


PROBLEMS = {
    "poisson1d": Poisson1D,
    "poisson2d": Poisson2D,
    "poisson3d": Poisson3D,
    "channels": _channels_problem,
    **{f"random_{name}": _family(name) for name in FAMILIES},
    **{f"random_{name}3d": _family(name, 3) for name in FAMILIES},
}

#: dimension of each registry entry (known before a problem is built, e.g. for default sizes)
_DIMS = {"poisson1d": 1, "poisson2d": 2, "poisson3d": 3, "channels": 2,
         **{f"random_{name}": 2 for name in FAMILIES},
         **{f"random_{name}3d": 3 for name in FAMILIES}}


def problem_dim(name: str) -> int:
    """Space dimension (1, 2 or 3) of the registry problem ``name``."""
    if name not in _DIMS:
        raise ValueError(f"unknown problem {name!r}; choose one of {sorted(PROBLEMS)}")
    return _DIMS[name]


def family_problem_name(family: str, dim: int) -> str:
    """The registry name of a coefficient ``family`` (``channels``, ``inclusions``,
    ``lognormal``, or ``poisson`` for the constant coefficient) in ``dim`` = 2 or 3
    dimensions: ``random_channels``, ``random_channels3d``, ``poisson2d``, ..."""
    if family == "poisson":
        return f"poisson{dim}d"
    return f"random_{family}" + ("3d" if dim == 3 else "")


def make_problem(name: str, n: int, **kwargs) -> Problem:
    """Build a problem by registry name: ``poisson1d``, ``poisson2d``, ``poisson3d``,
    ``channels`` or a seeded coefficient family ``random_channels``, ``random_inclusions``,
    ``random_lognormal`` (2D) and ``random_channels3d``, ``random_inclusions3d``,
    ``random_lognormal3d`` (3D, :mod:`.coefficients`).

    ``n`` is the number of interior points per direction (``n^3`` unknowns in 3D);
    ``channels`` accepts ``contrast`` and ``count``, the families ``contrast`` and ``seed``.
    """
    try:
        factory = PROBLEMS[name]
    except KeyError:
        raise ValueError(f"unknown problem {name!r}; choose one of {sorted(PROBLEMS)}") from None
    return factory(n, **kwargs)
