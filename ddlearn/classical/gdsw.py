r"""GDSW-type coarse space (Dohrmann, Klawonn, Widlund; Heinlein, Klawonn, Rheinbach) on the
non-overlapping parts of *our* N subdomains, from the assembled matrix alone.

- Interface :math:`\Gamma`: the unknowns with a matrix neighbour in another part.
- Interface components: :math:`\Gamma` split by the set of parts each unknown touches (its own
  and its neighbours'), then into connected pieces: in 2D the edges between two parts and the
  vertices where three or more meet.
- One coarse function per component (the null space of a scalar diffusion operator is the
  constants): its indicator :math:`\Phi_\Gamma` on :math:`\Gamma`, extended energy-minimally into
  every part's interior, :math:`\Phi_I = -A_{II}^{-1}A_{I\Gamma}\Phi_\Gamma` (:math:`A_{II}`
  block diagonal over the parts, one sparse LU each).

Built serially (scipy) from the whole matrix; the PC gathers it on rank 0, as it does for the
partition. The functions sum to one away from the Dirichlet boundary, so the space contains the
constants there.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph
import scipy.sparse.linalg as spla

__all__ = ["interface_components", "gdsw_basis"]


def interface_components(A: sp.csr_matrix, part: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(gamma, component)``: the interface unknowns and the component index of each."""
    A = sp.csr_matrix(A)
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    cross = part[A.indices] != part[rows]
    gamma = np.unique(rows[cross])
    # the set of parts each interface unknown touches, as a hashable key
    touch = sp.csr_matrix((np.ones(len(rows)), (rows, part[A.indices])),
                          shape=(A.shape[0], int(part.max()) + 1))
    touch = touch[gamma].tolil()
    keys = {}
    label = np.array([keys.setdefault(tuple(r), len(keys)) for r in touch.rows])
    # connected pieces of equal key inside the interface graph
    G = A[gamma][:, gamma]
    Gc = G.tocoo()
    same = label[Gc.row] == label[Gc.col]
    H = sp.csr_matrix((np.ones(int(same.sum())), (Gc.row[same], Gc.col[same])),
                      shape=G.shape)
    _, component = csgraph.connected_components(H, directed=False)
    return gamma, component


def gdsw_basis(A: sp.csr_matrix, part: np.ndarray) -> sp.csr_matrix:
    r""":math:`\Phi` of the GDSW coarse space, shape ``(n, number of components)``. Each part
    solves only for the components that touch it (its interior LU factored once)."""
    A = sp.csr_matrix(A)
    n = A.shape[0]
    gamma, component = interface_components(A, part)
    n0 = int(component.max()) + 1 if len(gamma) else 0
    Phi_gamma = sp.csr_matrix((np.ones(len(gamma)), (gamma, component)), shape=(n, n0))
    interior = np.setdiff1d(np.arange(n), gamma)
    rhs = -(A[interior] @ Phi_gamma).tocsc()
    rows, cols, vals = [gamma], [component], [np.ones(len(gamma))]
    for p in np.unique(part[interior]):
        mine = np.flatnonzero(part[interior] == p)
        local = rhs[mine]
        touching = np.flatnonzero(np.diff(local.indptr))
        if not len(touching):
            continue
        lu = spla.splu(sp.csc_matrix(A[interior[mine]][:, interior[mine]]))
        X = lu.solve(local[:, touching].toarray())
        r, c = np.nonzero(np.abs(X) > 1e-14 * np.abs(X).max())
        rows.append(interior[mine][r]), cols.append(touching[c]), vals.append(X[r, c])
    return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                         shape=(n, n0))
