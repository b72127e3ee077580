r"""``schwarz_attention``: the coarse space of a Schwarz-attention network trained once on the
coefficient families, served on matrices it never saw with one forward pass.

.. math::

    M^{-1} = \sum_i R_i^TA_i^{-1}R_i + \Phi_\theta(\Phi_\theta^TA\Phi_\theta)^{-1}\Phi_\theta^T,
    \qquad \Phi_\theta = [R_i^TD_iV_i]_i,\quad V_i = \mathrm{orth}[\mathbf 1, W_i(\theta)],

:math:`W_i` the ``k - 1`` vectors of subdomain :math:`i` from
:class:`~ddlearn.nn.subdomain_basis.SubdomainBasisNet` on the tokens of
:mod:`.subdomain_tokens` (the blocks :math:`A_i` the one-level part holds, :math:`D_i`, the
coordinates if the model reads them): attention within each subdomain and among all
subdomains' summaries. SPD for every weight and input (the coarse matrix is Galerkin), linear
in the residual. The set-up is the forward pass, the Galerkin product and the coarse
factorisation, on top of the local factorisations ASM makes anyway: no eigensolve, no Neumann
matrix, no Krylov refinement. Each rank computes its own subdomains' vectors; what crosses
ranks is one allreduce of ``[N, width]`` per block (the subdomains' summaries). A subdomain
whose ``[1, W_i]`` comes out rank deficient keeps the constant alone (the partition of unity)
and ``-ksp_view`` counts it.

Training: :mod:`.attention_training` (the loss: :mod:`.spectrum`, the smallest eigenvalues of
the preconditioned operator). Options (``-<prefix>ddlearn_schwarz_attention_``): ``model
FILE`` (default the model shipped for the matrix's dimension).
"""
from __future__ import annotations

import os
import time

import numpy as np
import scipy.sparse as sp
import torch
from mpi4py import MPI
from petsc4py import PETSc

from ...classical.coarse_space import CoarseInput, CoarseSpace, CoarseVectors, subdomain_columns
from ...classical.neumann import dirichlet_blocks
from ...decomposition.collective import collective_check
from ...nn.subdomain_basis import KIND
from .model_file import load_model
from .spectrum import orthonormal_bases
from .subdomain_tokens import subdomain_tokens, unusable_block

__all__ = ["SchwarzAttentionCoarse", "PRETRAINED_ATTENTION", "subdomain_vectors",
           "serial_basis", "SIZE_FACTOR"]

_HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pretrained")
#: the models shipped with ddlearn, by dimension
PRETRAINED_ATTENTION = {2: os.path.join(_HERE, "schwarz_attention2d.pt"),
                        3: os.path.join(_HERE, "schwarz_attention3d.pt")}
#: how far a subdomain's size may lie from the training sizes (a factor either way)
SIZE_FACTOR = 4.0


def subdomain_vectors(model, blocks, weights, coordinates=None, ids=None, N=None, comm=None,
                      pieces: bool = False):
    r"""``(V, fallback)``: :math:`V_i` of the subdomains ``blocks`` (:math:`A_i`) with weights
    ``weights`` (and ``coordinates``, one array per subdomain, when the model reads them;
    ``pieces``: the model reads the coefficient pieces' features),
    global numbers ``ids`` among ``N`` on the ranks of ``comm`` (``None``: all here); the
    subdomains that fell back to the constant (:func:`~.spectrum.orthonormal_bases`)."""
    X = torch.as_tensor(subdomain_tokens(blocks, weights, coordinates, pieces=pieces))
    sizes = [b.shape[0] for b in blocks]
    model.set_subdomains(sizes, ids, N, comm)
    with torch.no_grad():
        W = torch.split(model(X), sizes)
    V, fallback = orthonormal_bases(list(W))
    return [v.numpy() for v in V], fallback


def serial_basis(model, A, sets, weights, coordinates=None, pieces: bool = False):
    r"""``(Phi, fallback)``: :math:`\Phi` of the scipy matrix ``A`` on the sets ``sets`` with
    weights ``weights`` (all subdomains on this process; ``coordinates``: the rows'
    coordinates, ``(n, dim)``, for a model that reads them; ``pieces``: for a model that reads
    the coefficient pieces), as a sparse ``(n, n0)``."""
    A = sp.csr_matrix(A)
    blocks = [A[I][:, I].tocsr() for I in sets]
    coords = None if coordinates is None else [coordinates[I] for I in sets]
    V, fallback = subdomain_vectors(model, blocks, weights, coords, pieces=pieces)
    rows = np.concatenate([np.repeat(I, v.shape[1]) for I, v in zip(sets, V)])
    offsets = np.cumsum([0] + [v.shape[1] for v in V])
    cols = np.concatenate([np.tile(np.arange(o, o + v.shape[1]), len(I))
                           for I, v, o in zip(sets, V, offsets)])
    vals = np.concatenate([(D[:, None] * v).ravel() for D, v in zip(weights, V)])
    return sp.csr_matrix((vals, (rows, cols)), shape=(A.shape[0], offsets[-1])), fallback


class SchwarzAttentionCoarse(CoarseSpace):
    name = "schwarz_attention"
    value_dependent = True
    supports_blocks = False

    def __init__(self, model: str | None = None):
        super().__init__()
        self.model = model
        self._loaded = None  # (path, model, meta)

    def set_from_options(self, prefix: str) -> None:
        self.model = self.options(prefix).getString("model", self.model or "") or None

    def _load(self, comm, dim: int, prefix: str):
        path = self.model or PRETRAINED_ATTENTION.get(dim, PRETRAINED_ATTENTION[2])
        if self._loaded is not None and self._loaded[0] == path:
            return self._loaded
        option = f"-{prefix}{self.name}_model"
        collective_check(comm, os.path.exists(path),
                         f"no Schwarz-attention coarse-space model at {path}: give {option} "
                         f"FILE (train one with python -m "
                         f"ddlearn.learned.coarse.attention_training --dim {dim})")
        try:
            loaded, error = load_model(path, KIND), None
        except (ValueError, OSError) as e:
            loaded, error = None, f"{option}: {e}"
        collective_check(comm, error is None, str(error))
        self._loaded = (path, *loaded[:2])
        return self._loaded

    def _check(self, inp: CoarseInput, path: str, meta: dict, dim: int | None) -> None:
        """Refuse, on every rank, a model whose training does not fit this matrix."""
        comm, s = inp.comm, inp.subdomains
        cfg, name = meta["train_config"], os.path.basename(path)
        option = f"-{inp.prefix}{self.name}_model"
        fix = (f"give {option} a model trained for this setting (python -m "
               f"ddlearn.learned.coarse.attention_training --dim D --overlap O --n n --N N)")
        collective_check(comm, dim is None or dim == cfg["dim"],
                         f"{option} {name} was trained in {cfg['dim']}D and this matrix is "
                         f"{dim}D: {fix}")
        collective_check(comm, s.overlap == cfg["overlap"],
                         f"{option} {name} was trained with overlap {cfg['overlap']} and the PC "
                         f"uses -{inp.prefix}overlap {s.overlap}: set that overlap or {fix}")
        lo, hi = meta["sizes"]
        median = float(np.median(s.sizes))
        collective_check(comm, lo / SIZE_FACTOR <= median <= hi * SIZE_FACTOR,
                         f"{option} {name} was trained on subdomains of {lo}..{hi} rows and "
                         f"these have {median:.0f} (median), {median / (lo if median < lo else hi):.2g} "
                         f"x the training's: choose -{inp.prefix}subdomains so that the "
                         f"subdomains have about {int(np.sqrt(lo * hi))} rows, or {fix}")
        if cfg.get("coordinates"):
            collective_check(comm, inp.coordinates is not None,
                             f"{option} {name} reads the coordinates and the PC has none: give "
                             f"them (PCSetCoordinates, ddlearn.pc.set_coordinates) or a model "
                             f"trained without them (python -m "
                             f"ddlearn.learned.coarse.attention_training without "
                             f"--coordinates)")

    def vectors(self, inp: CoarseInput) -> CoarseVectors:
        comm, s = inp.comm, inp.subdomains
        mpi = comm.tompi4py()
        collective_check(comm, inp.block_size == 1,
                         f"the Schwarz-attention coarse space was trained on scalar diffusion "
                         f"(block size 1), and this matrix has block size {inp.block_size}: use "
                         f"-{inp.prefix}coarse_space spectral, gdsw, rgdsw or nicolaides for "
                         f"vector problems")
        dims = {d for d in mpi.allgather(None if inp.coordinates is None
                                         else int(inp.coordinates.shape[1])) if d is not None}
        dim = dims.pop() if dims else None
        path, model, meta = self._load(comm, dim or 2, inp.prefix)
        self._check(inp, path, meta, dim)
        t0 = time.perf_counter()
        lent = inp.local_blocks
        blocks = ([lent.csr(k) for k in range(len(lent))]
                  if lent is not None and len(lent) == len(s.overlapping)
                  else dirichlet_blocks(inp.A, s))
        collective_check(comm, unusable_block(blocks) is None,
                         "the matrix has non-finite entries or a non-positive diagonal in a "
                         "subdomain: the Schwarz-attention coarse space needs an SPD matrix with "
                         "a positive diagonal (check the coefficient for NaN or negative values)")
        coords = (s.gather_columns(inp.A, np.asarray(inp.coordinates, dtype=np.float64))
                  if meta["train_config"].get("coordinates") else None)
        V, fallback = subdomain_vectors(model, blocks, s.weights, coords, s.ids, s.N, mpi,
                                        bool(meta["train_config"].get("pieces")))
        forward_s = mpi.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        found = {int(i): (I, D, v) for i, I, D, v in zip(s.ids, s.overlapping, s.weights, V)}
        out = subdomain_columns(comm, s.N, found)
        self.found = {"model": path, "k": int(model.config["vectors"]) + 1, "vectors": out.n0,
                      "subdomains": s.N, "fallback": mpi.allreduce(len(fallback)),
                      "forward_s": forward_s}
        return out

    def view(self, viewer: PETSc.Viewer) -> None:
        m = self.found
        if not m:
            return super().view(viewer)
        viewer.printfASCII(f"  Schwarz-attention coarse space (model "
                           f"{os.path.basename(m['model'])}): k = {m['k']} vectors per "
                           f"subdomain, n0 = {m['vectors']}, forward pass {m['forward_s']:.3g} s; "
                           f"{m['fallback']} of {m['subdomains']} subdomains fell back to the "
                           f"partition of unity (rank-deficient vectors)\n")
