r"""Subdomains as the learned coarse space sees them: a batch of local Neumann matrices
:math:`A_i^N` with their weights :math:`D_i`, the spectral pencil factored once for all of them,
and the network's input, computed from the local matrices alone (a PC always has them).

*Inputs* (:func:`local_features`): per unknown :math:`D_i`, the relative diagonal
:math:`\log_{10}(a_{kk}/\mathrm{median})`, the Dirichlet anchor
:math:`(a_{kk}-\sum_{j\ne k}|a_{kj}|)/a_{kk}`, and seeded random channels (a graph network
cannot tell the x from the y direction of a square without them); each diffused by powers
:math:`\hat A^t` of the normalised coupling graph

.. math:: \hat A = W^{-1/2}|A^N_{\rm off}|W^{-1/2},\qquad t\in\{1,2,4,8,16,32\},

which carries the channels' shape (strong couplings) across the subdomain. Nothing depends on
the grid, the ordering or :math:`N`: a model serves any subdomain of about the local resolution
it was trained on (:func:`input_statistics` is what the set-up compares with the training data).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from ...classical.neumann import regularised_pencil

__all__ = ["DIFFUSION_STEPS", "RANDOM_CHANNELS", "PatchBatch", "local_features", "block_features",
           "input_statistics", "max_row_entries"]

#: the powers :math:`t` of :math:`\hat A` that diffuse the features
DIFFUSION_STEPS = (1, 2, 4, 8, 16, 32)
#: seeded random input channels per unknown
RANDOM_CHANNELS = 4


def _coupling_graph(AN: sp.csr_matrix):
    r"""``(Â, w)``: :math:`\hat A = W^{-1/2}|A^N_{\rm off}|W^{-1/2}` with :math:`W =
    \mathrm{diag}(w)` the row sums of :math:`|A^N_{\rm off}|`: spectral radius 1, strong
    couplings (channels) dominate the diffusion."""
    off = abs(AN - sp.diags(AN.diagonal())).tocsr()
    w = np.asarray(off.sum(axis=1)).ravel()
    s = 1.0 / np.sqrt(np.where(w > 0, w, 1.0))
    return (sp.diags(s) @ off @ sp.diags(s)).tocsr(), w


class PatchBatch:
    r"""Subdomains as the learned coarse space sees them, batched: the block-diagonal local
    Neumann matrix, the weights, the network's input (:func:`local_features`), the pencil
    :math:`(B, M)`, :math:`B = DA^RD`, :math:`M = A^N + \varepsilon\,|\mathrm{diag}A^N|`
    (:func:`~ddlearn.classical.neumann.regularised_pencil`) with :math:`M` factored once for
    all blocks; ``rights``: the matrices :math:`A_i^R` weighted on the right of the pencil (the
    Dirichlet blocks :math:`A_i` for the ``dirichlet`` pencil of
    :mod:`ddlearn.classical.coarse.spectral`; default :math:`A_i^N`, the ``neumann`` pencil).

    Raises
    ------
    ValueError
        Naming the first subdomain whose matrix has non-finite entries or a non-positive
        diagonal (a NaN or negative coefficient: not an SPD diffusion-type matrix).
    """

    def __init__(self, ANs, Ds, names=None, seed: int = 0, rights=None):
        self.sizes = [a.shape[0] for a in ANs]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self.names = names = list(range(len(ANs))) if names is None else list(names)
        for name, a in zip(names, ANs):
            if not (np.all(np.isfinite(a.data)) and np.all(a.diagonal() > 0)):
                raise ValueError(f"subdomain {name}: the local matrix has non-finite entries or "
                                 f"a non-positive diagonal; the learned coarse space needs an "
                                 f"SPD matrix with a positive diagonal (check the coefficient "
                                 f"for NaN or negative values)")
        self.AN = sp.block_diag(ANs, format="csr") if ANs else sp.csr_matrix((0, 0))
        self.D = np.concatenate(Ds) if Ds else np.zeros(0)
        self.features, self.graph = local_features(self, seed)
        right = None if rights is None else (sp.block_diag(rights, format="csr") if ANs else
                                             self.AN)
        self.B, self.M = regularised_pencil(self.AN, self.D, right)
        # a symmetric fill-reducing ordering, M being SPD: on the 64 boxes of 255² 0.64 x the
        # fill of COLAMD, factored in 0.8 x the time
        self.lu = spla.splu(sp.csc_matrix(self.M), permc_spec="MMD_AT_PLUS_A") \
            if len(self.D) else None

    def __len__(self) -> int:
        return len(self.sizes)

    def split(self, X):
        """Per-subdomain row blocks of a stacked array or tensor."""
        return [X[a:b] for a, b in zip(self.offsets[:-1], self.offsets[1:])]

    def block(self, i: int):
        """``(A^N, B)`` of subdomain ``i``."""
        rows = slice(self.offsets[i], self.offsets[i + 1])
        return self.AN[rows][:, rows], self.B[rows][:, rows]


def local_features(batch: PatchBatch, seed: int = 0):
    r"""``(features, graph)`` of every unknown of ``batch``, from the local Neumann matrices and
    the weights only (:func:`block_features` of its block-diagonal matrix)."""
    return block_features(batch.AN, batch.D, batch.sizes, seed)


def block_features(A: sp.csr_matrix, D: np.ndarray, sizes, seed: int = 0):
    r"""``(features, graph)`` of the unknowns of the block-diagonal ``A`` (blocks of ``sizes``,
    weights ``D``; the module docstring): the base channels :math:`X` and :math:`\hat A^tX`
    for :math:`t` in :data:`DIFFUSION_STEPS`, side by side, and the graph :math:`\hat A`; a
    block's features do not depend on the other blocks."""
    sizes = list(sizes)
    ends = np.cumsum([0] + sizes)
    diag = A.diagonal()
    G, off = _coupling_graph(A)
    median = np.concatenate([np.full(n, np.median(diag[a:b])) for n, a, b in
                             zip(sizes, ends[:-1], ends[1:])]) if sizes else diag
    base = [D, np.log10(diag / median) / 8.0, (diag - off) / diag]
    noise = [np.random.default_rng([seed, n]).standard_normal((n, RANDOM_CHANNELS))
             for n in sizes]
    X = np.concatenate([np.stack(base, axis=1),
                        np.concatenate(noise) if noise else np.zeros((0, RANDOM_CHANNELS))],
                       axis=1)
    out, Y, t = [X], X, 0
    for step in DIFFUSION_STEPS:
        while t < step:
            Y, t = G @ Y, t + 1
        out.append(Y)
    return np.concatenate(out, axis=1), G


def input_statistics(batch: PatchBatch) -> dict:
    r"""What the set-up compares with the training data: subdomain sizes and the local contrast
    :math:`\log_{10}(\max a_{kk}/\min a_{kk})`."""
    contrast = [float(np.log10(d.max() / d.min())) for d in batch.split(batch.AN.diagonal())]
    return {"size_min": min(batch.sizes, default=0), "size_max": max(batch.sizes, default=0),
            "log10_contrast_max": max(contrast, default=0.0)}


def max_row_entries(A: sp.spmatrix) -> int:
    """The most stored entries of a row of ``A``: the stencil a model was trained on (5 for
    the 2D 5-point, 7 for the 3D 7-point matrices)."""
    A = sp.csr_matrix(A)
    return int(np.diff(A.indptr).max(initial=0))
