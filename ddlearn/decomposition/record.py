r"""The decomposition record: what the learned operators, the token mixers and their distributed
forms need of an overlapping decomposition of ``T`` points, PETSc-free, whatever made it (a
structured :class:`~.structured.Decomposition` or the partition of a point cloud,
:class:`ddlearn.nn.layout.TokenLayout`).

- the non-overlapping part of every point (``part``; the owner of the point);
- the overlapping index sets :math:`I_i` padded to the largest, ``index`` of shape
  ``(N, n_max)`` with the pad index ``T`` (one slot past the last point), and the weights
  :math:`D_i^{1/2}`, ``sqrt_D``, zero on the padding (:func:`padded_sets`), with
  :math:`D_i = \mathrm{diag}(1/m_j,\ j\in I_i)`, :math:`m_j` the number of sets holding ``j``;
- the coarse basis :math:`\Phi\in\mathbb R^{T\times n_0}` in coordinate form.

The ranks of the subdomains follow the solver's rule,
:func:`~.structured.assign_ranks` (:meth:`DecompositionRecord.owners`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .structured import Decomposition, assign_ranks

__all__ = ["DecompositionRecord", "padded_sets"]


def padded_sets(sets, multiplicity: np.ndarray, pad: int):
    r"""The padded index sets and weights of the overlapping sets ``sets`` (arrays of indices
    :math:`I_i`) with multiplicities :math:`m_j`:

    .. math:: \mathrm{index}_{i,k} = (I_i)_k,\qquad
              \mathrm{sqrt\_D}_{i,k} = \sqrt{1/m_{(I_i)_k}},\qquad k < n_i,

    ``pad`` and zero for :math:`n_i\le k<n_{max}`.

    Returns
    -------
    index : ndarray of int64, shape (N, n_max)
    sqrt_D : ndarray of float64, shape (N, n_max)
    sizes : ndarray of int64, shape (N,)
    """
    sizes = np.array([len(I) for I in sets], dtype=np.int64)
    n_max = int(sizes.max())
    index = np.full((len(sets), n_max), pad, dtype=np.int64)
    sqrt_D = np.zeros((len(sets), n_max))
    for i, I in enumerate(sets):  # set-up only, once per decomposition
        index[i, :len(I)] = I
        sqrt_D[i, :len(I)] = np.sqrt(1.0 / multiplicity[I])
    return index, sqrt_D, sizes


@dataclass(eq=False)
class DecompositionRecord:
    r"""Overlapping subdomains, partition of unity and coarse basis of ``tokens`` points (see
    the module docstring).

    Attributes
    ----------
    tokens : int
        ``T``, the points.
    index, sqrt_D : ndarray, shape (N, n_max)
        :math:`I_i` padded with ``T``; :math:`D_i^{1/2}` on :math:`I_i`, zero on the padding.
    sizes : ndarray, shape (N,)
        :math:`n_i = |I_i|`.
    part : ndarray, shape (T,)
        The non-overlapping part (subdomain) of every point.
    phi_rows, phi_cols, phi_vals : ndarray
        :math:`\Phi` in coordinate format; ``n0`` its columns (0: no coarse basis).
    """

    tokens: int
    index: np.ndarray
    sqrt_D: np.ndarray
    sizes: np.ndarray
    part: np.ndarray
    phi_rows: np.ndarray
    phi_cols: np.ndarray
    phi_vals: np.ndarray
    n0: int

    @property
    def N(self) -> int:
        return len(self.sizes)

    def owners(self, P: int) -> np.ndarray:
        """The rank of each subdomain on ``P`` ranks (:func:`~.structured.assign_ranks`)."""
        return assign_ranks(self.N, P)

    @staticmethod
    def fields(sets, multiplicity: np.ndarray, part: np.ndarray, Phi) -> dict:
        """The record's fields from the overlapping sets, multiplicities, parts and the coarse
        basis (a sparse matrix, or ``None``)."""
        T = len(part)
        index, sqrt_D, sizes = padded_sets(sets, multiplicity, T)
        Phi = sp.coo_matrix((T, 0)) if Phi is None else sp.csr_matrix(Phi).tocoo()
        return {"tokens": T, "index": index, "sqrt_D": sqrt_D, "sizes": sizes,
                "part": np.asarray(part, dtype=np.int64),
                "phi_rows": Phi.row.astype(np.int64), "phi_cols": Phi.col.astype(np.int64),
                "phi_vals": Phi.data.astype(np.float64), "n0": int(Phi.shape[1])}

    @classmethod
    def of_grid(cls, dec: Decomposition, Phi=None) -> "DecompositionRecord":
        """The record of a structured decomposition with the coarse basis ``Phi`` (or none)."""
        part = np.empty(dec.n, dtype=np.int64)
        for i, owned in enumerate(dec.owned):
            part[owned] = i
        return cls(**cls.fields(dec.subdomains, dec.multiplicity, part, Phi))
