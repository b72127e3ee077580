r"""Two-level overlapping Schwarz with a pluggable coarse space, for any assembled SPD matrix,
in its own ordering and row distribution:

.. math:: M^{-1} = \sum_i R_i^T A_i^{-1} R_i + \Phi\,(\Phi^TA\Phi)^{-1}\Phi^T.

Select it from the options database (``-<prefix>`` is the PC's options prefix)::

    -pc_type python -pc_python_type ddlearn.pc.TwoLevelSchwarzPC
    -<prefix>ddlearn_coarse_space {none,hats,nicolaides,gdsw,spectral,learned}
                                  default hats with coordinates, nicolaides without
    -<prefix>ddlearn_spectral_nev k          spectral: eigenvectors per subdomain (default 8)
    -<prefix>ddlearn_spectral_threshold tau  spectral: keep only lambda < tau (default 0: all k)
    -<prefix>ddlearn_spectral_with_hats      spectral: add the hats (needs coordinates)
    -<prefix>ddlearn_spectral_eigensolver {slepc,scipy}   (default slepc)
    -<prefix>ddlearn_spectral_eps_...        SLEPc's EPS of every subdomain (e.g. _eps_max_it)
    -<prefix>ddlearn_subdomains N number of subdomains, independent of the ranks (default 4 per rank)
    -<prefix>ddlearn_overlap k    overlap in layers of the matrix graph (default 1)
    -<prefix>ddlearn_partition {boxes,rcb,metis}
                                  default boxes with coordinates, metis (the graph) without
    -<prefix>ddlearn_local_type {basic,restrict}
                                  basic: symmetric, for CG (default); restrict: RAS, GMRES
    -<prefix>ddlearn_model FILE   learned coarse space model (implies coarse space learned);
                                  default: the pretrained model shipped with ddlearn
    -<prefix>ddlearn_learned_nev k        learned: vectors per subdomain (default: the model's)
    -<prefix>ddlearn_learned_steps s      learned: block Krylov refinement steps (default: the
                                          model's serve_steps, 2 for the shipped model)
    -<prefix>ddlearn_learned_with_hats    learned: add the hats (needs coordinates)
    -<prefix>ddlearn_coarse_rank R
    -<prefix>ddlearn_local_...    the one-level PCASM and its blocks (-..._local_sub_pc_type)
    -<prefix>ddlearn_coarse_...   the coarse KSP on the coarse rank (default preonly + Cholesky)

Coordinates (``hats``, ``boxes``, ``rcb``) come from :func:`set_coordinates` on the PC or the
matrix, or from a DM with coordinates on the KSP. ``pc.setCoordinates`` does not reach a Python
PC in petsc4py 3.26 (it is silently ignored), hence the helper. The PC derives its subdomains
itself (:class:`~ddlearn.decomposition.partition.Subdomains`); internal numbering is never the
user's business.

The ``learned`` coarse space is, by default, the pretrained local model of
:mod:`ddlearn.learned.local_coarse` (trained once on coefficient families; it reads each
subdomain's local matrix, so it serves any matrix, ordering and distribution). An *in-situ*
checkpoint (:mod:`ddlearn.learned.basis`, trained on one matrix) carries its own structured decomposition
and is bound to the matrix it was trained for: the PC finds whether the matrix is in the grid's
natural numbering or in ddlearn's subdomain numbering (any row distribution) by the checkpoint's
fingerprint, forms the learned basis :math:`\tilde\Phi` in its internal numbering and maps it
back, and refuses any other matrix on every rank.
"""
from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from mpi4py import MPI
from petsc4py import PETSc

from ..classical.gdsw import gdsw_basis
from ..classical.krylov import check_symmetric, require_symmetric_pc
from ..classical.spectral import SpectralSettings, spectral_entries
from ..classical.timing import Stopwatch
from ..classical.twolevel import TwoLevelSchwarz, matrix_structure
from ..decomposition.coarse import coarse_space
from ..decomposition.collective import collective_check
from ..decomposition.layout import (coarse_basis_matrix, coarse_ranges, distributed_aij,
                                    sequential_aij)
from ..decomposition.partition import PARTITIONERS, Subdomains, gather_matrix, scatter_rows
from ..learned.basis import KIND, describe, distributed_basis, petsc_basis
from ..learned.distributed import DistributedSchwarzAttention
from ..learned.local_coarse import (PRETRAINED, check_inputs, is_model_file, learned_entries,
                                    load_model)

__all__ = ["TwoLevelSchwarzPC", "COARSE_SPACES", "set_coordinates", "get_coordinates",
           "TwoLevel", "two_level"]

COARSE_SPACES = ("none", "hats", "nicolaides", "gdsw", "spectral", "learned")
#: coarse spaces whose basis depends on the matrix values (rebuilt when they change)
VALUE_DEPENDENT = ("gdsw", "spectral", "learned")
LOCAL_TYPES = ("basic", "restrict")
_COORDINATES = "ddlearn_coordinates"


def set_coordinates(obj: PETSc.Object, coords: np.ndarray) -> None:
    """Attach the coordinates of this rank's rows, shape ``(nlocal, dim)``, to a PC or a Mat
    (collective in the sense that every rank calls it for its rows)."""
    coords = np.ascontiguousarray(coords, dtype=np.float64)
    if coords.ndim != 2:
        raise ValueError(f"coordinates must have shape (local rows, dim), got {coords.shape}")
    v = PETSc.Vec().createMPI((coords.size, PETSc.DECIDE), bsize=coords.shape[1],
                              comm=obj.getComm())
    v.setArray(coords.ravel())
    obj.compose(_COORDINATES, v)
    v.destroy()


def get_coordinates(pc: PETSc.PC, P: PETSc.Mat) -> np.ndarray | None:
    """This rank's rows' coordinates from :func:`set_coordinates` on the PC or the matrix, or
    from the PC's DM; ``None`` when there are none."""
    for obj in (pc, P):
        v = obj.query(_COORDINATES)
        if v is not None:
            return v.getArray(readonly=True).reshape(-1, v.getBlockSize()).copy()
    dm = pc.getDM()
    if not dm:  # no DM: petsc4py wraps a null handle
        return None
    c = dm.getCoordinates()
    if not c or c.getSize() == 0:
        return None
    return c.getArray(readonly=True).reshape(-1, dm.getCoordinateDim()).copy()


class TwoLevelSchwarzPC:
    """petsc4py Python PC context: two-level Schwarz with a pluggable coarse space on the
    user's own matrix; see the module docstring for the options.

    The constructor's arguments are the defaults that the options database may override.
    Re-setup follows PETSc: new values in the same matrix refactor the local blocks and the
    coarse matrix and keep partition, overlap and coarse basis; another matrix (or a new
    nonzero structure) rebuilds everything; ``KSPSetReusePreconditioner`` skips both.
    """

    def __init__(self, coarse_space: str | None = None, subdomains: int | None = None,
                 overlap: int = 1, partition: str | None = None, local_type: str = "basic",
                 model: str | None = None, coarse_rank: int = 0,
                 spectral: SpectralSettings | None = None, with_hats: bool = False,
                 learned_nev: int | None = None, learned_steps: int | None = None,
                 learned_with_hats: bool = False):
        self.coarse_space, self.N, self.overlap = coarse_space, subdomains, overlap
        self.partition, self.local_type, self.model = partition, local_type, model
        self.coarse_rank, self.with_hats = coarse_rank, with_hats
        self.spectral = spectral or SpectralSettings()
        self.learned_nev, self.learned_steps = learned_nev, learned_steps
        self.learned_with_hats = learned_with_hats
        self.two_level = self.subdomains = self.Phi = self._local = None
        self.meta, self.timing, self._key = {}, {}, None

    @property
    def symmetric(self) -> bool:
        return self.local_type == "basic"

    @property
    def _model_name(self) -> str:
        return self.model if isinstance(self.model, str) else "the model given in code"

    def setFromOptions(self, pc: PETSc.PC) -> None:
        opts = PETSc.Options((pc.getOptionsPrefix() or "") + "ddlearn_")
        # petsc4py treats a default of None as "required": '' and 0 stand for "not given"
        self.coarse_space = opts.getString("coarse_space", self.coarse_space or "") or None
        self.N = opts.getInt("subdomains", self.N or 0) or None
        self.overlap = opts.getInt("overlap", self.overlap)
        self.partition = opts.getString("partition", self.partition or "") or None
        self.local_type = opts.getString("local_type", self.local_type)
        if not isinstance(self.model, DistributedSchwarzAttention):
            self.model = opts.getString("model", self.model or "") or None
        self.coarse_rank = opts.getInt("coarse_rank", self.coarse_rank)
        sp_opts = PETSc.Options((pc.getOptionsPrefix() or "") + "ddlearn_spectral_")
        self.with_hats = sp_opts.getBool("with_hats", self.with_hats)
        # same options on every rank, so a bad value raises on every rank
        self.spectral = SpectralSettings(sp_opts.getInt("nev", self.spectral.nev),
                                         sp_opts.getReal("threshold", self.spectral.threshold),
                                         sp_opts.getString("eigensolver",
                                                           self.spectral.eigensolver),
                                         sp_opts.getReal("tol", self.spectral.tol))
        ln_opts = PETSc.Options((pc.getOptionsPrefix() or "") + "ddlearn_learned_")
        self.learned_nev = ln_opts.getInt("nev", self.learned_nev or 0) or None
        self.learned_steps = ln_opts.getInt("steps", -1 if self.learned_steps is None
                                            else self.learned_steps)
        self.learned_steps = None if self.learned_steps < 0 else self.learned_steps
        self.learned_with_hats = ln_opts.getBool("with_hats", self.learned_with_hats)

    def _settings(self, comm, has_coords: bool):
        coarse = self.coarse_space or ("learned" if self.model is not None else
                                       "hats" if has_coords else "nicolaides")
        collective_check(comm, coarse in COARSE_SPACES,
                         f"unknown -ddlearn_coarse_space {coarse!r}; choose one of "
                         f"{', '.join(COARSE_SPACES)}")
        collective_check(comm, self.local_type in LOCAL_TYPES,
                         f"unknown -ddlearn_local_type {self.local_type!r}; choose one of "
                         f"{', '.join(LOCAL_TYPES)}")
        collective_check(comm, self.partition is None or self.partition in PARTITIONERS,
                         f"unknown -ddlearn_partition {self.partition!r}; choose one of "
                         f"{', '.join(PARTITIONERS)}")
        collective_check(comm, self.model is None or coarse == "learned",
                         f"-ddlearn_model was given with coarse space {coarse}: drop one of them")
        path = self.model if isinstance(self.model, str) else PRETRAINED
        collective_check(comm, coarse != "learned" or not isinstance(self.model, (str, type(None)))
                         or os.path.exists(path),
                         f"no learned coarse-space model at {path}: give -ddlearn_model FILE "
                         f"(train one with python -m ddlearn.learned.local_training)")
        collective_check(comm, 0 <= self.coarse_rank < comm.getSize(),
                         f"-ddlearn_coarse_rank {self.coarse_rank} is not a rank of this "
                         f"{comm.getSize()}-rank communicator")
        return coarse

    def setUp(self, pc: PETSc.PC) -> None:
        comm = pc.getComm()
        self._prefix = pc.getOptionsPrefix() or ""
        _, P = pc.getOperators()
        rows, cols = P.getSize()
        collective_check(comm, rows == cols, f"the matrix is {rows} x {cols}: two-level Schwarz "
                         f"needs a square (SPD) matrix")
        require_symmetric_pc(pc, self.symmetric, "-ddlearn_local_type basic")
        key = matrix_structure(P)
        if self.two_level is not None and key == self._key:
            if self.model is not None:
                self._check_fingerprint(P)
            clock = Stopwatch(comm)
            if self._value_dependent:
                self.two_level.set_coarse_basis(None)
                self.Phi.destroy()
                self.Phi = self._value_basis(P)
                self.two_level.set_coarse_basis(self.Phi)
            self.timing = {"partition_s": 0.0, "basis_s": clock.lap()}
            self.two_level.setUp(pc)  # same structure: values only (see TwoLevelSchwarz)
            self.timing.update(self.two_level.timing)
            return
        self.reset(pc)
        clock = Stopwatch(comm)
        coords = get_coordinates(pc, P)
        has = comm.tompi4py().allreduce(coords is not None, op=MPI.LOR)
        coarse = self._settings(comm, has)
        self.meta["coarse_space"] = coarse
        if coarse == "learned":
            self._load_local(comm)
        check_symmetric(P, _ksp_type(pc))
        if coarse == "learned" and self._local is None:
            self._learned(P)  # in-situ checkpoint: bound to its matrix
            self.timing = {"partition_s": 0.0, "basis_s": clock.lap()}
        else:
            N = self.N or 4 * comm.getSize()
            geometric = {"none": None, "gdsw": None,
                         "spectral": "hats" if self.with_hats else None,
                         "learned": "hats" if self.learned_with_hats else None}
            self.subdomains = Subdomains.from_matrix(
                P, N, self.overlap, coords if has else None, self.partition,
                geometric.get(coarse, coarse), self.coarse_rank)
            self.timing = {"partition_s": clock.lap()}
            if self._value_dependent:
                self.Phi = self._value_basis(P)
            elif coarse != "none":
                n0 = self.subdomains.n0
                self.Phi = distributed_aij(self.subdomains.Phi_rows, n0,
                                           coarse_ranges(comm.getSize(), self.coarse_rank, n0),
                                           comm)
            self.timing["basis_s"] = clock.lap()
        self.two_level = TwoLevelSchwarz(self.subdomains, self.Phi, self.local_type, "ddlearn_")
        self.two_level.setUp(pc)
        self.timing.update(self.two_level.timing)
        self._key = key

    # -- coarse spaces that depend on the values -----------------------------------------
    @property
    def _value_dependent(self) -> bool:
        coarse = self.meta["coarse_space"]
        return coarse in VALUE_DEPENDENT and (coarse != "learned" or self._local is not None)

    def _value_basis(self, P: PETSc.Mat) -> PETSc.Mat:
        return self._gdsw_basis(P) if self.meta["coarse_space"] == "gdsw" \
            else self._enriched_basis(P)

    def _load_local(self, comm) -> None:
        """Load the local learned model when the learned coarse space is not an in-situ
        checkpoint (every rank reads the file; a bad file fails on every rank)."""
        if isinstance(self.model, DistributedSchwarzAttention):
            return
        path = self.model or PRETRAINED
        if not is_model_file(path):
            return  # an in-situ checkpoint (or not a model at all: _learned says which)
        try:
            loaded, error = load_model(path), None
        except (ValueError, OSError) as e:
            loaded, error = None, str(e)
        collective_check(comm, error is None, str(error))
        self._local = (path, *loaded[:2])

    def _gdsw_basis(self, P: PETSc.Mat) -> PETSc.Mat:
        """GDSW functions built on rank 0 from the gathered matrix (:mod:`.gdsw`)."""
        comm = P.getComm()
        A0 = gather_matrix(P)
        Phi = gdsw_basis(A0, self.subdomains.part) if A0 is not None else None
        n0 = comm.tompi4py().bcast(Phi.shape[1] if Phi is not None else None, root=0)
        rows = scatter_rows(comm, Phi, np.asarray(P.getOwnershipRanges()))
        self.meta["gdsw"] = {"components": n0}
        return distributed_aij(rows, n0, coarse_ranges(comm.getSize(), self.coarse_rank, n0),
                               comm)

    def _enriched_basis(self, P: PETSc.Mat) -> PETSc.Mat:
        r""":math:`[\Phi_{hats} \mid R_i^TD_iv_{i,l}]` from this rank's hats rows and its
        subdomains' local vectors: eigenvectors (:mod:`ddlearn.classical.spectral`) or
        learned ones (:mod:`ddlearn.learned.local_coarse`)."""
        s = self.subdomains
        lo, _ = P.getOwnershipRange()
        hats = s.Phi_rows.tocoo() if s.Phi_rows is not None else None
        n_hats = s.n0
        if self.meta["coarse_space"] == "spectral":
            rows, cols, vals, k = self._spectral_entries(P, n_hats)
        else:
            rows, cols, vals, k = self._learned_entries(P, n_hats)
        if hats is not None:
            rows = np.concatenate([hats.row + lo, rows])
            cols = np.concatenate([hats.col, cols])
            vals = np.concatenate([hats.data, vals])
        return coarse_basis_matrix(P.getComm(), P.getLocalSize()[0], n_hats + k, rows, cols,
                                   vals, self.coarse_rank)

    def _spectral_entries(self, P: PETSc.Mat, n_hats: int):
        rows, cols, vals, k, lam = spectral_entries(
            P, self.subdomains, self.spectral, n_hats, self._prefix + "ddlearn_spectral_")
        counts = [len(v) for v in lam.values()]
        largest = [float(v.max()) for v in lam.values() if len(v)]
        mpi = P.getComm().tompi4py()
        self.meta["spectral"] = {
            **self.spectral.describe(), "hats": n_hats, "vectors": k,
            "per_subdomain_min": mpi.allreduce(min(counts, default=k), op=MPI.MIN),
            "per_subdomain_max": mpi.allreduce(max(counts, default=0), op=MPI.MAX),
            "largest_kept_lambda": mpi.allreduce(max(largest, default=0.0), op=MPI.MAX)}
        return rows, cols, vals, k

    def _learned_entries(self, P: PETSc.Mat, n_hats: int):
        path, model, meta = self._local
        trained = meta["train_config"]
        nev = self.learned_nev or trained["k"]
        steps = trained["serve_steps"] if self.learned_steps is None else self.learned_steps
        comm = P.getComm()
        collective_check(comm, nev <= model.config["vectors"] * (steps + 1),
                         f"-ddlearn_learned_nev {nev} exceeds the {model.config['vectors']} x "
                         f"{steps + 1} dimensions of the refinement space: raise "
                         f"-ddlearn_learned_steps")
        rows, cols, vals, k, stats, timing = learned_entries(P, self.subdomains, model, nev,
                                                             steps, n_hats)
        warnings = check_inputs(comm, meta, stats, self.subdomains.overlap)
        if warnings and comm.getRank() == 0:
            PETSc.Sys.Print("Warning: " + "; ".join(warnings))
        mpi = comm.tompi4py()
        self.meta["learned"] = {"model": path, "hats": n_hats, "vectors": k, "nev": nev,
                                "steps": steps, "warnings": warnings,
                                **{key: mpi.allreduce(v, op=MPI.MAX) for key, v in timing.items()}}
        return rows, cols, vals, k

    # -- learned coarse space -------------------------------------------------------------
    def _learned(self, P: PETSc.Mat) -> None:
        comm = P.getComm()
        loaded = isinstance(self.model, str)
        model = DistributedSchwarzAttention.load(self.model, comm=comm,
                                                 coarse_rank=self.coarse_rank) \
            if loaded else self.model
        try:
            collective_check(comm, model.meta.get("preconditioner") == KIND,
                             f"{self._model_name} is a paper-form Schwarz attention operator, not a "
                             f"learned coarse space: use -pc_python_type "
                             f"ddlearn.pc.SchwarzAttentionPC for it")
            layout = model.layout
            collective_check(comm, P.getSize()[0] == layout.n,
                             f"the matrix has {P.getSize()[0]} rows but the model was trained "
                             f"for {layout.n} unknowns (grid {list(layout.dec.grid)})")
            self.meta.update(model.meta)
            to_global = self._ordering(P, layout)
            internal = PETSc.IS().createGeneral(
                to_global[layout.local_natural()].astype(PETSc.IntType), comm=comm)
            A_int = P.createSubMatrix(internal, internal)
            Phi = coarse_space(model.meta["coarse"], layout.dec)
            basis = distributed_basis(model, layout, A_int, Phi, model.meta.get("smoothing"))
            Phi_tilde = petsc_basis(basis, layout)
            # rows back to the user's numbering and distribution, columns on the coarse rank
            lo, hi = P.getOwnershipRange()
            from_global = np.empty_like(to_global)
            from_global[to_global] = np.arange(layout.n)
            user_rows = PETSc.IS().createGeneral(
                layout.iperm[from_global[lo:hi]].astype(PETSc.IntType), comm=comm)
            n0 = Phi_tilde.getSize()[1]
            mine = comm.getRank() == self.coarse_rank
            cols = PETSc.IS().createGeneral(np.arange(n0 if mine else 0, dtype=PETSc.IntType),
                                            comm=comm)
            self.Phi = Phi_tilde.createSubMatrix(user_rows, cols)
            for o in (internal, A_int, Phi_tilde, user_rows, cols):
                o.destroy()
            self.subdomains = Subdomains.from_layout(layout, to_global)
            self._to_global, self._layout = to_global, layout
        finally:
            if loaded:
                model.destroy()

    def _ordering(self, P: PETSc.Mat, layout) -> np.ndarray:
        """``to_global``: the matrix row of each natural unknown, found by the fingerprint
        among the grid's natural numbering and ddlearn's subdomain numbering."""
        saved = self.meta.get("fingerprint")
        collective_check(P.getComm(), saved is not None,
                         f"{self._model_name} carries no matrix fingerprint, so the PC cannot "
                         f"check which matrix and numbering it serves: save it with "
                         f"ddlearn.learned.basis.learned_meta")
        candidates = {"natural": np.arange(layout.n), "ddlearn": layout.iperm}
        for to_global in candidates.values():
            if _same(layout.fingerprint(P, to_global), saved):
                return to_global
        collective_check(P.getComm(), False, _NOT_THIS_MATRIX)

    def _check_fingerprint(self, P: PETSc.Mat) -> None:
        collective_check(P.getComm(), _same(self._layout.fingerprint(P, self._to_global),
                                            self.meta["fingerprint"]), _NOT_THIS_MATRIX)

    # -- PC protocol ----------------------------------------------------------------------
    def apply(self, pc: PETSc.PC, x: PETSc.Vec, y: PETSc.Vec) -> None:
        self.two_level.apply(pc, x, y)

    def applyTranspose(self, pc: PETSc.PC, x: PETSc.Vec, y: PETSc.Vec) -> None:
        self.two_level.applyTranspose(pc, x, y)

    def view(self, pc: PETSc.PC, viewer: PETSc.Viewer) -> None:
        if self.two_level is None:
            viewer.printfASCII("  ddlearn two-level Schwarz: not set up\n")
            return
        s = self.subdomains
        viewer.printfASCII(f"  ddlearn two-level Schwarz: coarse space "
                           f"{self.meta['coarse_space']}, partition {s.partitioner}, subdomain "
                           f"sizes {int(s.sizes.min())}..{int(s.sizes.max())}\n")
        if "spectral" in self.meta and self.meta["coarse_space"] == "spectral":
            m = self.meta["spectral"]
            viewer.printfASCII(f"  spectral coarse space ({m['eigensolver']}): {m['vectors']} "
                               f"eigenvectors, {m['per_subdomain_min']}..{m['per_subdomain_max']}"
                               f" per subdomain (nev {m['nev']}, threshold {m['threshold']:g}), "
                               f"largest kept lambda {m['largest_kept_lambda']:.3g}, "
                               f"{m['hats']} hats\n")
        if "learned" in self.meta:
            m = self.meta["learned"]
            viewer.printfASCII(f"  learned coarse space (model {os.path.basename(m['model'])}): "
                               f"{m['vectors']} local vectors ({m['nev']} per subdomain, "
                               f"{m['steps']} block Krylov steps), {m['hats']} hats\n")
        elif self.meta.get("coarse_space") == "learned":
            viewer.printfASCII(f"  learned coarse space from {self._model_name}: "
                               f"{describe(self.meta)}\n")
        self.two_level.view(pc, viewer)

    def reset(self, pc: PETSc.PC) -> None:
        if self.two_level is not None:
            self.two_level.reset(pc)
        if self.Phi is not None:
            self.Phi.destroy()
        self.two_level = self.subdomains = self.Phi = self._key = self._local = None
        self.meta.pop("learned", None)

    def destroy(self, pc: PETSc.PC) -> None:
        # Collective: release PETSc objects now, not in garbage-collection order.
        self.reset(pc)


_NOT_THIS_MATRIX = ("the matrix is not the one this learned coarse space was trained for "
                    "(another problem, other coefficients, or an ordering other than the grid's "
                    "natural one or ddlearn's): train a model for this matrix")


def _ksp_type(pc: PETSc.PC) -> str | None:
    """The Krylov method the options database asks of the PC's prefix, if any."""
    return PETSc.Options(pc.getOptionsPrefix() or "").getString("ksp_type", "") or None


def _same(now: np.ndarray, saved) -> bool:
    saved = np.asarray(saved)
    return bool(np.allclose(now, saved, rtol=1e-10, atol=1e-12 * np.abs(saved).max()))


class TwoLevel:
    """The PyAMG-style handle: a set-up :class:`TwoLevelSchwarzPC` on a matrix, usable as a
    PETSc PC (:attr:`pc`) or a scipy operator (:meth:`aspreconditioner`). Build it with
    :func:`two_level`."""

    def __init__(self, pc: PETSc.PC, A: PETSc.Mat, owns_matrix: bool):
        self.pc, self.A, self._owns = pc, A, owns_matrix

    @property
    def context(self) -> TwoLevelSchwarzPC:
        return self.pc.getPythonContext()

    def aspreconditioner(self) -> spla.LinearOperator:
        """:math:`M^{-1}` as a scipy ``LinearOperator`` (serial matrices)."""
        x, y = self.A.createVecs()
        n = self.A.getSize()[0]

        def matvec(v):
            x.setArray(np.asarray(v, dtype=np.float64).ravel())
            self.pc.apply(x, y)
            return y.getArray(readonly=True).copy()

        return spla.LinearOperator((n, n), matvec=matvec, rmatvec=matvec if
                                   self.context.symmetric else None, dtype=np.float64)

    def destroy(self) -> None:
        """Release the PC (and the PETSc copy of a scipy matrix); collective."""
        self.pc.destroy()
        if self._owns:
            self.A.destroy()


def two_level(A, coarse_space: str | None = None, subdomains: int | None = None,
              overlap: int = 1, coordinates: np.ndarray | None = None, prefix: str = "",
              **kwargs) -> TwoLevel:
    r"""Two-level Schwarz for ``A`` in one call: a scipy sparse matrix (serial) or a PETSc
    ``Mat`` (any communicator; ``coordinates`` then are this rank's rows'). Options under
    ``prefix`` override the arguments. Returns a :class:`TwoLevel`.

    >>> M = two_level(A, "nicolaides", subdomains=16).aspreconditioner()
    >>> x, info = scipy.sparse.linalg.cg(A, b, M=M)
    """
    owns = sp.issparse(A)
    if owns:
        A = sequential_aij(A)
    pc = PETSc.PC().create(comm=A.getComm())
    pc.setOptionsPrefix(prefix)
    pc.setOperators(A, A)
    pc.setType(PETSc.PC.Type.PYTHON)
    pc.setPythonContext(TwoLevelSchwarzPC(coarse_space, subdomains, overlap, **kwargs))
    if coordinates is not None:
        set_coordinates(pc, coordinates)
    pc.setFromOptions()
    pc.setUp()
    return TwoLevel(pc, A, owns)
