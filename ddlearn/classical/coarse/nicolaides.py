r"""Nicolaides coarse space: the near-null space cut off by the partition of unity,
:math:`\Phi = [R_i^TD_iZ_i]_i`, :math:`Z_i` an orthonormal basis of :math:`R_iZ` (the constants
for a scalar problem: :math:`R_i^TD_i\mathbf 1`, :math:`n_0 = N`; the rigid-body modes for
elasticity: :math:`n_0 = 3N` in 2D, :math:`6N` in 3D)."""
from __future__ import annotations

import numpy as np

from ..coarse_space import CoarseInput, CoarseSpace, CoarseVectors, subdomain_columns

__all__ = ["Nicolaides", "orthonormal_columns"]


def orthonormal_columns(Z: np.ndarray, rtol: float = 1e-10) -> np.ndarray:
    """An orthonormal basis of the range of ``Z`` (columns with singular values below
    ``rtol`` times the largest dropped: a rotation restricted to a few collinear nodes)."""
    if Z.shape[1] == 0 or Z.shape[0] == 0:
        return Z[:, :0]
    U, s, _ = np.linalg.svd(Z, full_matrices=False)
    return U[:, s > rtol * s[0]]


class Nicolaides(CoarseSpace):
    name = "nicolaides"

    def vectors(self, inp: CoarseInput) -> CoarseVectors:
        s = inp.subdomains
        if inp.null_space is None:
            Zs = [np.ones((len(I), 1)) for I in s.overlapping]
        else:
            Zs = [orthonormal_columns(Z) for Z in s.gather_columns(inp.A, inp.null_space)]
        found = {int(i): (I, D, Z) for i, I, D, Z in zip(s.ids, s.overlapping, s.weights, Zs)}
        out = subdomain_columns(inp.comm, s.N, found)
        self.found = {"n0": out.n0, "per_subdomain": inp.null_space.shape[1]
                      if inp.null_space is not None else 1}
        return out
