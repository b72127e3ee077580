r"""The tokens of the ``schwarz_attention`` coarse space: per row of every overlapping
subdomain, features computed from what the one-level part already holds, the Dirichlet block
:math:`A_i = R_iAR_i^T` and the weights :math:`D_i`, and (optionally) the coordinates.

Per subdomain (:func:`~.patches.block_features` of :math:`A_i`): :math:`D_i`, the relative
diagonal :math:`\log_{10}(a_{kk}/\mathrm{median})/8`, the anchor
:math:`(a_{kk}-\sum_{j\in I_i, j\ne k}|a_{kj}|)/a_{kk}` (positive where the subdomain cuts a
coupling: its boundary, and the Dirichlet boundary), seeded random channels, each diffused by
:math:`\hat A_i^t`, :math:`t\in\{1,2,4,8,16,32\}` (strong couplings, i.e. channels, keep a
random channel nearly constant: the diffused noise marks the subdomain's connected
high-coefficient pieces); with coordinates, the position relative to the subdomain's bounding
box, :math:`2(x - c_i)/\ell_i`.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .patches import DIFFUSION_STEPS, RANDOM_CHANNELS, block_features

__all__ = ["MATRIX_FEATURES", "feature_count", "unusable_block", "subdomain_tokens"]

#: features per token from the matrix and the weights
MATRIX_FEATURES = (3 + RANDOM_CHANNELS) * (1 + len(DIFFUSION_STEPS))


def feature_count(dim: int = 0) -> int:
    """Features per token, ``dim``: the coordinates' dimension when they are used (else 0)."""
    return MATRIX_FEATURES + int(dim)


def unusable_block(blocks) -> int | None:
    """The first of ``blocks`` (scipy matrices) with a non-finite entry or a non-positive
    diagonal, ``None`` when all can be read."""
    for i, a in enumerate(blocks):
        if not (np.all(np.isfinite(a.data)) and np.all(a.diagonal() > 0)):
            return i
    return None


def subdomain_tokens(blocks, weights, coordinates=None, seed: int = 0) -> np.ndarray:
    r"""The tokens of the subdomains ``blocks`` (:math:`A_i`, scipy, rows in the order of
    :math:`I_i`) with weights ``weights`` (:math:`D_i`) and, optionally, ``coordinates`` (one
    ``(n_i, dim)`` array per subdomain), stacked subdomain after subdomain: shape
    ``(sum n_i, feature_count(dim))``.

    Raises
    ------
    ValueError
        Naming the first subdomain whose block has a non-finite entry or a non-positive
        diagonal.
    """
    i = unusable_block(blocks)
    if i is not None:
        raise ValueError(f"subdomain {i} of this rank: its block of the matrix has "
                         f"non-finite entries or a non-positive diagonal; the learned "
                         f"coarse space needs an SPD matrix with a positive diagonal (check "
                         f"the coefficient for NaN or negative values)")
    sizes = [a.shape[0] for a in blocks]
    A = sp.block_diag(blocks, format="csr") if blocks else sp.csr_matrix((0, 0))
    X, _ = block_features(A, np.concatenate(weights) if weights else np.zeros(0), sizes, seed)
    if coordinates is None:
        return X
    rel = []
    for c in coordinates:
        c = np.asarray(c, dtype=np.float64)
        lo, hi = c.min(axis=0), c.max(axis=0)
        rel.append(2 * (c - (lo + hi) / 2) / np.where(hi > lo, hi - lo, 1.0))
    return np.concatenate([X, np.concatenate(rel)], axis=1)
