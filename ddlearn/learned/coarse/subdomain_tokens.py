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

With ``pieces``, also the subdomain's coefficient pieces
(:func:`~ddlearn.classical.coarse.interface.coefficient_pieces` on the whole block: neighbours
stay together where their diagonals are within :data:`PIECE_RATIO` of each other): per token
:data:`RANDOM_CHANNELS` seeded random values constant on its piece (a code telling the pieces
apart, which the diffusion above cannot do across a subdomain in a few steps) and its piece's
share of the subdomain, :math:`\log_{10}(|P|/n_i)/4`. A stiff inclusion or channel is one
piece, the soft rest another: the pieces' indicators are what the spectral space finds for
inclusions, so a network could copy them (the one trained with them does not:
``docs/schwarz_attention_coarse.md``).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ...classical.coarse.interface import coefficient_pieces
from .patches import DIFFUSION_STEPS, RANDOM_CHANNELS, block_features

__all__ = ["MATRIX_FEATURES", "PIECE_FEATURES", "PIECE_RATIO", "feature_count",
           "unusable_block", "subdomain_tokens", "piece_features"]

#: features per token from the matrix and the weights
MATRIX_FEATURES = (3 + RANDOM_CHANNELS) * (1 + len(DIFFUSION_STEPS))
#: features per token from its coefficient piece (the code and the piece's share)
PIECE_FEATURES = RANDOM_CHANNELS + 1
#: the diagonal ratio that separates two neighbouring tokens into different pieces
PIECE_RATIO = 10.0


def feature_count(dim: int = 0, pieces: bool = False) -> int:
    """Features per token, ``dim``: the coordinates' dimension when they are used (else 0);
    ``pieces``: with the coefficient pieces' features."""
    return MATRIX_FEATURES + PIECE_FEATURES * bool(pieces) + int(dim)


def piece_features(block, seed: int = 0) -> np.ndarray:
    r"""``(n_i, PIECE_FEATURES)``: per row of the block :math:`A_i` its coefficient piece's
    seeded code and :math:`\log_{10}(|P|/n_i)/4` (module docstring)."""
    n = block.shape[0]
    piece = coefficient_pieces(sp.csr_matrix(block), np.arange(n), np.zeros(n, dtype=np.int64),
                               ratio=PIECE_RATIO)
    count = np.bincount(piece)
    code = np.random.default_rng([seed, n, 1]).standard_normal((len(count), RANDOM_CHANNELS))
    return np.column_stack([code[piece], np.log10(count[piece] / n) / 4.0])


def unusable_block(blocks) -> int | None:
    """The first of ``blocks`` (scipy matrices) with a non-finite entry or a non-positive
    diagonal, ``None`` when all can be read."""
    for i, a in enumerate(blocks):
        if not (np.all(np.isfinite(a.data)) and np.all(a.diagonal() > 0)):
            return i
    return None


def subdomain_tokens(blocks, weights, coordinates=None, seed: int = 0,
                     pieces: bool = False) -> np.ndarray:
    r"""The tokens of the subdomains ``blocks`` (:math:`A_i`, scipy, rows in the order of
    :math:`I_i`) with weights ``weights`` (:math:`D_i`), with their coefficient pieces'
    features if ``pieces``, and, optionally, ``coordinates`` (one ``(n_i, dim)`` array per
    subdomain), stacked subdomain after subdomain: shape
    ``(sum n_i, feature_count(dim, pieces))``.

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
    if pieces:
        X = np.concatenate([X, np.concatenate([piece_features(a, seed) for a in blocks])
                            if blocks else np.zeros((0, PIECE_FEATURES))], axis=1)
    if coordinates is None:
        return X
    rel = []
    for c in coordinates:
        c = np.asarray(c, dtype=np.float64)
        lo, hi = c.min(axis=0), c.max(axis=0)
        rel.append(2 * (c - (lo + hi) / 2) / np.where(hi > lo, hi - lo, 1.0))
    return np.concatenate([X, np.concatenate(rel)], axis=1)
