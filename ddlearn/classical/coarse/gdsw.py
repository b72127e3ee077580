r"""GDSW coarse space (Dohrmann, Klawonn, Widlund; Heinlein, Klawonn, Rheinbach) on the
non-overlapping parts of the N subdomains, from the assembled matrix alone.

Per interface component :math:`c` (:mod:`.interface`) and per vector of the near-null space
:math:`Z` (the constants for scalar diffusion, the rigid-body modes for elasticity), the
restriction :math:`Z|_c` (orthonormalised; a component too small to carry a rotation keeps
fewer) on :math:`\Gamma`, extended energy-minimally into every part's interior. For a scalar
problem the functions sum to one away from the Dirichlet boundary, so the space contains the
constants there.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .interface import InterfaceCoarseSpace, energy_minimal_extension, interface_components
from .nicolaides import orthonormal_columns

__all__ = ["GDSW", "gdsw_basis", "interface_basis", "extended_basis"]


def interface_basis(n: int, groups, Z: np.ndarray | None, block_size: int) -> sp.csr_matrix:
    r""":math:`\Phi_\Gamma` from weighted interface node groups ``groups`` (a list of
    ``(nodes, weights)``, one per coarse node): per group the columns
    :math:`\mathrm{orth}(W Z|_{\rm nodes})` (one column of the weights without ``Z``)."""
    rows, cols, vals, k = [], [], [], 0
    for nodes, w in groups:
        dofs = (block_size * nodes[:, None] + np.arange(block_size)).ravel()
        if Z is None:
            V = np.repeat(w, block_size)[:, None]
        else:
            V = orthonormal_columns(np.repeat(w, block_size)[:, None] * Z[dofs])
        r, c = np.nonzero(V)
        rows.append(dofs[r]), cols.append(c + k), vals.append(V[r, c])
        k += V.shape[1]
    cat = np.concatenate
    return sp.csr_matrix((cat(vals), (cat(rows), cat(cols))), shape=(n, k)) if groups \
        else sp.csr_matrix((n, 0))


def extended_basis(A, part: np.ndarray, gamma: np.ndarray, groups, Z, block_size: int):
    r""":math:`\Phi` from the interface node groups (:func:`interface_basis`) extended
    energy-minimally into the parts, and its column count."""
    Phi_gamma = interface_basis(A.shape[0], groups, Z, block_size)
    interface = (block_size * gamma[:, None] + np.arange(block_size)).ravel()
    return energy_minimal_extension(A, part, interface, Phi_gamma), int(Phi_gamma.shape[1])


def gdsw_basis(A: sp.csr_matrix, part: np.ndarray, Z: np.ndarray | None = None,
               block_size: int = 1) -> tuple[sp.csr_matrix, dict]:
    r""":math:`\Phi` of the GDSW coarse space (scipy, serial) and a summary."""
    gamma, component, _ = interface_components(A, part, block_size)
    order = np.argsort(component, kind="stable")
    splits = np.cumsum(np.bincount(component))[:-1] if len(gamma) else []
    groups = [(gamma[c], np.ones(len(c))) for c in np.split(order, splits)] if len(gamma) \
        else []
    Phi, n0 = extended_basis(A, part, gamma, groups, Z, block_size)
    return Phi, {"components": len(groups), "n0": n0}


class GDSW(InterfaceCoarseSpace):
    name = "gdsw"
    build = staticmethod(gdsw_basis)
