r"""GDSW coarse space (Dohrmann, Klawonn, Widlund; Heinlein, Klawonn, Rheinbach) on the
non-overlapping parts of the N subdomains, from the assembled matrix alone.

Per interface component :math:`c` (:mod:`.interface`) and per vector of the near-null space
:math:`Z` (the constants for scalar diffusion, the rigid-body modes for elasticity), the
restriction :math:`Z|_c` (orthonormalised; a component too small to carry a rotation keeps
fewer) on :math:`\Gamma`, extended energy-minimally into every part's interior. For a scalar
problem the functions sum to one away from the Dirichlet boundary, so the space contains the
constants there.

*Coefficient pieces* (``-ddlearn_gdsw_split_ratio rho``, :func:`.interface.coefficient_pieces`):
each component split where the stiffness of neighbouring interface nodes jumps by more than
:math:`\rho`, so a stiff inclusion crossing a face gets its own near-null-space functions (the
coefficient-aware interface partition of GDSW for heterogeneous problems). Read from the
matrix's diagonal alone, so it serves a matrix handed over by a C program.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ...decomposition.collective import on_root
from ...decomposition.groups import label_groups
from ...decomposition.subdomains import node_dofs
from .interface import (InterfaceCoarseSpace, checked_split_ratio, coefficient_pieces,
                        energy_minimal_extension, interface_components)
from .interface_parallel import gdsw_groups, grouped, parallel_vectors
from .nicolaides import orthonormal_columns

__all__ = ["GDSW", "gdsw_basis", "group_columns", "block_columns", "interface_basis",
           "extended_basis"]


def group_columns(nodes: np.ndarray, w: np.ndarray, Z: np.ndarray | None,
                  block_size: int) -> tuple[np.ndarray, np.ndarray]:
    r"""``(dofs, V)``: the dofs of a weighted interface node group and its columns
    :math:`\mathrm{orth}(W Z|_{\rm nodes})` there (one column of the weights without ``Z``)."""
    dofs = node_dofs(nodes, block_size)
    if Z is None:
        return dofs, np.repeat(w, block_size)[:, None]
    return dofs, orthonormal_columns(np.repeat(w, block_size)[:, None] * Z[dofs])


def block_columns(n: int, blocks) -> sp.csr_matrix:
    r""":math:`\Phi_\Gamma` of ``n`` rows from ``(dofs, V)`` blocks side by side: block
    :math:`j`'s columns are ``V`` on its ``dofs`` and zero elsewhere."""
    rows, cols, vals, k = [], [], [], 0
    for dofs, V in blocks:
        r, c = np.nonzero(V)
        rows.append(dofs[r]), cols.append(c + k), vals.append(V[r, c])
        k += V.shape[1]
    if not rows:
        return sp.csr_matrix((n, 0))
    cat = np.concatenate
    return sp.csr_matrix((cat(vals), (cat(rows), cat(cols))), shape=(n, k))


def interface_basis(n: int, groups, Z: np.ndarray | None, block_size: int) -> sp.csr_matrix:
    r""":math:`\Phi_\Gamma` from weighted interface node groups ``groups`` (a list of
    ``(nodes, weights)``, one per coarse node): per group the columns of
    :func:`group_columns`."""
    return block_columns(n, [group_columns(nodes, w, Z, block_size) for nodes, w in groups])


def extended_basis(A, part: np.ndarray, gamma: np.ndarray, groups, Z, block_size: int,
                   mpi=None):
    r""":math:`\Phi` from the interface node groups (:func:`interface_basis`) extended
    energy-minimally into the parts, and its column count: on rank 0 of ``mpi``, whose ranks
    share the parts' solves (collective; the arguments are read on rank 0, ``(None, 0)``
    elsewhere; ``None``: this process alone)."""
    Phi_gamma = on_root(mpi, lambda: interface_basis(A.shape[0], groups, Z, block_size))
    interface = node_dofs(gamma, block_size) if Phi_gamma is not None else None
    Phi = energy_minimal_extension(A, part, interface, Phi_gamma, mpi)
    return Phi, int(Phi_gamma.shape[1]) if Phi_gamma is not None else 0


def gdsw_basis(A: sp.csr_matrix, part: np.ndarray, Z: np.ndarray | None = None,
               block_size: int = 1, split_ratio: float = 0.0,
               mpi=None) -> tuple[sp.csr_matrix, dict]:
    r""":math:`\Phi` of the GDSW coarse space (scipy) and a summary; ``split_ratio`` > 1 splits
    the components by coefficient (:func:`.interface.coefficient_pieces`). ``mpi``: the
    communicator whose ranks share the energy-minimal extension (collective; default this
    process alone); the arguments are read on its rank 0, which gets the result
    (``(None, None)`` elsewhere)."""
    def components():
        gamma, component, _ = interface_components(A, part, block_size)
        component = coefficient_pieces(A, gamma, component, block_size, split_ratio)
        return gamma, [(gamma[c], np.ones(len(c))) for c in label_groups(component)]
    gamma, groups = on_root(mpi, components) or (None, None)
    Phi, n0 = extended_basis(A, part, gamma, groups, Z, block_size, mpi)
    return (Phi, {"components": len(groups), "n0": n0}) if Phi is not None else (None, None)


class GDSW(InterfaceCoarseSpace):
    """GDSW; ``split_ratio`` (``-ddlearn_gdsw_split_ratio``, default 100; 0: no split) as
    :func:`gdsw_basis`. The default splits only at a jump of two orders of magnitude between
    neighbouring interface nodes: a constant coefficient (node stiffness within a factor 8
    of its neighbours, the Dirichlet boundary included) keeps the classical components.
    Measured with the additive correction (``benchmarks/time_to_solution.py``, CG 1e-8, 2 and
    16 subdomains): PETSc's ksp
    tutorial ex56 sphere (3D Q1 elasticity, contrast 1e6, 39 744 dofs) 29 / 81 iterations
    without the split, 26 / 54 with it; 20 jagged P1 inclusions (contrast 1e6, 9 450 dofs)
    87 / 540 without, 50 / 230 with."""

    name = "gdsw"

    def __init__(self, split_ratio: float = 100.0):
        super().__init__()
        self.split_ratio = checked_split_ratio(split_ratio, "-ddlearn_gdsw_split_ratio")

    def set_from_options(self, prefix: str) -> None:
        # the same options on every rank: a bad value raises on every rank
        self.split_ratio = checked_split_ratio(
            self.options(prefix).getReal("split_ratio", self.split_ratio),
            f"-{prefix}{self.name}_split_ratio")

    def build(self, A, part, Z, block_size, mpi=None):
        return gdsw_basis(A, part, Z, block_size, self.split_ratio, mpi)

    def vectors(self, inp):
        out, self.found = parallel_vectors(
            inp, grouped(lambda h: gdsw_groups(h, self.split_ratio), inp.null_space))
        return out

    def describe(self) -> dict:
        return {**super().describe(), "split_ratio": self.split_ratio}
