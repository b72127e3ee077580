r"""``learned``: the learned local coarse space: one small network, shared by all subdomains,
that starts the spectral coarse space's eigensolve where it nearly ends.

Per overlapping subdomain :math:`i` the spectral coarse space
(:mod:`ddlearn.classical.coarse.spectral`) wants the :math:`k` smallest eigenpairs of
:math:`A_i^N v = \lambda D_iA_i^RD_i v` (:math:`A_i^R`: the Dirichlet block :math:`A_i` of the
default ``dirichlet`` pencil, or :math:`A_i^N`). Here a network :math:`f_\theta` maps the
subdomain's *local matrix* (nothing else: a PC always has it) to :math:`m` start vectors, and
one cheap, convergent refinement finishes the job:

.. math::

    X_i = f_\theta(A_i^N, D_i) \in \mathbb R^{n_i\times m},\qquad
    V_i = \text{the } k \text{ smallest Ritz vectors on }
    \mathrm{span}\{X_i,\ TX_i,\ \dots,\ T^sX_i\},\quad T = M_i^{-1}D_iA_i^RD_i,

with :math:`M_i = A_i^N+\varepsilon\,|\mathrm{diag}A_i^N|` (one sparse factorisation per
subdomain, the same pencil as the spectral space). The coarse vectors are :math:`R_i^TD_iV_i`
and the coarse operator is Galerkin, so the preconditioner is SPD for every :math:`\theta` and
every input; the network only decides how good the subspace is.

*Why a start and not the vectors*: coarse vectors have to be accurate in the energy of
:math:`A` (a contrast of :math:`10^6` amplifies any error in a channel); 10 % white noise on the
exact eigenvectors takes CG on a 255² channels field from 26 back to 68 iterations (the hats'
count). One block Krylov step on a good start removes that.

The pieces: the subdomains and the network's input features (:mod:`.patches`), the network
(:mod:`.network`), the start vectors (:mod:`.starts`), the refinement and the training loss
(:mod:`.refinement`), the model file and its record (:mod:`.model_file`), the set-up with its
a-posteriori check (:mod:`.serving`); the training: :mod:`.local_training`.

Options (``-<prefix>ddlearn_learned_``):

- ``model FILE``: default the model shipped for the matrix's dimension (2D or 3D: the
  coordinates' dimension, else the stencil, 5 or 7 entries per row);
- ``nev k`` (vectors per subdomain at most, default the model's), ``steps s`` (block Krylov
  steps, default :data:`~.serving.SERVE_STEPS` = 3);
- ``pencil {dirichlet,neumann}`` (default dirichlet, the spectral space's);
- ``start {network,random,polynomial,previous}``: the network's vectors (default), or the
  classical starts fed to the same refinement (seeded random vectors; the coordinates'
  monomials, Nicolaides' constant and the Q1 hats' multilinear span first; the previous
  set-up's vectors of the same subdomain, for a loop over fields: a subdomain whose index set
  changed, or the first set-up, starts from the network, and the view says how many did);
- ``threshold tau`` (> 0: keep only the Ritz pairs with :math:`\tilde\lambda < \tau`, so that
  :math:`n_0` adapts, as ``-ddlearn_spectral_threshold``; 0: all ``k``);
- ``tol t`` (the a-posteriori check, default 1: a subdomain whose last Krylov step changed its
  Ritz values by more than ``t`` units of the largest kept one,
  :func:`~ddlearn.learned.coarse.refinement.refine_checked`, is refined again with twice the
  steps, and if still above, solved by SLEPc; counted in the view).

*Why these defaults* (``benchmarks/refinement_check.py``: 255², N = 64, contrast 1e6, an unseen
field per family, Dirichlet pencil; loss = :func:`~.refinement.ritz_loss` against the exact
eigenvalues, what CG pays for):

- three steps: the network's median loss falls from 0.09–0.20 (two steps) to 0.005–0.008
  (four: 1e-4);
- the check on the last step's change, not on residuals: from random vectors three steps leave
  a median loss of 0.4–2.2 (missed channel modes), yet no residual threshold separates those
  subdomains from the network's (its largest scaled residual, 0.76, is above the random
  start's median, 0.25–0.46: a residual certifies the pairs found, never the ones missed),
  while the last step's change does: at most 0.25–0.88 from the network, a median of
  1.3–1.5 from random vectors; with tol 1 the network's subdomains pass and most random ones
  get more steps.
"""
from __future__ import annotations

import os

import numpy as np
from mpi4py import MPI
from petsc4py import PETSc

from ...classical.coarse_space import CoarseInput, CoarseSpace, CoarseVectors
from ...classical.coarse.spectral import PENCILS
from ...decomposition.collective import collective_check
from ...decomposition.subdomains import rows_fingerprint
from .model_file import PRETRAINED, load_model
from .serving import CHANGE_TOL, SERVE_STEPS, Serving, check_inputs, learned_entries
from .starts import STARTS

__all__ = ["Learned", "PRETRAINED_BY_DIM", "STENCIL_DIM"]

#: the models shipped with ddlearn, by dimension
PRETRAINED_BY_DIM = {2: PRETRAINED, 3: os.path.join(os.path.dirname(PRETRAINED),
                                                    "local_coarse3d.pt")}
#: the dimension of a finite-difference stencil's entries per row
STENCIL_DIM = {5: 2, 7: 3}


def _max_row_entries(A: PETSc.Mat) -> int:
    indptr = A.getValuesCSR()[0]
    mine = int(np.diff(indptr).max(initial=0))
    return A.getComm().tompi4py().allreduce(mine, op=MPI.MAX)


class Learned(CoarseSpace):
    name = "learned"
    value_dependent = True

    def __init__(self, model: str | None = None, nev: int | None = None,
                 steps: int | None = None, start: str = "network", pencil: str = "dirichlet",
                 threshold: float = 0.0, tol: float = CHANGE_TOL):
        super().__init__()
        self.model, self.nev, self.steps, self.start = model, nev, steps, start
        self.pencil, self.threshold, self.tol = pencil, threshold, tol
        self._loaded = None  # (path, model, meta)
        self._previous = {}  # subdomain id -> (fingerprint, V): the last set-up's vectors

    def set_from_options(self, prefix: str) -> None:
        opts = self.options(prefix)
        # petsc4py treats a default of None as "required": '' and -1 stand for "not given"
        self.model = opts.getString("model", self.model or "") or None
        self.nev = opts.getInt("nev", self.nev or 0) or None
        steps = opts.getInt("steps", -1 if self.steps is None else self.steps)
        self.steps = None if steps < 0 else steps
        self.start = opts.getString("start", self.start)
        self.pencil = opts.getString("pencil", self.pencil)
        self.threshold = opts.getReal("threshold", self.threshold)
        self.tol = opts.getReal("tol", self.tol)

    def _dimension(self, inp: CoarseInput) -> tuple[int, int]:
        """``(dim, stencil)`` of the matrix: the coordinates' dimension (else the stencil's) and
        the most entries of a row (collective)."""
        comm = inp.comm
        stencil = _max_row_entries(inp.A)
        mpi = comm.tompi4py()
        dims = {d for d in mpi.allgather(None if inp.coordinates is None
                                         else int(inp.coordinates.shape[1])) if d is not None}
        dim = dims.pop() if dims else STENCIL_DIM.get(stencil)
        collective_check(comm, dim is not None or self.model,
                         f"the learned coarse space cannot tell this matrix's dimension: it has "
                         f"up to {stencil} entries per row (no 5- or 7-point stencil) and no "
                         f"coordinates; give the coordinates (ddlearn.pc.set_coordinates) or "
                         f"-{inp.prefix}learned_model FILE")
        return dim, stencil

    def _load(self, comm, dim, prefix: str):
        """The model, read once (every rank reads the file; a bad file fails on every rank);
        ``prefix``: the PC's options prefix + ``ddlearn_``."""
        path = self.model or PRETRAINED_BY_DIM.get(dim, PRETRAINED)
        if self._loaded is not None and self._loaded[0] == path:
            return self._loaded
        collective_check(comm, os.path.exists(path),
                         f"no learned coarse-space model at {path}: give "
                         f"-{prefix}learned_model FILE (train one with python -m "
                         f"ddlearn.learned.coarse.local_training"
                         f"{' --dim 3' if dim == 3 else ''})")
        try:
            loaded, error = load_model(path), None
        except (ValueError, OSError) as e:
            loaded, error = None, str(e)
        collective_check(comm, error is None, str(error))
        self._loaded = (path, *loaded[:2])
        return self._loaded

    def _check(self, comm, path, model, meta, dim, stencil, prefix: str) -> Serving:
        """The settings of this set-up, refused on every rank when they or the model do not fit
        the matrix; messages name the options with ``prefix`` (the PC's + ``ddlearn_``)."""
        own = f"-{prefix}learned_"
        trained = meta["train_config"]
        name = os.path.basename(path)
        trained_dim = trained.get("dim", 2)
        trained_stencil = meta.get("stencil", 2 * trained_dim + 1)
        fix = (f"use the model for this discretisation (the shipped ones serve 5-point 2D and "
               f"7-point 3D matrices) or train one with python -m "
               f"ddlearn.learned.coarse.local_training --dim {dim or 'D'}")
        collective_check(comm, dim is None or dim == trained_dim,
                         f"the learned coarse-space model {name} was trained in {trained_dim}D "
                         f"and this matrix is {dim}D: {fix}")
        collective_check(comm, stencil == trained_stencil,
                         f"the learned coarse-space model {name} was trained on matrices of "
                         f"{trained_stencil} entries per row and this one has up to {stencil}: "
                         f"{fix}")
        for what, value, choices in (("start", self.start, STARTS),
                                     ("pencil", self.pencil, PENCILS)):
            collective_check(comm, value in choices,
                             f"unknown {own}{what} {value!r}; choose one of "
                             f"{', '.join(choices)}")
        collective_check(comm, self.threshold >= 0,
                         f"{own}threshold must be positive (or 0 for 'the nev "
                         f"smallest'), got {self.threshold!r}")
        collective_check(comm, self.tol > 0,
                         f"{own}tol must be positive (the largest change of the "
                         f"Ritz values in the last refinement step a subdomain may keep, in "
                         f"units of its largest one; {CHANGE_TOL:g} by default, a large value "
                         f"switches the fallback off), got {self.tol!r}")
        nev = self.nev or trained["k"]
        steps = SERVE_STEPS if self.steps is None else self.steps
        collective_check(comm, nev <= model.config["vectors"] * (steps + 1),
                         f"{own}nev {nev} exceeds the {model.config['vectors']} x "
                         f"{steps + 1} dimensions of the refinement space: raise "
                         f"{own}steps")
        return Serving(nev, steps, self.start, self.pencil, self.threshold, self.tol,
                       prefix=prefix)

    def _starts(self, inp: CoarseInput):
        """``(coordinates, previous, warm)`` for the ``polynomial`` and ``previous`` starts."""
        s, comm = inp.subdomains, inp.comm
        coordinates = previous = None
        warm = 0
        if self.start == "polynomial":
            collective_check(comm, inp.coordinates is not None,
                             f"-{inp.prefix}learned_start polynomial needs the coordinates "
                             f"of the rows: give them (ddlearn.pc.set_coordinates, "
                             f"PCSetCoordinates) or choose another start")
            coordinates = s.gather_columns(inp.A, np.asarray(inp.coordinates, dtype=np.float64))
        if self.start == "previous":
            previous = []
            for i, I in zip(s.ids, s.overlapping):
                kept = self._previous.get(int(i))
                match = kept is not None and kept[0] == rows_fingerprint(I)
                previous.append(kept[1] if match else None)
                warm += match
        return coordinates, previous, warm

    def vectors(self, inp: CoarseInput) -> CoarseVectors:
        comm = inp.comm
        collective_check(comm, inp.block_size == 1,
                         f"the learned coarse space was trained on scalar diffusion (block size "
                         f"1), and this matrix has block size {inp.block_size}: use "
                         f"-{inp.prefix}coarse_space spectral, gdsw, rgdsw or nicolaides for "
                         f"vector problems")
        dim, stencil = self._dimension(inp)
        path, model, meta = self._load(comm, dim, inp.prefix)
        serving = self._check(comm, path, model, meta, dim, stencil, inp.prefix)
        coordinates, previous, warm = self._starts(inp)
        out, stats, info, refined = learned_entries(inp.A, inp.subdomains, model, serving,
                                                    inp.auxiliary, coordinates, previous)
        if self.start == "previous":
            s = inp.subdomains
            self._previous = {int(i): (rows_fingerprint(I), refined[int(i)])
                              for i, I in zip(s.ids, s.overlapping)}
        warnings = check_inputs(comm, meta, stats, inp.subdomains.overlap, inp.prefix)
        if warnings and comm.getRank() == 0:
            PETSc.Sys.Print("Warning: " + "; ".join(warnings))
        mpi = comm.tompi4py()
        total = mpi.allreduce(len(inp.subdomains.ids))
        self.found = {"model": path, "vectors": out.n0, "nev": serving.k,
                      "steps": serving.steps, "start": self.start, "pencil": self.pencil,
                      "threshold": self.threshold, "tol": self.tol, "warnings": warnings,
                      "subdomains": total,
                      "per_subdomain_min": mpi.allreduce(info.pop("kept_min"), op=MPI.MIN),
                      "per_subdomain_max": mpi.allreduce(info.pop("kept_max"), op=MPI.MAX),
                      "more_steps": mpi.allreduce(info.pop("more_steps")),
                      "eigensolves": mpi.allreduce(info.pop("eigensolves")),
                      **{key: mpi.allreduce(v, op=MPI.MAX) for key, v in info.items()}}
        if self.start == "previous":
            self.found["warm_subdomains"] = mpi.allreduce(warm)
        return out

    def view(self, viewer: PETSc.Viewer) -> None:
        m = self.found
        if not m:
            return super().view(viewer)
        start = m["start"]
        if start == "previous":
            cold = m["subdomains"] - m["warm_subdomains"]
            start = (f"previous ({m['warm_subdomains']} subdomains from the last set-up's "
                     f"vectors, {cold} from the network"
                     + (": new or changed subdomains" if cold else "") + ")")
        viewer.printfASCII(f"  learned coarse space (model {os.path.basename(m['model'])}): "
                           f"{m['vectors']} local vectors ({m['per_subdomain_min']}.."
                           f"{m['per_subdomain_max']} per subdomain, nev {m['nev']}, threshold "
                           f"{m['threshold']:g}), {m['steps']} block Krylov steps on the "
                           f"{m['pencil']} pencil from {start} start vectors\n")
        viewer.printfASCII(f"  a-posteriori check (last step's change of the Ritz values, tol "
                           f"{m['tol']:g}, largest kept {m['change_max']:.2g}): "
                           f"{m['subdomains'] - m['more_steps']} of "
                           f"{m['subdomains']} subdomains passed, {m['more_steps']} refined "
                           f"with {2 * m['steps']} steps, {m['eigensolves']} fell back to the "
                           f"eigensolve\n")
