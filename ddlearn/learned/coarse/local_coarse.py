r"""Learned local coarse vectors: one small network, shared by all subdomains, that starts the
spectral coarse space's eigensolve where it nearly ends.

Per overlapping subdomain :math:`i` the spectral coarse space (:mod:`ddlearn.classical.spectral`)
wants the :math:`k` smallest eigenpairs of :math:`A_i^N v = \lambda D_iA_i^ND_i v`. Here a network
:math:`f_\theta` maps the subdomain's *local matrix* (nothing else: a PC always has it) to
:math:`m` start vectors, and one cheap, convergent refinement finishes the job:

.. math::

    X_i = f_\theta(A_i^N, D_i) \in \mathbb R^{n_i\times m},\qquad
    \mathcal K_s = \mathrm{span}\{X_i,\ TX_i,\ \dots,\ T^sX_i\},\quad T = M_i^{-1}B_i,

    V_i = \text{the } k \text{ Ritz vectors of } (A_i^N, B_i) \text{ on } \mathcal K_s
    \text{ with the smallest Ritz values},

with :math:`B_i = D_iA_i^ND_i`, :math:`M_i = A_i^N+\varepsilon\,\mathrm{diag}A_i^N` (one sparse
Cholesky/LU per subdomain, the same pencil as the spectral space). The coarse vectors are
:math:`R_i^TD_iV_i` and the coarse operator is Galerkin, so the preconditioner is SPD for every
:math:`\theta` and every input; the network only decides how good the subspace is.

*Why a start and not the vectors*: coarse vectors have to be accurate in the energy of
:math:`A` (a contrast of :math:`10^6` amplifies any error in a channel); 10 % white noise on the
exact eigenvectors takes CG on a 255² channels field from 26 back to 68 iterations (the hats'
count). One block Krylov step on a good start removes that.

*Inputs* (:func:`local_features`): per unknown :math:`D_i`, the relative diagonal
:math:`\log_{10}(a_{kk}/\mathrm{median})`, the Dirichlet anchor
:math:`(a_{kk}-\sum_{j\ne k}|a_{kj}|)/a_{kk}`, and seeded random channels (a graph network
cannot tell the x from the y direction of a square without them); each diffused by powers
:math:`\hat A^t` of the normalised coupling graph :math:`\hat A = W^{-1/2}|A^N_{\rm off}|W^{-1/2}`,
:math:`t\in\{1,2,4,8,16,32\}`, which carries the channels' shape (strong couplings) across the
subdomain. Then message-passing layers on :math:`\hat A` with a subdomain mean (global
context), and a linear read-out to :math:`m` vectors. Nothing depends on the grid, the ordering
or :math:`N`: the model serves any subdomain of about the local resolution it was trained on.

*Training* (:mod:`.local_training`): label-free, on the Ritz values after the refinement,

.. math:: L(\theta) = \frac{1}{|\mathcal P|}\sum_{i\in\mathcal P}\sum_{j\le k}
          \frac{\tilde\lambda_{i,j}(\theta) - \lambda_{i,j}}{\lambda_{i,k+1}} \;\ge 0,

(:math:`\tilde\lambda`: Ritz values, :math:`\lambda`: exact), which measures the eigenvalue
error in units of the gap CG sees, :math:`\sqrt{1/\lambda_{k+1}}`; a missed channel mode
(:math:`\lambda\approx10^{-7}`) costs a whole unit.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch
from mpi4py import MPI
from petsc4py import PETSc
from torch import nn

from ...classical.reference import neumann_matrix
from ...classical.coarse.spectral import SpectralSettings, robust_local_eigenvectors
from ...classical.coarse_space import subdomain_columns
from ...classical.neumann import dirichlet_blocks, neumann_matrices, regularised_pencil
from ...decomposition.collective import collective_check
from ..common import atomic_write, atomic_write_json, read_payload

__all__ = ["KIND", "DIFFUSION_STEPS", "PatchBatch", "local_features", "LocalCoarseNet",
           "start_vectors", "refine", "ritz_loss", "save_model", "load_model", "model_hash",
           "input_statistics", "check_inputs", "learned_entries", "PRETRAINED",
           "serial_basis", "update_record", "max_row_entries", "monomials", "refine_checked",
           "Serving", "CHANGE_TOL", "SERVE_STEPS"]

KIND = "learned-local-coarse"
FORMAT_VERSION = 1
#: the model shipped with ddlearn (the command in its record ``PRETRAINED + '.json'``, with
#: ``--force``, remakes it in place)
PRETRAINED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pretrained",
                          "local_coarse.pt")
DIFFUSION_STEPS = (1, 2, 4, 8, 16, 32)
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
    """Subdomains as the learned coarse space sees them, batched: the block-diagonal local
    Neumann matrix, the weights, the network's input (:func:`local_features`), the pencil
    ``(B, M)`` with ``M`` factored once for all blocks; ``rights``: the matrices :math:`A_i^R`
    weighted on the right of the pencil (the Dirichlet blocks :math:`A_i` for the
    ``dirichlet`` pencil of :mod:`ddlearn.classical.coarse.spectral`; default
    :math:`A_i^N`, the ``neumann`` pencil).

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
    """``(features, graph)`` of every unknown of ``batch``, from the local Neumann matrices and
    the weights only (see the module docstring); a subdomain's features do not depend on the
    other subdomains of the batch."""
    AN = batch.AN
    diag = AN.diagonal()
    G, off = _coupling_graph(AN)
    median = np.concatenate([np.full(n, np.median(d)) for n, d in
                             zip(batch.sizes, batch.split(diag))]) if len(batch) else diag
    base = [batch.D, np.log10(diag / median) / 8.0, (diag - off) / diag]
    noise = [np.random.default_rng([seed, n]).standard_normal((n, RANDOM_CHANNELS))
             for n in batch.sizes]
    X = np.concatenate([np.stack(base, axis=1),
                        np.concatenate(noise) if noise else np.zeros((0, RANDOM_CHANNELS))],
                       axis=1)
    out, Y, t = [X], X, 0
    for step in DIFFUSION_STEPS:
        while t < step:
            Y, t = G @ Y, t + 1
        out.append(Y)
    return np.concatenate(out, axis=1), G


class _SparseGraph(torch.autograd.Function):
    """Product with a fixed symmetric sparse matrix (backward: the same product)."""

    @staticmethod
    def forward(ctx, X, G):
        ctx.G = G
        return torch.from_numpy(np.asarray(G @ X.detach().numpy()))

    @staticmethod
    def backward(ctx, grad):
        return torch.from_numpy(np.asarray(ctx.G @ grad.numpy())), None


class _Solve(torch.autograd.Function):
    r""":math:`M^{-1}Y` with a factored symmetric :math:`M` (backward: :math:`M^{-1}` again)."""

    @staticmethod
    def forward(ctx, Y, lu):
        ctx.lu = lu
        return torch.from_numpy(lu.solve(Y.detach().numpy()))

    @staticmethod
    def backward(ctx, grad):
        return torch.from_numpy(ctx.lu.solve(grad.numpy().copy())), None


class LocalCoarseNet(nn.Module):
    r"""The shared local model :math:`f_\theta`: per-unknown lift of the diffused features,
    ``layers`` residual message-passing layers
    :math:`H \leftarrow H + \tanh(HW_s + \hat AHW_n + \bar H W_g)` (:math:`\bar H`: the
    subdomain mean) and a linear read-out to ``vectors`` start vectors."""

    kind = KIND

    def __init__(self, vectors: int = 8, hidden: int = 24, layers: int = 4, seed: int = 0):
        super().__init__()
        self.config = {"kind": KIND, "vectors": int(vectors), "hidden": int(hidden),
                       "layers": int(layers), "seed": int(seed)}
        torch.manual_seed(seed)
        width = (3 + RANDOM_CHANNELS) * (1 + len(DIFFUSION_STEPS))
        self.lift = nn.Linear(width, hidden, dtype=torch.float64)
        self.self_ = nn.ModuleList(nn.Linear(hidden, hidden, dtype=torch.float64)
                                   for _ in range(layers))
        self.neighbour = nn.ModuleList(nn.Linear(hidden, hidden, bias=False, dtype=torch.float64)
                                       for _ in range(layers))
        self.mean = nn.ModuleList(nn.Linear(hidden, hidden, bias=False, dtype=torch.float64)
                                  for _ in range(layers))
        self.readout = nn.Linear(hidden, vectors, dtype=torch.float64)

    def forward(self, batch: PatchBatch) -> torch.Tensor:
        """The start vectors of every subdomain of ``batch``, stacked
        (:meth:`PatchBatch.split` separates them)."""
        segment = torch.from_numpy(np.repeat(np.arange(len(batch)), batch.sizes))
        counts = torch.tensor(batch.sizes, dtype=torch.float64)[:, None]
        H = torch.tanh(self.lift(torch.from_numpy(batch.features)))
        for s, nb, mean in zip(self.self_, self.neighbour, self.mean):
            pooled = torch.zeros(len(batch), H.shape[1], dtype=H.dtype).index_add_(0, segment, H)
            H = H + torch.tanh(s(H) + nb(_SparseGraph.apply(H, batch.graph))
                               + mean(pooled / counts)[segment])
        return self.readout(H)


def _krylov(batch: PatchBatch, X: torch.Tensor, steps: int) -> list[torch.Tensor]:
    r"""Per subdomain an orthonormal basis of :math:`\mathcal K_s = \mathrm{span}\{X, TX,
    \dots, T^sX\}`, :math:`T = M^{-1}B` applied to all subdomains at once (differentiable in
    :math:`X`)."""
    bases = [[torch.linalg.qr(x)[0]] for x in batch.split(X)]
    for _ in range(steps):
        current = torch.cat([b[-1] for b in bases])
        Y = _Solve.apply(_SparseGraph.apply(current, batch.B), batch.lu)
        for basis, y in zip(bases, batch.split(Y)):
            Q = torch.cat(basis, dim=1)
            y = y - Q @ (Q.T @ y)
            y = y - Q @ (Q.T @ y)  # twice is enough (Kahan)
            basis.append(torch.linalg.qr(y)[0])
    return [torch.cat(b, dim=1) for b in bases]


def _ritz(batch: PatchBatch, S: list[torch.Tensor]):
    r"""Per subdomain the Ritz values (ascending) and coefficient vectors of
    :math:`A^Nv=\lambda Bv` on :math:`\mathrm{span}\,S_i`, solved as
    :math:`G_My = \nu(G_M+G_B)y`, :math:`\lambda = \nu/(1-\nu)`: :math:`G_M+G_B` stays
    positive definite when either Gram matrix is singular (floating subdomains)."""
    width = max(s.shape[1] for s in S)
    padded = torch.cat([torch.nn.functional.pad(s, (0, width - s.shape[1])) for s in S])
    MS, BS = (batch.split(_SparseGraph.apply(padded, A)) for A in (batch.M, batch.B))
    out = []
    for s, ms, bs in zip(S, MS, BS):
        r = s.shape[1]
        GM, GB = s.T @ ms[:, :r], s.T @ bs[:, :r]
        GM, GB = (GM + GM.T) / 2, (GB + GB.T) / 2
        L = torch.linalg.cholesky(GM + GB)
        C = torch.linalg.solve_triangular(
            L, torch.linalg.solve_triangular(L, GM, upper=False).T, upper=False)
        nu, Y = torch.linalg.eigh((C + C.T) / 2)
        nu = nu.clamp(max=1 - 1e-15)
        out.append((nu / (1 - nu), s @ torch.linalg.solve_triangular(L.T, Y, upper=True)))
    return out


def refine(batch: PatchBatch, X, steps: int, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per subdomain ``(lambda, V)``: the ``k`` smallest Ritz pairs on the block Krylov space
    of its start vectors (rows of the stacked ``X``); see the module docstring."""
    return refine_checked(batch, X, steps, k)[0]


def refine_checked(batch: PatchBatch, X, steps: int, k: int):
    r"""``(pairs, change)``: :func:`refine`'s pairs and, per subdomain, what the last Krylov
    step changed in its Ritz values, in units of the largest kept one,

    .. math:: \Delta_i = \sum_{j\le k}\big(\tilde\lambda^{(s-1)}_{ij}
              - \tilde\lambda^{(s)}_{ij}\big) / \tilde\lambda^{(s)}_{ik} \;\ge 0

    (the spaces are nested, so Ritz values only decrease; 0 for ``steps = 0``). It estimates
    the loss of :func:`ritz_loss` one step earlier without the exact eigenvalues: a converged
    refinement changes nothing, a start that missed a low mode (a channel's) finds it late and
    changes a whole unit."""
    with torch.no_grad():
        X = torch.as_tensor(X, dtype=torch.float64)
        S = _krylov(batch, X, steps)
        pairs = [(lam[:k].numpy(), V[:, :k].numpy()) for lam, V in _ritz(batch, S)]
        change = np.zeros(len(batch))
        if steps and len(batch):
            before = _ritz(batch, [b[:, :X.shape[1] * steps] for b in S])
            for i, ((lam, _), (old, _)) in enumerate(zip(pairs, before)):
                old = old[:len(lam)].numpy()
                change[i] = float(np.sum(old - lam) / max(lam[-1], 1e-300))
    return pairs, change


def ritz_loss(batch: PatchBatch, X: torch.Tensor, exact: list[np.ndarray], steps: int, k: int):
    r""":math:`\frac1{|P|}\sum_i\sum_{j\le k}(\tilde\lambda_{ij}-\lambda_{ij})/\lambda_{i,k+1}`
    (module docstring); ``exact[i]`` holds the ``k + 1`` smallest exact eigenvalues of
    subdomain ``i``."""
    total = 0.0
    for (ritz, _), lam in zip(_ritz(batch, _krylov(batch, X, steps)), exact):
        total = total + (ritz[:k] - torch.from_numpy(np.asarray(lam[:k]))).sum() / float(lam[k])
    return total / len(batch)


#: where the refinement starts: the network's vectors; the classical alternatives fed to the
#: same refinement: seeded Gaussian vectors, low-order polynomials of the coordinates (the
#: constant is Nicolaides' vector, the multilinear ones span the Q1 hats on a box), the previous
#: set-up's coarse vectors of the same subdomain (a loop over fields)
STARTS = ("network", "random", "polynomial", "previous")


def _random(name, rows: int, width: int, seed: int) -> np.ndarray:
    return np.random.default_rng([seed, int(name)]).standard_normal((rows, width))


def monomials(x: np.ndarray, m: int) -> np.ndarray:
    r"""The first ``m`` monomials of the coordinates ``x`` (``(rows, dim)``, centred and scaled
    to :math:`[-1, 1]` on the rows given): :math:`1`, the multilinear ones by degree
    (:math:`x, y, z, xy, xz, yz, xyz`), then :math:`x^2, y^2, \dots` and the rest of degree 3
    (:math:`x^2y, xy^2, \dots`)."""
    lo, hi = x.min(axis=0), x.max(axis=0)
    t = (x - (lo + hi) / 2) / np.where(hi > lo, (hi - lo) / 2, 1.0)
    dim = x.shape[1]
    powers = [p for degree in range(4) for p in np.ndindex(*(degree + 1,) * dim)
              if sum(p) == degree]
    # multilinear before the rest of each degree: Q1 before the quadratic ones
    powers.sort(key=lambda p: (max(p) > 1, sum(p)))
    if m > len(powers):
        raise ValueError(f"{m} polynomial start vectors asked for, {len(powers)} monomials of "
                         f"degree <= 3 in {dim}D")
    return np.stack([np.prod(t ** np.asarray(p), axis=1) for p in powers[:m]], axis=1)


def start_vectors(model: LocalCoarseNet, batch: PatchBatch, start: str = "network",
                  seed: int = 0, coordinates=None, previous=None) -> torch.Tensor:
    """The stacked start vectors, without gradients (``start`` one of :data:`STARTS`): the
    network's; ``random`` ones drawn per subdomain from ``seed`` and its global id (the same on
    any number of ranks); the :func:`monomials` of ``coordinates`` (one ``(rows, dim)`` array
    per subdomain); or ``previous`` (one array or ``None`` per subdomain: the network's vectors
    stand in for ``None``, seeded random columns for the missing ones)."""
    width = model.config["vectors"]
    if not len(batch):
        return torch.zeros((0, width), dtype=torch.float64)
    if start == "random":
        return torch.from_numpy(np.concatenate([_random(i, m, width, seed)
                                                for i, m in zip(batch.names, batch.sizes)]))
    if start == "polynomial":
        return torch.from_numpy(np.concatenate([monomials(x, width) for x in coordinates]))
    with torch.no_grad():
        X = model(batch)
    if start != "previous":
        return X
    out = []
    for name, x, V in zip(batch.names, batch.split(X), previous):
        if V is None:
            out.append(x)
        else:
            out.append(torch.from_numpy(np.hstack([V[:, :width], _random(
                name, len(V), width - min(V.shape[1], width), seed)])))
    return torch.cat(out)


def input_statistics(batch: PatchBatch) -> dict:
    r"""What the set-up compares with the training data: subdomain sizes and the local contrast
    :math:`\log_{10}(\max a_{kk}/\min a_{kk})`."""
    contrast = [float(np.log10(d.max() / d.min())) for d in batch.split(batch.AN.diagonal())]
    return {"size_min": min(batch.sizes, default=0), "size_max": max(batch.sizes, default=0),
            "log10_contrast_max": max(contrast, default=0.0)}


# -- files ---------------------------------------------------------------------------------
def _fix(path: str) -> str:
    """What to do when a model's record is missing or does not match the model file."""
    return (f"retrain with python -m ddlearn.learned.coarse.local_training --out {path} --force (the "
            f"command a record carries reproduces its model) or restore {path} and its record "
            f"{path}.json together")


def model_hash(path: str) -> str:
    """SHA-256 of a model file."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save_model(path: str, model: LocalCoarseNet, meta: dict, **extra) -> None:
    """Write the model (config, parameters, training metadata) atomically to ``path`` and its
    record (SHA-256, size in bytes, config, metadata) to ``path + '.json'``."""
    payload = {"format": KIND, "version": FORMAT_VERSION, "config": model.config,
               "state": model.state_dict(), "meta": meta, **extra}
    atomic_write(path, lambda f: torch.save(payload, f))
    record = {"sha256": model_hash(path), "bytes": os.path.getsize(path), "config": model.config,
              **meta}
    atomic_write_json(path + ".json", record)


def _read_record(path: str) -> dict:
    """The record ``path + '.json'`` of the model at ``path``.

    Raises
    ------
    ValueError
        When the record is missing or is not a JSON object with a ``sha256`` entry.
    """
    record_path = path + ".json"
    if not os.path.exists(record_path):
        raise ValueError(f"the learned coarse-space model {path} has no record {record_path} "
                         f"(its SHA-256 and training settings), so it cannot be verified: "
                         f"{_fix(path)}")
    try:
        with open(record_path) as f:
            record = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"the record {record_path} of the learned coarse-space model {path} is "
                         f"not readable JSON ({e}): {_fix(path)}") from e
    if not isinstance(record, dict) or not isinstance(record.get("sha256"), str):
        raise ValueError(f"the record {record_path} of the learned coarse-space model {path} "
                         f"has no SHA-256: {_fix(path)}")
    return record


def update_record(path: str, **entries) -> None:
    """Add ``entries`` to the model's record ``path + '.json'`` (atomically; the model file and
    its hash are unchanged)."""
    record = _read_record(path)
    record.update(entries)
    atomic_write_json(path + ".json", record)


def load_model(path: str):
    """``(model, meta, extra)`` from ``path``, after checking the file against its record.

    The SHA-256 (and size) recorded in ``path + '.json'`` is checked before the file is read
    as a torch payload: a model without its record, or one that was modified or truncated,
    is never loaded.

    Raises
    ------
    FileNotFoundError
        When there is no file at ``path``.
    ValueError
        When the record is missing or unreadable, the file does not match the recorded
        SHA-256 (modified or truncated), or it is not a learned coarse-space model of this
        format version; the message names the file and how to fix it.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(f"no learned coarse-space model at {path}")
    record = _read_record(path)
    size, recorded_size = os.path.getsize(path), record.get("bytes")
    if recorded_size is not None and size != recorded_size:
        raise ValueError(f"{path} does not match the SHA-256 recorded in {path}.json: it has "
                         f"{size} bytes, the record says {recorded_size} (the file was "
                         f"truncated or modified): {_fix(path)}")
    if record["sha256"] != model_hash(path):
        raise ValueError(f"{path} does not match the SHA-256 recorded in {path}.json: the "
                         f"file was modified or truncated: {_fix(path)}")
    payload = read_payload(path, KIND, FORMAT_VERSION, "learned coarse-space model")
    config = dict(payload["config"])
    config.pop("kind")
    model = LocalCoarseNet(**config)
    model.load_state_dict(payload["state"])
    extra = {k: v for k, v in payload.items()
             if k not in ("format", "version", "config", "state", "meta")}
    return model, payload["meta"], extra


def max_row_entries(A: sp.spmatrix) -> int:
    """The most stored entries of a row of ``A``: the stencil a model was trained on (5 for
    the 2D 5-point, 7 for the 3D 7-point matrices)."""
    A = sp.csr_matrix(A)
    return int(np.diff(A.indptr).max(initial=0))


def serial_basis(A: sp.spmatrix, subdomains, weights, model: LocalCoarseNet, k: int,
                 steps: int, rights=None) -> sp.csr_matrix:
    r"""Serial construction of the learned coarse vectors :math:`[R_i^TD_iV_i]_i` of a scipy
    matrix on the overlapping sets ``subdomains`` with weights ``weights`` and the pencil's
    right-hand matrices ``rights`` (:class:`PatchBatch`; the reference the distributed PC is
    tested against; the shipped model's recorded check)."""
    batch = PatchBatch([neumann_matrix(A, I) for I in subdomains], list(weights), rights=rights)
    rows, cols, vals, offset = [], [], [], 0
    for I, D, (_, V) in zip(subdomains, weights, refine(batch, start_vectors(model, batch),
                                                         steps, k)):
        rows.append(np.repeat(I, V.shape[1]))
        cols.append(np.tile(np.arange(offset, offset + V.shape[1]), len(I)))
        vals.append((D[:, None] * V).ravel())
        offset += V.shape[1]
    return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                         shape=(A.shape[0], offset))


# -- the coarse space on a distributed matrix ----------------------------------------------
def check_inputs(comm, model_meta: dict, stats: dict, overlap: int) -> list[str]:
    """Refuse (on every rank) subdomains of another overlap or a local resolution more than
    2x away from the training data's; return warnings for inputs outside the trained contrast
    range (the preconditioner stays SPD and converges, only less well)."""
    trained = model_meta["train_config"]
    span = model_meta.get("input_statistics", {})
    mpi = comm.tompi4py()
    lo = mpi.allreduce(stats["size_min"] or np.iinfo(np.int64).max, op=MPI.MIN)
    hi = mpi.allreduce(stats["size_max"], op=MPI.MAX)
    collective_check(comm, overlap == trained["overlap"],
                     f"the learned coarse-space model was trained with overlap "
                     f"{trained['overlap']}, not {overlap}: use -ddlearn_overlap "
                     f"{trained['overlap']} or train a model for this overlap")
    size_lo, size_hi = span.get("size_min", lo), span.get("size_max", hi)
    collective_check(comm, lo >= size_lo / 2 and hi <= 2 * size_hi,
                     f"subdomains of {lo}..{hi} unknowns, but the learned coarse-space model was "
                     f"trained on {size_lo}..{size_hi}: choose -ddlearn_subdomains so that the "
                     f"local resolution matches, or train a model for it")
    contrast = mpi.allreduce(stats["log10_contrast_max"], op=MPI.MAX)
    trained_contrast = span.get("log10_contrast_max", np.inf)
    if contrast > trained_contrast + 1:
        return [f"local contrast 1e{contrast:.1f} is beyond the trained 1e{trained_contrast:.1f}: "
                f"the learned coarse space stays SPD but may need more iterations"]
    return []


#: the a-posteriori check's default tolerance on the last step's change :func:`refine_checked`
#: (calibrated in the module docstring of :mod:`.learned`)
CHANGE_TOL = 1.0
#: block Krylov steps of the refinement at set-up (measured in :mod:`.learned`)
SERVE_STEPS = 3


@dataclass
class Serving:
    r"""How the learned coarse space is built at set-up: ``k`` vectors per subdomain at most,
    ``steps`` block Krylov steps from ``start`` (:data:`STARTS`) on ``pencil``
    (``dirichlet`` or ``neumann``, as the spectral space's); with ``threshold`` :math:`\tau >
    0` only the Ritz pairs with :math:`\tilde\lambda < \tau` are kept; a subdomain whose last
    step changed its Ritz values by more than ``tol`` (:func:`refine_checked`) is refined again
    with twice the steps and, if still above, solved by the eigensolver (SLEPc)."""

    k: int
    steps: int
    start: str = "network"
    pencil: str = "dirichlet"
    threshold: float = 0.0
    tol: float = CHANGE_TOL
    seed: int = 0


def learned_entries(A: PETSc.Mat, subdomains, model: LocalCoarseNet, serving: Serving,
                    auxiliary=None, coordinates=None, previous=None):
    r"""This rank's entries of the learned coarse vectors :math:`R_i^TD_iV_i` (on the user's
    ``auxiliary`` Neumann matrices when given, else the algebraic ones; built as ``serving``
    says; ``coordinates``: per subdomain its rows' coordinates, for the ``polynomial`` start;
    ``previous``: per subdomain the last set-up's vectors or ``None``, for the ``previous``
    start). Returns ``(vectors, statistics, info, refined)``: the coarse vectors, this rank's
    input statistics, ``info`` (the timing split ``factor_s, forward_s, refine_s, check_s`` and
    the a-posteriori check's counts ``more_steps, eigensolves`` and largest last-step change
    ``change_max`` after it, this rank's) and ``refined = {subdomain id: V_i}`` (collective)."""
    comm = A.getComm()
    clock = time.perf_counter()
    blocks = dirichlet_blocks(A, subdomains)
    ANs = neumann_matrices(A, subdomains, auxiliary, "the learned coarse space", blocks)
    rights = blocks if serving.pencil == "dirichlet" else None
    try:
        batch, error = PatchBatch(ANs, subdomains.weights, subdomains.ids, rights=rights), None
    except (ValueError, RuntimeError) as e:  # RuntimeError: splu of a singular matrix
        batch, error = None, str(e)
    collective_check(comm, error is None, f"the learned coarse space cannot be built: {error}")
    factor_s = time.perf_counter() - clock
    X = start_vectors(model, batch, serving.start, serving.seed, coordinates, previous)
    forward_s = time.perf_counter() - clock - factor_s
    pairs, change = refine_checked(batch, X, serving.steps, serving.k)
    refine_s = time.perf_counter() - clock - factor_s - forward_s
    more, solved, problems = 0, 0, []
    bad = np.flatnonzero(change > serving.tol)
    if len(bad):
        # the same start with twice the steps on the subdomains that failed, then the eigensolve
        more = len(bad)
        again = PatchBatch([ANs[j] for j in bad], [subdomains.weights[j] for j in bad],
                           [batch.names[j] for j in bad],
                           rights=None if rights is None else [rights[j] for j in bad])
        second, still = refine_checked(again, torch.cat([batch.split(X)[j] for j in bad]),
                                       2 * serving.steps, serving.k)
        for j, pair, c in zip(bad, second, still):
            pairs[j], change[j] = pair, c
            if c > serving.tol:
                try:
                    pairs[j] = robust_local_eigenvectors(
                        ANs[j], subdomains.weights[j], SpectralSettings(serving.k),
                        "ddlearn_learned_eps_", ANs[j] if rights is None else rights[j])[:2]
                except RuntimeError as e:
                    problems.append(f"subdomain {int(batch.names[j])}: {e}")
                change[j] = 0.0
                solved += 1
    # the fallback failing on one rank stops every rank, never leaves the others waiting
    collective_check(comm, not problems, "the learned coarse space's fallback eigensolve "
                     "failed on " + "; ".join(problems) + ": raise -ddlearn_learned_tol or "
                     "-ddlearn_learned_steps, or use -ddlearn_coarse_space spectral")
    if serving.threshold > 0:
        pairs = [(lam[lam < serving.threshold], V[:, lam < serving.threshold])
                 for lam, V in pairs]
    check_s = time.perf_counter() - clock - factor_s - forward_s - refine_s
    found = {int(i): (I, D, V) for i, I, D, (_, V) in
             zip(subdomains.ids, subdomains.overlapping, subdomains.weights, pairs)}
    info = {"factor_s": factor_s, "forward_s": forward_s, "refine_s": refine_s,
            "check_s": check_s, "more_steps": more, "eigensolves": solved,
            "change_max": float(change.max(initial=0.0)),
            "kept_min": min((V.shape[1] for _, V in pairs), default=serving.k),
            "kept_max": max((V.shape[1] for _, V in pairs), default=0)}
    refined = {i: V for i, (_, _, V) in found.items()}
    return (subdomain_columns(comm, subdomains.N, found), input_statistics(batch), info,
            refined)
