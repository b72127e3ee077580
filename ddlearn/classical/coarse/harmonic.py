r"""GDSW enriched by locally A-harmonic traces: a coarse space robust to coefficient jumps that
is built from the assembled matrix alone (elasticity handed over by a C program: the matrix,
its block size and near-null space, no Neumann matrices).

The solution of :math:`Au = f` is, away from the load, *A-harmonic*: near an interface
component :math:`c` it lies in the range of the transfer operator

.. math:: T_c : g \mapsto \bigl(-A_{\omega\omega}^{-1}A_{\omega\partial}\,g\bigr)\big|_c,

which maps Dirichlet data :math:`g` on the boundary :math:`\partial\omega` of an oversampling
region :math:`\omega \supset c` to the trace on :math:`c` of its energy-minimal extension
into :math:`\omega`. Interior decay makes the singular values of :math:`T_c` fall fast, and the
leading left singular vectors are the optimal local approximation space of that dimension
(Babuška–Lipton; the transfer eigenproblem of Heinlein & Smetana's fully algebraic two-level
Schwarz method, which needs only Dirichlet matrices, i.e. rows of :math:`A`). Where a stiff
inclusion or channel crosses :math:`c` its rigid motions do not decay, so they are among the
leading vectors whatever the contrast; GDSW's near-null-space functions alone miss the motions
that are rigid on the inclusion and free in the soft rest.

Per interface component :math:`c` (:mod:`.interface`, split by coefficient as GDSW's):

- :math:`\omega`: the nodes of the parts :math:`c` touches, grown by ``layers`` node layers;
  one region, one sparse factorisation and one sample for all components of one touch set;
- ``samples`` random Dirichlet data :math:`g \sim \mathcal N(0, \mathrm{diag}(A)^{-1})` on
  :math:`\partial\omega` (the randomised range finder of Buhr & Smetana), traces
  :math:`Y = T_c G`;
- interface values: the near-null space restricted to each coefficient piece of :math:`c` (as
  GDSW) and the left singular vectors of :math:`Y` in the :math:`A_{cc}`-norm whose singular
  values exceed ``tol`` times the largest, orthonormalised together;
- extended energy-minimally into the parts (:func:`.interface.energy_minimal_extension`).

A component of one node (a vertex) keeps GDSW's functions. The columns of :math:`\Phi` are
fixed once built, so the preconditioner is a fixed SPD map for CG. Built serially on rank 0,
as GDSW. Seeded: the same matrix and parts give the same :math:`\Phi`.
"""
from __future__ import annotations

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from ...decomposition.subdomains import node_dofs
from ..overlapping import SparseSolver
from .gdsw import GDSW, block_columns, group_columns
from .interface import (coefficient_pieces, energy_minimal_extension, interface_components,
                        node_matrix)
from .nicolaides import orthonormal_columns

__all__ = ["Harmonic", "harmonic_basis", "dominant_traces"]


def dominant_traces(Y: np.ndarray, A_cc: np.ndarray, tol: float) -> np.ndarray:
    r"""The left singular vectors of ``Y`` in the :math:`A_{cc}`-norm whose singular values
    exceed ``tol`` times the largest: with :math:`A_{cc} = LL^T` and
    :math:`L^TY = U\Sigma V^T`, the columns :math:`L^{-T}u_k` with :math:`\sigma_k > \mathrm{tol}\,
    \sigma_1` (:math:`A_{cc}`-orthonormal).

    Raises
    ------
    ValueError
        :math:`A_{cc}` (a diagonal block of the matrix) is not positive definite.
    """
    try:
        L = np.linalg.cholesky(A_cc)
    except np.linalg.LinAlgError:
        raise ValueError("a diagonal block of the matrix on an interface component is not "
                         "positive definite; the harmonic coarse space needs an SPD matrix")
    U, s, _ = np.linalg.svd(L.T @ Y, full_matrices=False)
    k = int(np.sum(s > tol * s[0])) if s.size and s[0] > 0 else 0
    return sla.solve_triangular(L.T, U[:, :k], lower=False)


def _grown(G: sp.csr_matrix, inside: np.ndarray, layers: int) -> np.ndarray:
    for _ in range(layers):
        inside = inside | (G @ inside.astype(np.float64) > 0)
    return inside


def _sampled_traces(A: sp.csr_matrix, scale: np.ndarray, G: sp.csr_matrix,
                    node_part: np.ndarray, touch, bs: int, layers: int, samples: int,
                    rng) -> tuple[np.ndarray, np.ndarray]:
    r"""``(O, U)``: the dofs of the oversampling region of the parts ``touch`` (sorted) and the
    energy-minimal extensions :math:`U = -A_{OO}^{-1}A_{O\partial}G` of ``samples`` random
    Dirichlet data, standard normal times ``scale`` (:math:`|a_{jj}|^{-1/2}`), on its boundary
    (no columns where the region has no boundary)."""
    inside = _grown(G, np.isin(node_part, touch), layers)
    boundary = np.flatnonzero((G @ inside.astype(np.float64) > 0) & ~inside)
    O, B = node_dofs(np.flatnonzero(inside), bs), node_dofs(boundary, bs)
    if not len(B):
        return O, np.zeros((len(O), 0))
    g = rng.standard_normal((len(B), samples)) * scale[B][:, None]
    solver = SparseSolver(A[O][:, O])
    U = -solver.solve(A[O][:, B] @ g)
    solver.destroy()
    return O, U


def harmonic_basis(A: sp.csr_matrix, part: np.ndarray, Z: np.ndarray | None = None,
                   block_size: int = 1, split_ratio: float = 100.0, samples: int = 30,
                   layers: int = 2, tol: float = 0.1, seed: int = 0):
    r""":math:`\Phi` of the harmonic coarse space (scipy, serial; see the module docstring) and a
    summary: components, columns, and how many came from the sampled traces."""
    A = sp.csr_matrix(A)
    n, bs = A.shape[0], block_size
    gamma, component, keys = interface_components(A, part, bs)
    if not len(gamma):
        return sp.csr_matrix((n, 0)), {"components": 0, "n0": 0, "enriched": 0}
    pieces = coefficient_pieces(A, gamma, component, bs, split_ratio)
    G = abs(node_matrix(A, bs))  # the graph: a signed scalar matrix's rows can sum to <= 0
    node_part = part[::bs]
    rng = np.random.default_rng(seed)
    scale = 1.0 / np.sqrt(np.abs(A.diagonal()))
    order = np.argsort(component, kind="stable")
    members = np.split(order, np.cumsum(np.bincount(component))[:-1])
    by_touch: dict[tuple, list[int]] = {}
    for c, key in enumerate(keys):
        by_touch.setdefault(tuple(key), []).append(c)
    blocks, enriched = [], 0
    for touch, comps in by_touch.items():
        sampled = [c for c in comps if len(members[c]) > 1] if samples else []
        if sampled:
            O, U = _sampled_traces(A, scale, G, node_part, list(touch), bs, layers, samples,
                                   rng)
        for c in comps:
            nodes = gamma[members[c]]
            dofs = node_dofs(nodes, bs)  # sorted: gamma and members are
            V = []
            for p in np.unique(pieces[members[c]]):  # GDSW's functions of each piece
                mine = nodes[pieces[members[c]] == p]
                piece, W = group_columns(mine, np.ones(len(mine)), Z, bs)
                V.append(np.zeros((len(dofs), W.shape[1])))
                V[-1][np.searchsorted(dofs, piece)] = orthonormal_columns(W)
            if c in sampled:
                E = dominant_traces(U[np.searchsorted(O, dofs)], A[dofs][:, dofs].toarray(), tol)
                V.append(E)
                enriched += E.shape[1]
            blocks.append((dofs, orthonormal_columns(np.hstack(V))))
    Phi_gamma = block_columns(n, blocks)
    Phi = energy_minimal_extension(A, part, node_dofs(gamma, bs), Phi_gamma)
    return Phi, {"components": len(keys), "n0": Phi_gamma.shape[1], "enriched": enriched}


def _positive(value, option: str, kind=int, low=1):
    if not (isinstance(value, (int, float)) and kind(value) == value and value >= low):
        raise ValueError(f"{option} must be an integer >= {low}, got {value!r}")
    return kind(value)


class Harmonic(GDSW):
    """GDSW plus the dominant sampled A-harmonic traces (see the module docstring). Options
    under ``-ddlearn_harmonic_``: ``split_ratio`` (GDSW's coefficient pieces, default 100),
    ``samples`` (random Dirichlet data per touch set, default 30), ``layers`` (oversampling,
    default 2), ``tol`` (relative singular value kept, in (0, 1), default 0.1)."""

    name = "harmonic"

    def __init__(self, split_ratio: float = 100.0, samples: int = 30, layers: int = 2,
                 tol: float = 0.1):
        super().__init__(split_ratio)
        self.samples = _positive(samples, "the number of samples", low=0)
        self.layers = _positive(layers, "the number of oversampling layers", low=0)
        self.tol = self._checked_tol(tol, "the relative singular value")

    @staticmethod
    def _checked_tol(tol, option: str) -> float:
        if not 0.0 < tol < 1.0:
            raise ValueError(f"{option} must lie in (0, 1) (traces kept: singular value above "
                             f"tol times the largest), got {tol!r}")
        return float(tol)

    def set_from_options(self, prefix: str) -> None:
        super().set_from_options(prefix)
        opts, option = self.options(prefix), f"-{prefix}{self.name}_"
        self.samples = _positive(opts.getInt("samples", self.samples), option + "samples", low=0)
        self.layers = _positive(opts.getInt("layers", self.layers), option + "layers", low=0)
        self.tol = self._checked_tol(opts.getReal("tol", self.tol), option + "tol")

    def build(self, A, part, Z, block_size):
        return harmonic_basis(A, part, Z, block_size, self.split_ratio, self.samples,
                              self.layers, self.tol)

    def describe(self) -> dict:
        return {**super().describe(), "samples": self.samples, "layers": self.layers,
                "tol": self.tol}
