r"""How the learned coarse space is built at set-up (:class:`Serving`), on a distributed PETSc
matrix (:func:`learned_entries`) or serially on a scipy one (:func:`serial_basis`, the
reference the PC is tested against and the shipped models' recorded check), and which inputs a
model refuses (:func:`check_inputs`).

Per subdomain: the start vectors (:mod:`.starts`), ``steps`` block Krylov steps of the
refinement (:mod:`.refinement`), then the a-posteriori check on the last step's change of the
Ritz values :math:`\Delta_i` (:func:`~.refinement.refine_checked`): a subdomain with
:math:`\Delta_i >` ``tol`` is refined again with twice the steps from the same start and, if
still above, solved by the eigensolver (SLEPc, then ARPACK) on the same pencil. The coarse
vectors are :math:`R_i^TD_iV_i`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
from mpi4py import MPI
from petsc4py import PETSc

from ...classical.coarse.spectral import SpectralSettings, robust_local_eigenvectors
from ...classical.coarse_space import subdomain_columns
from ...classical.neumann import dirichlet_blocks, neumann_matrices
from ...classical.reference import neumann_matrix
from ...decomposition.collective import collective_check
from ...decomposition.timing import Timer
from .network import LocalCoarseNet
from .patches import PatchBatch, input_statistics
from .refinement import refine, refine_checked
from .starts import start_vectors

__all__ = ["CHANGE_TOL", "SERVE_STEPS", "Serving", "serial_basis", "check_inputs",
           "learned_entries"]


#: the a-posteriori check's default tolerance on the last step's change
#: (:func:`~.refinement.refine_checked`; calibrated in the module docstring of :mod:`.learned`)
CHANGE_TOL = 1.0
#: block Krylov steps of the refinement at set-up (measured in :mod:`.learned`)
SERVE_STEPS = 3


@dataclass
class Serving:
    r"""How the learned coarse space is built at set-up: ``k`` vectors per subdomain at most,
    ``steps`` block Krylov steps from ``start`` (:data:`~.starts.STARTS`) on ``pencil``
    (``dirichlet`` or ``neumann``, as the spectral space's); with ``threshold`` :math:`\tau >
    0` only the Ritz pairs with :math:`\tilde\lambda < \tau` are kept; a subdomain whose last
    step changed its Ritz values by more than ``tol`` (:func:`~.refinement.refine_checked`)
    is refined again with twice the steps and, if still above, solved by the eigensolver
    (SLEPc, options ``-{prefix}learned_eps_eps_*``). ``prefix``: the PC's options prefix +
    ``ddlearn_``, with which messages name the options."""

    k: int
    steps: int
    start: str = "network"
    pencil: str = "dirichlet"
    threshold: float = 0.0
    tol: float = CHANGE_TOL
    seed: int = 0
    prefix: str = "ddlearn_"


def serial_basis(A: sp.spmatrix, subdomains, weights, model: LocalCoarseNet, k: int,
                 steps: int, rights=None) -> sp.csr_matrix:
    r"""Serial construction of the learned coarse vectors :math:`[R_i^TD_iV_i]_i` of a scipy
    matrix on the overlapping sets ``subdomains`` with weights ``weights`` and the pencil's
    right-hand matrices ``rights`` (:class:`~.patches.PatchBatch`; the reference the
    distributed PC is tested against; the shipped model's recorded check)."""
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


def check_inputs(comm, model_meta: dict, stats: dict, overlap: int,
                 prefix: str = "ddlearn_") -> list[str]:
    """Refuse (on every rank) subdomains of another overlap or a local resolution more than
    2x away from the training data's; return warnings for inputs outside the trained contrast
    range (the preconditioner stays SPD and converges, only less well). ``prefix``: the PC's
    options prefix + ``ddlearn_``, with which the messages name the options."""
    trained = model_meta["train_config"]
    span = model_meta.get("input_statistics", {})
    mpi = comm.tompi4py()
    lo = mpi.allreduce(stats["size_min"] or np.iinfo(np.int64).max, op=MPI.MIN)
    hi = mpi.allreduce(stats["size_max"], op=MPI.MAX)
    collective_check(comm, overlap == trained["overlap"],
                     f"the learned coarse-space model was trained with overlap "
                     f"{trained['overlap']}, not {overlap}: use -{prefix}overlap "
                     f"{trained['overlap']} or train a model for this overlap")
    size_lo, size_hi = span.get("size_min", lo), span.get("size_max", hi)
    collective_check(comm, lo >= size_lo / 2 and hi <= 2 * size_hi,
                     f"subdomains of {lo}..{hi} unknowns, but the learned coarse-space model was "
                     f"trained on {size_lo}..{size_hi}: choose -{prefix}subdomains so that the "
                     f"local resolution matches, or train a model for it")
    contrast = mpi.allreduce(stats["log10_contrast_max"], op=MPI.MAX)
    trained_contrast = span.get("log10_contrast_max", np.inf)
    if contrast > trained_contrast + 1:
        return [f"local contrast 1e{contrast:.1f} is beyond the trained 1e{trained_contrast:.1f}: "
                f"the learned coarse space stays SPD but may need more iterations"]
    return []


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
    timer = Timer()
    blocks = dirichlet_blocks(A, subdomains)
    ANs = neumann_matrices(A, subdomains, auxiliary, "the learned coarse space", blocks)
    rights = blocks if serving.pencil == "dirichlet" else None
    try:
        batch, error = PatchBatch(ANs, subdomains.weights, subdomains.ids, rights=rights), None
    except (ValueError, RuntimeError) as e:  # RuntimeError: splu of a singular matrix
        batch, error = None, str(e)
    collective_check(comm, error is None, f"the learned coarse space cannot be built: {error}")
    timer.lap("factor_s")
    X = start_vectors(model, batch, serving.start, serving.seed, coordinates, previous)
    timer.lap("forward_s")
    pairs, change = refine_checked(batch, X, serving.steps, serving.k)
    timer.lap("refine_s")
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
                        f"{serving.prefix}learned_eps_",
                        ANs[j] if rights is None else rights[j])[:2]
                except RuntimeError as e:
                    problems.append(f"subdomain {int(batch.names[j])}: {e}")
                change[j] = 0.0
                solved += 1
    # the fallback failing on one rank stops every rank, never leaves the others waiting
    p = serving.prefix
    collective_check(comm, not problems, "the learned coarse space's fallback eigensolve "
                     "failed on " + "; ".join(problems) + f": raise -{p}learned_tol or "
                     f"-{p}learned_steps, or use -{p}coarse_space spectral")
    if serving.threshold > 0:
        pairs = [(lam[lam < serving.threshold], V[:, lam < serving.threshold])
                 for lam, V in pairs]
    timer.lap("check_s")
    found = {int(i): (I, D, V) for i, I, D, (_, V) in
             zip(subdomains.ids, subdomains.overlapping, subdomains.weights, pairs)}
    info = {**timer.seconds, "more_steps": more, "eigensolves": solved,
            "change_max": float(change.max(initial=0.0)),
            "kept_min": min((V.shape[1] for _, V in pairs), default=serving.k),
            "kept_max": max((V.shape[1] for _, V in pairs), default=0)}
    refined = {i: V for i, (_, _, V) in found.items()}
    return (subdomain_columns(comm, subdomains.N, found), input_statistics(batch), info,
            refined)
