r"""Overlapping algebraic decompositions: index sets :math:`I_i`, restrictions :math:`R_i`,
multiplicities :math:`m_j` and partition-of-unity weights :math:`D_i`.

1D (paper §4.1): :math:`\{0..n-1\}` is split into ``N`` equal contiguous sets (sizes differ by at
most one), each extended by :math:`n_\delta` indices into its neighbours (clipped at the boundary),
so neighbours share :math:`2n_\delta` points. 2D: the ``nx x ny`` grid is split into
``Nx x Ny`` boxes, each extended by :math:`n_\delta` grid layers in every direction (a box, so
corner points of the overlap belong to four subdomains). 3D: the same with ``Nx x Ny x Nz``
boxes of the ``nx x ny x nz`` grid (corner points of the overlap in eight subdomains).

Subdomain ``i`` of a box grid sits at box ``(i % Nx, i // Nx)`` in 2D and
``(i % Nx, (i // Nx) % Ny, i // (Nx Ny))`` in 3D (x fastest, like the unknowns). Subdomains are
assigned to MPI ranks in contiguous, balanced blocks; the PETSc ordering numbers the unknowns
subdomain by subdomain (each subdomain's non-overlapping set in turn), so each rank owns a
contiguous block of rows that is exactly the union of its subdomains' non-overlapping sets.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["Decomposition", "split", "box_grid", "assign_ranks", "grid_coordinates"]


def split(n: int, N: int) -> np.ndarray:
    """Offsets of ``N`` equal contiguous sets of ``{0..n-1}``: set ``k`` is
    ``range(off[k], off[k+1])``; the first ``n % N`` sets hold one index more."""
    sizes = np.full(N, n // N, dtype=np.int64)
    sizes[: n % N] += 1
    return np.concatenate([[0], np.cumsum(sizes)])


def box_grid(N: int, dim: int = 2) -> tuple[int, ...]:
    """The most cube-like factorisation ``N = N_1 ... N_dim`` with ``N_1 <= ... <= N_dim``
    (2D: ``Nx <= Ny``)."""
    if dim == 1:
        return (N,)
    first = int(round(N ** (1.0 / dim)))
    while first > 1 and (N % first or first ** dim > N):
        first -= 1
    return tuple(sorted((first, *box_grid(N // first, dim - 1))))


def grid_coordinates(points, rows=None, interior: bool = False) -> np.ndarray:
    r"""Coordinates of the points of a tensor grid of the unit interval, square or cube, x
    fastest, shape ``(len(rows), dim)``: point ``j`` (natural index, default all) at grid
    index :math:`(i_x, i_y, \dots)` is :math:`(i_x/(n_x-1), i_y/(n_y-1), \dots)` for a grid of
    ``points = (n_x, n_y[, n_z])`` points boundary included, or, with ``interior=True``,
    :math:`((i_x+1)h_x, (i_y+1)h_y, \dots)`, :math:`h_a = 1/(n_a+1)`, for the ``points``
    interior points of a grid whose boundary points are left out (the unknowns of a
    :class:`Decomposition`'s grid)."""
    points = tuple(int(m) for m in points)
    rows = np.arange(int(np.prod(points))) if rows is None else np.asarray(rows, dtype=np.int64)
    index = np.unravel_index(rows, points[::-1])[::-1]  # (i_x, i_y, ...)
    if interior:
        return np.stack([(i + 1) / (m + 1) for i, m in zip(index, points)], axis=1)
    return np.stack([i / (m - 1) for i, m in zip(index, points)], axis=1)


def assign_ranks(N: int, P: int) -> np.ndarray:
    """Owner rank of each subdomain: contiguous blocks, sizes differing by at most one.

    Raises
    ------
    ValueError
        If there are more ranks than subdomains.
    """
    if P > N:
        raise ValueError(f"{P} MPI ranks but only {N} subdomains: every rank needs at least one "
                         f"subdomain; use more subdomains (>= {P}) or run on fewer ranks "
                         f"(<= {N})")
    off = split(N, P)
    return np.repeat(np.arange(P), np.diff(off))


class Decomposition:
    r"""An overlapping decomposition of a structured grid of interior unknowns.

    Parameters
    ----------
    grid : tuple of int
        ``(n,)``, ``(nx, ny)`` or ``(nx, ny, nz)`` interior points (natural ordering, x
        fastest).
    N : int
        Number of subdomains. In 2D and 3D it is split into a box grid by :func:`box_grid`
        unless ``boxes=(Nx, Ny[, Nz])`` is given.
    overlap : int
        :math:`n_\delta \ge 0`, indices (1D) or grid layers (2D, 3D) added on each side.

    Attributes
    ----------
    owned : list of ndarray
        Non-overlapping sets (natural indices, sorted).
    subdomains : list of ndarray
        Overlapping sets :math:`I_i` (natural indices, sorted), :math:`n_i = |I_i|`.
    multiplicity : ndarray
        :math:`m_j`, the number of subdomains containing unknown ``j``.
    """

    def __init__(self, grid, N: int, overlap: int, boxes=None):
        grid = tuple(int(g) for g in grid)
        if len(grid) not in (1, 2, 3):
            raise ValueError(f"grid must be 1D, 2D or 3D, got {grid}")
        if min(grid) < 1:
            raise ValueError(f"grid {grid} has no interior points along some axis")
        if int(N) != N or N < 1:
            raise ValueError(f"number of subdomains N must be a positive integer, got {N!r}")
        if int(overlap) != overlap or overlap < 0:
            raise ValueError(f"overlap n_delta must be a non-negative integer, got {overlap!r}")
        self.grid, self.N, self.overlap = grid, int(N), int(overlap)
        if len(grid) == 1:
            self.boxes = (self.N,)
        else:
            self.boxes = (tuple(int(b) for b in boxes) if boxes is not None
                          else box_grid(self.N, len(grid)))
            if len(self.boxes) != len(grid) or int(np.prod(self.boxes)) != self.N:
                raise ValueError(f"boxes {self.boxes} do not multiply to N = {self.N} in "
                                 f"{len(grid)} dimensions")
        for m, B, axis in zip(grid, self.boxes, "xyz"):
            if B > m:
                raise ValueError(f"{B} subdomains along {axis} (box grid {self.boxes}) but only "
                                 f"{m} grid points: N must not exceed the number of points "
                                 f"(N > n) along any axis; use fewer subdomains, a number of "
                                 f"subdomains with a more cube-like box grid, or a finer grid")
        # Per direction: offsets of the equal contiguous sets.
        self.offsets = [split(m, B) for m, B in zip(grid, self.boxes)]
        smallest = min(int(np.diff(o).min()) for o in self.offsets)
        if self.overlap > smallest and self.N > 1:
            raise ValueError(f"overlap n_delta = {self.overlap} is wider than the smallest "
                             f"subdomain ({smallest} points per direction); use "
                             f"n_delta <= {smallest} or fewer subdomains")
        self.owned, self.subdomains = [], []
        for i in range(self.N):
            box = np.unravel_index(i, self.boxes[::-1])[::-1]  # (bx, by[, bz]): x fastest
            lo = [o[b] for o, b in zip(self.offsets, box)]
            hi = [o[b + 1] for o, b in zip(self.offsets, box)]
            self.owned.append(self._box_indices(lo, hi))
            self.subdomains.append(self._box_indices(
                [max(a - self.overlap, 0) for a in lo],
                [min(b + self.overlap, m) for b, m in zip(hi, grid)]))
        self.multiplicity = np.zeros(self.n, dtype=np.int64)
        for I in self.subdomains:
            self.multiplicity[I] += 1

    def _box_indices(self, lo, hi):
        r"""Natural indices :math:`\sum_a i_a \prod_{b<a} n_b` of the box
        :math:`\prod_a [lo_a, hi_a)`, sorted (x fastest)."""
        idx = np.zeros((), dtype=np.int64)
        for a in reversed(range(len(self.grid))):
            idx = idx[..., None] * self.grid[a] + np.arange(lo[a], hi[a], dtype=np.int64)
        return idx.ravel()

    @property
    def n(self) -> int:
        return int(np.prod(self.grid))

    @property
    def sizes(self) -> np.ndarray:
        """:math:`n_i`, the overlapping subdomain sizes."""
        return np.array([len(I) for I in self.subdomains])

    def D(self, i: int) -> np.ndarray:
        r"""Diagonal of :math:`D_i = \mathrm{diag}(1/m_j,\ j\in I_i)` (paper eq. 10)."""
        return 1.0 / self.multiplicity[self.subdomains[i]]

    def R(self, i: int) -> sp.csr_matrix:
        r"""Boolean restriction :math:`R_i \in \mathbb{R}^{n_i\times n}`."""
        I = self.subdomains[i]
        return sp.csr_matrix((np.ones(len(I)), (np.arange(len(I)), I)), shape=(len(I), self.n))

    def ranks(self, P: int) -> np.ndarray:
        """Owner rank of each subdomain for ``P`` ranks (see :func:`assign_ranks`)."""
        return assign_ranks(self.N, P)

    @property
    def perm(self) -> np.ndarray:
        """PETSc ordering: ``perm[k]`` is the natural index of PETSc row ``k``."""
        return np.concatenate(self.owned)

    def describe(self) -> dict:
        return {"subdomains": self.N, "boxes": list(self.boxes), "overlap": self.overlap}

    def __repr__(self):
        return (f"Decomposition(grid={self.grid}, N={self.N}, boxes={self.boxes}, "
                f"overlap={self.overlap})")
