r"""Coarse-space geometry: the vectors of :math:`\Phi \in \mathbb{R}^{n\times n_0}` on a
structured :class:`Decomposition` and on the box grid of any point cloud. The coarse-space
families that use them (by name, with their options) are :mod:`ddlearn.classical.coarse`.

- hats: in 1D the paper's interface hat functions, one per interface between neighbouring
  subdomains (:math:`n_0 = N-1`); the overlap has no centre node, so hat ``k`` peaks at the larger
  of the two indices nearest the centre of the overlap between subdomains ``k`` and ``k+1`` (the
  first non-overlapping index of subdomain ``k+1``) and falls linearly to zero at the
  neighbouring peaks (or the Dirichlet boundary). In 2D the Q1 hat functions on the subdomain
  grid: tensor products :math:`\phi_{kl}(x, y) = h_k(x)\,h_l(y)` of the 1D interface hats, one per
  interior vertex of the box grid (:math:`n_0 = (N_x-1)(N_y-1)`); in 3D likewise
  :math:`\phi_{klm}(x, y, z) = h_k(x)\,h_l(y)\,h_m(z)`, :math:`n_0 = (N_x-1)(N_y-1)(N_z-1)`.
- Nicolaides vectors: :math:`D_i`-weighted piecewise constants, :math:`\Phi e_i = R_i^T D_i \mathbf 1`
  (:math:`n_0 = N`); a partition of unity everywhere.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .structured import Decomposition

__all__ = ["interface_hats", "q1_hats", "grid_hats", "hats_on_boxes", "pou_columns",
           "BasisInput", "nicolaides_basis", "hats_basis", "COARSE_BASES", "coarse_basis",
           "grid_basis"]


def _hats_1d(m: int, offsets: np.ndarray) -> sp.csr_matrix:
    """1D interface hats on ``m`` points for the contiguous sets given by ``offsets``."""
    peaks = offsets[1:-1]
    # Neighbouring peaks, with the Dirichlet boundary points -1 and m at the ends.
    left = np.concatenate([[-1], peaks[:-1]])
    right = np.concatenate([peaks[1:], [m]])
    j = np.arange(m)[:, None]
    up = (j - left) / (peaks - left)
    down = (right - j) / (right - peaks)
    H = np.clip(np.minimum(up, down), 0.0, None)
    return sp.csr_matrix(H)


def interface_hats(dec: Decomposition) -> sp.csr_matrix:
    """The paper's 1D interface hat functions, shape ``(n, N-1)``."""
    if len(dec.grid) != 1:
        raise ValueError("interface_hats is the 1D coarse space; use q1_hats in 2D")
    return _hats_1d(dec.grid[0], dec.offsets[0])


def q1_hats(dec: Decomposition) -> sp.csr_matrix:
    r"""Q1 hat functions on the 2D or 3D box grid, :math:`\Phi = H_y \otimes H_x` or
    :math:`H_z \otimes H_y \otimes H_x` (:math:`H_a` the 1D interface hats of axis ``a``), shape
    ``(n, prod_a (N_a - 1))``.

    Column ``kx + ky*(Nx-1) (+ kz*(Nx-1)*(Ny-1))`` belongs to the interior box-grid vertex
    ``(kx, ky[, kz])``.
    """
    if len(dec.grid) not in (2, 3):
        raise ValueError("q1_hats is the 2D/3D coarse space; use interface_hats in 1D")
    # Natural index j = (iz*ny + iy)*nx + ix, so slower axes are outer Kronecker factors.
    Phi = _hats_1d(dec.grid[0], dec.offsets[0])
    for m, off in zip(dec.grid[1:], dec.offsets[1:]):
        Phi = sp.kron(_hats_1d(m, off), Phi, format="csr")
    return Phi


def pou_columns(sets, weights, Z, first):
    r"""The partition-of-unity coarse vectors :math:`R_i^TD_iZ_i` of the subdomains ``i``
    (Nicolaides' space with :math:`Z_i = \mathbf 1`), in coordinate form.

    Parameters
    ----------
    sets, weights, Z : sequences over the subdomains
        :math:`I_i` (indices), the diagonal of :math:`D_i` and :math:`Z_i` (shape
        ``(n_i, k_i)``).
    first : sequence of int
        The first column of each subdomain's vectors.

    Returns
    -------
    rows, cols : ndarray of int64
    vals : ndarray
    """
    rows, cols, vals = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0)]
    for I, D, V, c in zip(sets, weights, Z, first):
        k = V.shape[1]
        rows.append(np.repeat(I, k))
        cols.append(np.tile(np.arange(c, c + k), len(I)))
        vals.append((D[:, None] * V).ravel())
    return (np.concatenate(rows).astype(np.int64), np.concatenate(cols).astype(np.int64),
            np.concatenate(vals))


def _hat_pairs(H: sp.csr_matrix, index: np.ndarray):
    """Columns and values of rows ``index`` of a 1D hat matrix (at most two hats are nonzero at
    a point), padded to two per row with zero values."""
    H = H[index]
    cols, vals = np.zeros((len(index), 2), dtype=np.int64), np.zeros((len(index), 2))
    count = np.diff(H.indptr)
    for slot in range(2):
        has = count > slot
        cols[has, slot] = H.indices[H.indptr[:-1][has] + slot]
        vals[has, slot] = H.data[H.indptr[:-1][has] + slot]
    return cols, vals


def hats_on_boxes(axis_index: np.ndarray, offsets) -> sp.csr_matrix:
    r"""Hats on a box grid of arbitrary points: the tensor product over the axes of the 1D
    interface hats (:func:`_hats_1d`), evaluated at each point's position ``axis_index[p, a]``
    among the distinct coordinate values of axis ``a``; ``offsets[a]`` splits those values into
    boxes. On a tensor grid this is :func:`interface_hats` (1D) or :func:`q1_hats` (2D, 3D) row
    for row, in any ordering of the points. Column ``k_x + k_y (B_x - 1)
    (+ k_z (B_x - 1)(B_y - 1))``."""
    n = axis_index.shape[0]
    cols, vals, width = np.zeros((n, 1), dtype=np.int64), np.ones((n, 1)), 1
    for a, off in enumerate(offsets):
        H = _hats_1d(int(off[-1]), off)
        c, v = _hat_pairs(H, axis_index[:, a])
        # every pair of (hats so far) x (hats of this axis): column k_prev + k_a * width
        cols = (cols[:, :, None] + width * c[:, None, :]).reshape(n, -1)
        vals = (vals[:, :, None] * v[:, None, :]).reshape(n, -1)
        width *= H.shape[1]
    keep = vals != 0
    rows = np.repeat(np.arange(n), keep.sum(axis=1))
    return sp.csr_matrix((vals[keep], (rows, cols[keep])), shape=(n, width))


def grid_hats(dec: Decomposition) -> sp.csr_matrix:
    """The hats of a 1D, 2D or 3D box grid: :func:`interface_hats` or :func:`q1_hats`."""
    return interface_hats(dec) if len(dec.grid) == 1 else q1_hats(dec)


@dataclass
class BasisInput:
    r"""What a coarse basis is built from, PETSc-free: the ``tokens`` points, the overlapping
    sets :math:`I_i` and multiplicities :math:`m_j` (:math:`D_i = \mathrm{diag}(1/m_j)`), and
    the box grid where the partition has one: ``dec`` (a structured decomposition) or
    ``boxes`` (``(axis_index, offsets)`` of a box partition of points)."""

    tokens: int
    sets: list
    multiplicity: np.ndarray
    boxes: tuple | None = None
    dec: Decomposition | None = None

    @classmethod
    def of_grid(cls, dec: Decomposition) -> "BasisInput":
        return cls(dec.n, dec.subdomains, dec.multiplicity, None, dec)


def nicolaides_basis(inp: BasisInput) -> sp.csr_matrix:
    r"""Nicolaides coarse space :math:`\Phi e_i = R_i^T D_i \mathbf 1`, shape ``(T, N)``."""
    N = len(inp.sets)
    rows, cols, vals = pou_columns(inp.sets, [1.0 / inp.multiplicity[I] for I in inp.sets],
                                   [np.ones((len(I), 1)) for I in inp.sets], range(N))
    return sp.csr_matrix((vals, (rows, cols)), shape=(inp.tokens, N))


def hats_basis(inp: BasisInput) -> sp.csr_matrix:
    """The interface hats of the box grid: :func:`grid_hats` on a structured decomposition,
    :func:`hats_on_boxes` on a box partition of points."""
    if inp.dec is not None:
        return grid_hats(inp.dec)
    if inp.boxes is None:
        raise ValueError("the hats coarse basis lives on a box grid and this partition has "
                         "none: partition by boxes, or use the nicolaides coarse basis")
    return hats_on_boxes(*inp.boxes)


#: the PETSc-free coarse bases by name: what the paper-form operators, their checkpoints
#: (``coarse``) and the token layouts (``TokenLayout.build(coarse=...)``) choose from. A new one
#: is a function of a :class:`BasisInput` and one line here.
COARSE_BASES = {"hats": hats_basis, "nicolaides": nicolaides_basis}


def coarse_basis(name: str, inp: BasisInput) -> sp.csr_matrix:
    r""":math:`\Phi` of the coarse basis ``name`` of :data:`COARSE_BASES` (zeros dropped).

    Raises
    ------
    ValueError
        For an unknown name, hats without a box grid, or an empty basis (hats on a box grid
        with one box along an axis).
    """
    if name not in COARSE_BASES:
        # the other families (gdsw, spectral, ...) are built from a matrix's subdomains by the PC
        raise ValueError(f"unknown coarse space {name!r}: the {name} coarse space has no "
                         f"form on a structured grid or a point cloud (the families built from a "
                         f"matrix's subdomains run in -pc_type ddlearn); choose one of "
                         f"{', '.join(COARSE_BASES)}")
    Phi = COARSE_BASES[name](inp)
    if Phi.shape[1] == 0:
        where = f"box grid {inp.dec.boxes}" if inp.dec is not None else "this box partition"
        raise ValueError(f"the {name} coarse space is empty for {where}: use more subdomains "
                         f"per direction or the nicolaides coarse space")
    Phi.eliminate_zeros()
    return Phi


def grid_basis(name: str, dec: Decomposition) -> sp.csr_matrix:
    """:func:`coarse_basis` on a structured decomposition."""
    return coarse_basis(name, BasisInput.of_grid(dec))
