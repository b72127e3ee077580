r"""Schwarz attention as a PETSc preconditioner (petsc4py Python PC context).

Select it from the options database::

    -pc_type python -pc_python_type ddlearn.pc.SchwarzAttentionPC
    -ddlearn_model FILE            checkpoint (any rank count)
    -ddlearn_mode MODE             default: learned for a learned-preconditioner checkpoint,
                                   additive otherwise
    -ddlearn_coarse_rank R         rank that owns the coarse block (default 0)

(with the PC's own options prefix in front of ``ddlearn_``), or attach it in code with
``pc.setPythonContext(SchwarzAttentionPC(model=..., mode=...))``. Modes:

- ``learned``: the learned two-level preconditioner of :mod:`ddlearn.learned`,
  :math:`\sum_i R_i^TA_i^{-1}R_i + \tilde\Phi\tilde A_0^{-1}\tilde\Phi^T` with
  :math:`\tilde\Phi = \Phi - \Omega M_{RAS}^{-1}A\Phi + S_\theta\Phi`. SPD for every :math:`\theta`: use CG. Needs a checkpoint
  written by :func:`ddlearn.pc_training.train_preconditioner`'s callers (kind
  ``learned-two-level``).
- ``learned_restricted``: the same with restricted additive Schwarz as local part
  (nonsymmetric: GMRES/FGMRES).
- ``attention``: the paper's operator alone, :math:`M^{-1} = M_\theta^{-1}`. It has rank at most
  :math:`N r_\ell + r_0`, so it is singular whenever that is below ``n``: fine to inspect, not a
  preconditioner (Krylov methods stagnate; see DESIGN.md §3).
- ``additive``: one-level additive Schwarz (PCASM, exact local LU, ``basic``) plus the learned
  operator, :math:`M^{-1} = \sum_i R_i^TA_i^{-1}R_i + M_\theta^{-1}`. With a symmetric model
  (:math:`K_i = Q_i`, :math:`K_0 = Q_0`) this is SPD (SPD plus positive semidefinite), so CG
  applies; otherwise use GMRES/FGMRES.

A nonsymmetric mode is refused when the options database asks CG, CR or MINRES of the same
prefix (and :func:`solvers.krylov.solve` refuses it for any symmetric Krylov method). The matrix
must be in the model's layout (``ddlearn.layout.Layout(...).matrix(problem)``); a mismatch is
refused on every rank.
"""
from __future__ import annotations

import numpy as np
from petsc4py import PETSc

from .coarse import coarse_space
from .distributed import DistributedSchwarzAttention, collective_check
from .learned import KIND, VARIANTS, describe
from .pc_training import distributed_basis, petsc_basis

__all__ = ["SchwarzAttentionPC", "MODES", "SYMMETRIC_KRYLOV"]

MODES = ("learned", "learned_restricted", "attention", "additive")
#: Krylov methods that need a symmetric preconditioner
SYMMETRIC_KRYLOV = ("cg", "cr", "minres")


class SchwarzAttentionPC:
    """petsc4py Python PC context for (learned) Schwarz attention; see the module docstring.

    ``mode=None`` picks ``learned`` for a learned-preconditioner checkpoint, ``additive``
    otherwise."""

    def __init__(self, model: DistributedSchwarzAttention | None = None,
                 mode: str | None = None, path: str | None = None, coarse_rank: int = 0):
        self.model, self.mode, self.path, self.coarse_rank = model, mode, path, coarse_rank
        self.asm = self.work = self.two_level = self.Phi_tilde = None
        self._owns_model = model is None

    @property
    def learned(self) -> bool:
        """Whether the model is a learned preconditioner's coarse-basis correction."""
        return self.model is not None and self.model.meta.get("preconditioner") == KIND

    @property
    def symmetric(self) -> bool:
        """Whether :math:`M^{-1}` is symmetric (so CG applies)."""
        if self.mode in VARIANTS:
            return VARIANTS[self.mode] == "basic"
        if self.model is None or (self.mode is None and self.learned):
            return True  # not known before the model is loaded: checked again after set-up
        return self.model.symmetric

    def setFromOptions(self, pc: PETSc.PC) -> None:
        opts = PETSc.Options((pc.getOptionsPrefix() or "") + "ddlearn_")
        # petsc4py treats a default of None as "required", so '' stands for "not given"
        self.path = opts.getString("model", self.path or "") or None
        self.mode = opts.getString("mode", self.mode or "") or None
        self.coarse_rank = opts.getInt("coarse_rank", self.coarse_rank)

    def setUp(self, pc: PETSc.PC) -> None:
        comm = pc.getComm()
        collective_check(comm, self.mode is None or self.mode in MODES,
                         f"unknown -ddlearn_mode {self.mode!r}; choose one of {', '.join(MODES)}")
        if self.model is None:
            collective_check(comm, self.path is not None,
                             "SchwarzAttentionPC needs a model: give -ddlearn_model FILE or "
                             "attach one with SchwarzAttentionPC(model=...)")
            self.model = DistributedSchwarzAttention.load(self.path, comm=comm,
                                                          coarse_rank=self.coarse_rank)
        if self.mode is None:
            self.mode = "learned" if self.learned else "additive"
        collective_check(comm, self.learned == (self.mode in VARIANTS),
                         f"mode {self.mode} needs "
                         + ("a learned-preconditioner checkpoint (kind learned-two-level); this "
                            "one is a paper-form operator: use -ddlearn_mode attention or additive"
                            if self.mode in VARIANTS else
                            "a paper-form Schwarz attention checkpoint; this one is a learned "
                            "preconditioner: use -ddlearn_mode learned or learned_restricted"))
        ksp_type = PETSc.Options(pc.getOptionsPrefix() or "").getString("ksp_type", "") or None
        collective_check(comm, self.symmetric or ksp_type not in SYMMETRIC_KRYLOV,
                         f"-ddlearn_mode {self.mode} with this model is not symmetric, so "
                         f"{str(ksp_type).upper()} does not apply: use -ksp_type gmres or fgmres, "
                         f"or a symmetric mode (learned, or a symmetric model)")
        _, P = pc.getOperators()
        layout = self.model.layout
        collective_check(comm, P.getSizes()[0] == (layout.nlocal, layout.n),
                         f"the matrix has row layout {P.getSizes()[0]} on rank {layout.rank} but "
                         f"the model's decomposition needs ({layout.nlocal}, {layout.n}): assemble "
                         f"A with ddlearn.layout.Layout for the model's decomposition, or load a "
                         f"model trained for this problem")
        from solvers.schwarz import TwoLevelSchwarz, asm_pc

        if self.mode in VARIANTS and self.two_level is None:
            saved = self.model.meta.get("fingerprint")
            if saved is not None:
                now = layout.fingerprint(P)
                collective_check(comm, np.allclose(now, saved, rtol=1e-10,
                                                   atol=1e-12 * np.abs(saved).max()),
                                 "the matrix is not the one this learned preconditioner was "
                                 "trained for (another problem, other coefficients or another "
                                 "decomposition's ordering): train a model for this matrix")
            Phi = coarse_space(self.model.meta["coarse"], layout.dec)
            basis = distributed_basis(self.model, layout, P, Phi, self.model.meta.get("smoothing"))
            self.Phi_tilde = petsc_basis(basis, layout)
            self.two_level = TwoLevelSchwarz(layout, self.Phi_tilde, VARIANTS[self.mode])
            self.two_level.setUp(pc)
        if self.mode == "additive" and self.asm is None:
            self.asm = asm_pc(P, layout, "basic", (pc.getOptionsPrefix() or "") + "ddlearn_local_")
            self.work = P.createVecLeft()

    def _apply(self, pc, x, y, transpose):
        if self.two_level is not None:
            (self.two_level.applyTranspose if transpose else self.two_level.apply)(pc, x, y)
            return
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
        if self.mode in VARIANTS:
            viewer.printfASCII(
                f"  learned two-level Schwarz, mode {self.mode} ({VARIANTS[self.mode]} local "
                f"part): N = {c['N']} subdomains (overlap {c['overlap']}), coarse space "
                f"{m.meta['coarse']} with n_0 = {self.Phi_tilde.getSize()[1]} functions corrected "
                f"by Schwarz attention (r_l = {c['r_local']}, {m.num_parameters()} parameters), "
                f"Galerkin coarse matrix on rank {m.layout.coarse_rank}, {m.layout.size} ranks; "
                f"{describe(m.meta)}\n")
            return
        n0 = m.coarse.Phi.getSize()[1] if m.coarse is not None else 0
        viewer.printfASCII(
            f"  Schwarz attention, mode {self.mode}: N = {c['N']} subdomains (overlap "
            f"{c['overlap']}), r_l = {c['r_local']}, coarse {c['coarse']} n_0 = {n0}, "
            f"r_0 = {c['r0']} on rank {m.layout.coarse_rank}, {m.num_parameters()} parameters, "
            f"{'symmetric' if m.symmetric else 'nonsymmetric'}, {m.layout.size} ranks\n")

    def reset(self, pc: PETSc.PC) -> None:
        if self.two_level is not None:
            self.two_level.reset(pc)
        for o in (self.asm, self.work, self.Phi_tilde):
            if o is not None:
                o.destroy()
        self.asm = self.work = self.two_level = self.Phi_tilde = None

    def destroy(self, pc: PETSc.PC) -> None:
        # Collective: release PETSc objects now, not in garbage-collection order.
        self.reset(pc)
        if self._owns_model and self.model is not None:
            self.model.destroy()
            self.model = None
