r"""Schwarz attention as a PETSc preconditioner (petsc4py Python PC context).

Select it from the options database::

    -pc_type python -pc_python_type ddlearn.pc.SchwarzAttentionPC
    -ddlearn_model FILE            checkpoint (any rank count)
    -ddlearn_mode {attention,additive}   (default additive)
    -ddlearn_coarse_rank R         rank that owns the coarse block (default 0)

(with the PC's own options prefix in front of ``ddlearn_``), or attach it in code with
``pc.setPythonContext(SchwarzAttentionPC(model=..., mode=...))``. Modes:

- ``attention``: the paper's operator alone, :math:`M^{-1} = M_\theta^{-1}`. It has rank at most
  :math:`N r_\ell + r_0`, so it is singular whenever that is below ``n``: fine to inspect, not a
  preconditioner (Krylov methods stagnate; see docs/design.md §1).
- ``additive`` (default): one-level additive Schwarz (PCASM, exact local LU, ``basic``) plus the
  learned operator, :math:`M^{-1} = \sum_i R_i^TA_i^{-1}R_i + M_\theta^{-1}`. With a symmetric
  model (:math:`K_i = Q_i`, :math:`K_0 = Q_0`) this is SPD (SPD plus positive semidefinite), so
  CG applies; otherwise use GMRES/FGMRES.

An in-situ learned coarse space (checkpoint kind ``learned-two-level``, from
:mod:`ddlearn.learned.coarse.pc_training`) is served by
:class:`~ddlearn.pc.twolevel.TwoLevelSchwarzPC` instead:
``-ddlearn_coarse_space learned_insitu -ddlearn_learned_insitu_model FILE``. A nonsymmetric
mode is refused when the options database asks CG, CR or MINRES of the same prefix. The matrix
must be in the model's row layout
(``ddlearn.decomposition.petsc_rows.RowLayout(...).matrix(problem)``); a mismatch is refused on
every rank.
"""
from __future__ import annotations

from mpi4py import MPI
from petsc4py import PETSc

from ..classical.krylov import require_symmetric_pc
from ..classical.overlapping import asm_pc
from ..classical.twolevel import matrix_structure
from ..decomposition.collective import collective_check
from ..learned.coarse.basis import INSITU_KIND
from ..learned.operators.distributed import DistributedSchwarzAttention
from .inputs import get_coordinates

__all__ = ["SchwarzAttentionPC", "MODES"]

MODES = ("attention", "additive")


class SchwarzAttentionPC:
    """petsc4py Python PC context for the paper-form Schwarz attention operator; see the module
    docstring."""

    def __init__(self, model: DistributedSchwarzAttention | None = None,
                 mode: str = "additive", path: str | None = None, coarse_rank: int = 0):
        self.model, self.mode, self.path, self.coarse_rank = model, mode, path, coarse_rank
        self.asm = self.work = self._structure = None
        self._owns_model = model is None

    @property
    def symmetric(self) -> bool:
        """Whether :math:`M^{-1}` is symmetric (so CG applies); known once the model is."""
        return self.model is None or self.model.symmetric

    def setFromOptions(self, pc: PETSc.PC) -> None:
        opts = PETSc.Options((pc.getOptionsPrefix() or "") + "ddlearn_")
        # petsc4py treats a default of None as "required", so '' stands for "not given"
        self.path = opts.getString("model", self.path or "") or None
        self.mode = opts.getString("mode", self.mode)
        self.coarse_rank = opts.getInt("coarse_rank", self.coarse_rank)

    def setUp(self, pc: PETSc.PC) -> None:
        comm = pc.getComm()
        prefix = (pc.getOptionsPrefix() or "") + "ddlearn_"
        collective_check(comm, self.mode in MODES,
                         f"unknown -{prefix}mode {self.mode!r}; choose one of {', '.join(MODES)}")
        if self.model is None:
            collective_check(comm, self.path is not None,
                             f"SchwarzAttentionPC needs a model: give -{prefix}model FILE or "
                             f"attach one with SchwarzAttentionPC(model=...)")
            self.model = DistributedSchwarzAttention.load(self.path, comm=comm,
                                                          coarse_rank=self.coarse_rank)
        collective_check(comm, self.model.meta.get("preconditioner") != INSITU_KIND,
                         f"this checkpoint is a learned coarse space, not a paper-form operator: "
                         f"select it with -pc_python_type ddlearn.pc.TwoLevelSchwarzPC "
                         f"-{prefix}coarse_space learned_insitu -{prefix}learned_insitu_model "
                         f"FILE")
        require_symmetric_pc(pc, self.symmetric, "a symmetric model")
        _, P = pc.getOperators()
        layout = self.model.layout
        collective_check(comm, P.getSizes()[0] == (layout.nlocal, layout.n),
                         f"the matrix has row layout {P.getSizes()[0]} on rank {layout.rank} but "
                         f"the model's decomposition needs ({layout.nlocal}, {layout.n}): assemble "
                         f"A with ddlearn.decomposition.petsc_rows.RowLayout for the model's "
                         f"decomposition, or load a model trained for this problem")
        coords = get_coordinates(pc, P)
        dim, grid = len(layout.dec.grid), layout.dec.grid
        got = comm.tompi4py().allreduce(coords.shape[1] if coords is not None and coords.ndim == 2
                                        else 0, op=MPI.MAX)
        # the row count alone cannot tell a 2D 8 x 8 model from a 3D 4 x 4 x 4 matrix
        collective_check(comm, got in (0, dim),
                         f"the matrix's coordinates are {got}D but the model was trained on the "
                         f"{dim}D grid {list(grid)}: train a model on this problem "
                         f"(examples/poisson.py -problem NAME -methods attention)")
        if self.mode != "additive":
            return
        # the two-level method's rule: the same nonzero structure is an update (new values:
        # the blocks refactored), anything else a new one-level part
        structure = matrix_structure(P)
        if self.asm is not None and self._structure == structure:
            self.asm.setOperators(P, P)
            self.asm.setUp()
        else:
            self.reset(pc)
            self.asm = asm_pc(P, layout, "basic", (pc.getOptionsPrefix() or "") + "ddlearn_local_")
            self.work = P.createVecLeft()
        self._structure = structure

    def _apply(self, pc, x, y, transpose):
        self.model.apply(x, y, transpose=transpose)
        if self.asm is not None:
            (self.asm.applyTranspose if transpose else self.asm.apply)(x, self.work)
            y.axpy(1.0, self.work)

    def apply(self, pc: PETSc.PC, x: PETSc.Vec, y: PETSc.Vec) -> None:
        self._apply(pc, x, y, False)

    def applyTranspose(self, pc: PETSc.PC, x: PETSc.Vec, y: PETSc.Vec) -> None:
        self._apply(pc, x, y, True)

    def view(self, pc: PETSc.PC, viewer: PETSc.Viewer) -> None:
        m = self.model
        if m is None:
            viewer.printfASCII("  Schwarz attention: not set up\n")
            return
        c = m.config
        viewer.printfASCII(
            f"  Schwarz attention, mode {self.mode}: N = {c['N']} subdomains (overlap "
            f"{c['overlap']}), r_l = {c['r_local']}, coarse {c['coarse']} n_0 = {m.n0}, "
            f"r_0 = {c['r0']} on rank {m.layout.coarse_rank}, {m.num_parameters()} parameters, "
            f"{'symmetric' if m.symmetric else 'nonsymmetric'}, {m.layout.size} ranks\n")
        if self.asm is not None:
            viewer.pushASCIITab()
            self.asm.view(viewer)
            viewer.popASCIITab()

    def reset(self, pc: PETSc.PC) -> None:
        for o in (self.asm, self.work):
            if o is not None:
                o.destroy()
        self.asm = self.work = self._structure = None

    def destroy(self, pc: PETSc.PC) -> None:
        # Collective: release PETSc objects now, not in garbage-collection order.
        self.reset(pc)
        if self._owns_model and self.model is not None:
            self.model.destroy()
            self.model = None
