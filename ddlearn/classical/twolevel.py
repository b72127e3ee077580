r"""Classical two-level additive Schwarz as the sum of its composable pieces:

.. math:: M_{AS2}^{-1} = \underbrace{\sum_i R_i^T A_i^{-1} R_i}_{\text{overlapping}}
          + \underbrace{\Phi A_0^{-1}\Phi^T}_{\text{Galerkin coarse}},
          \qquad A_i = R_i A R_i^T,\ A_0 = \Phi^T A \Phi,

the one-level part a PCASM on the given subdomains (:mod:`.overlapping`, options prefix
``local_`` after the PC's), the coarse part a :class:`~.galerkin.CoarseCorrection` (prefix
``coarse_``), both nested PETSc objects.
"""
from __future__ import annotations

from petsc4py import PETSc

from .galerkin import CoarseCorrection
from .overlapping import asm_pc
from .timing import Stopwatch

__all__ = ["TwoLevelSchwarz", "matrix_structure"]


def matrix_structure(P: PETSc.Mat) -> tuple:
    """What a re-setup compares to decide between *update* (same object, same sizes and number
    of stored nonzeros: new values only) and *initialize* (everything rebuilt). petsc4py 3.26
    does not expose MatGetNonzeroState; the global nonzero count stands in for it."""
    return (P.handle, P.getSizes(), P.getInfo(PETSc.Mat.InfoType.GLOBAL_SUM)["nz_used"])


class TwoLevelSchwarz:
    r"""Two-level additive Schwarz :math:`M_{AS2}^{-1}` as a petsc4py Python PC context.

    ``setUp`` *initializes* (index sets into PCASM, :math:`\Phi^TA\Phi` pattern, coarse KSP) on
    the first call or for a matrix of another structure, and only *updates* (local and coarse
    refactorisations) when the same matrix comes back with new values.

    Parameters
    ----------
    subdomains : Layout or Subdomains
        This rank's subdomains (``index_sets``, ``coarse_rank``).
    Phi : PETSc.Mat or None
        Coarse basis, rows like the matrix, all columns on the coarse rank; ``None`` for
        one-level Schwarz alone.
    variant : str
        ASM variant of the local part; ``basic`` keeps the preconditioner symmetric.
    prefix : str
        Added to the PC's options prefix for the nested objects:
        ``-{pc prefix}{prefix}local_*`` and ``-{pc prefix}{prefix}coarse_*``.
    """

    def __init__(self, subdomains, Phi: PETSc.Mat | None, variant: str = "basic",
                 prefix: str = ""):
        self.subdomains, self.Phi, self.variant, self.prefix = subdomains, Phi, variant, prefix
        self.local = self.coarse = self._structure = None
        self._prefix, self.timing = prefix, {}
        self.timing = {}

    @property
    def symmetric(self) -> bool:
        return self.variant == "basic"

    def setUp(self, pc: PETSc.PC) -> None:
        _, P = pc.getOperators()
        if self._structure is not None and self._structure == matrix_structure(P):
            self.update(P)
        else:
            self.initialize(pc, P)

    def initialize(self, pc: PETSc.PC, P: PETSc.Mat) -> None:
        """Build every piece for ``P`` (collective). ``timing`` records the seconds of the
        local part (PCASM set-up and factorisations) and the coarse part (triple product and
        coarse factorisation), slowest rank."""
        self.reset(pc)
        self._prefix = (pc.getOptionsPrefix() or "") + self.prefix
        clock = Stopwatch(P.getComm())
        self.local = asm_pc(P, self.subdomains, self.variant, self._prefix + "local_")
        self.timing = {"local_s": clock.lap()}
        self._coarse(P)
        self.timing["coarse_s"] = clock.lap()
        self._structure = matrix_structure(P)

    def _coarse(self, P: PETSc.Mat) -> None:
        if self.coarse is not None:
            self.coarse.update(P)
        elif self.Phi is not None:
            self.coarse = CoarseCorrection(P, self.Phi, self.subdomains.coarse_rank,
                                           self._prefix)

    def set_coarse_basis(self, Phi: PETSc.Mat | None) -> None:
        """A new coarse basis (for coarse spaces that depend on the matrix values): the next
        set-up builds the coarse correction on it and keeps the overlapping part."""
        if self.coarse is not None:
            self.coarse.destroy()
        self.coarse, self.Phi = None, Phi

    def update(self, P: PETSc.Mat) -> None:
        """New values of the same matrix: refactor the local blocks and the coarse matrix."""
        clock = Stopwatch(P.getComm())
        self.local.setOperators(P, P)
        self.local.setUp()
        self.local.setUpOnBlocks()
        self.timing = {"local_s": clock.lap()}
        self._coarse(P)
        self.timing["coarse_s"] = clock.lap()

    def apply(self, pc: PETSc.PC, x: PETSc.Vec, y: PETSc.Vec) -> None:
        self.local.apply(x, y)
        if self.coarse is not None:
            self.coarse.apply(x, y, add=True)

    def applyTranspose(self, pc, x, y):
        self.local.applyTranspose(x, y)
        if self.coarse is not None:
            self.coarse.apply(x, y, add=True)

    def view(self, pc: PETSc.PC, viewer: PETSc.Viewer) -> None:
        s = self.subdomains
        n0 = self.Phi.getSize()[1] if self.Phi is not None else 0
        viewer.printfASCII(f"  two-level additive Schwarz: N = {s.N} subdomains, overlap "
                           f"{s.overlap}, n_0 = {n0} coarse functions on rank {s.coarse_rank}, "
                           f"local variant {self.variant}\n")
        if self.local is None:
            return
        viewer.printfASCII("  overlapping (one-level) part:\n")
        viewer.pushASCIITab()
        self.local.view(viewer)
        viewer.popASCIITab()
        if self.coarse is not None:
            viewer.printfASCII(f"  Galerkin coarse solver (rank {s.coarse_rank}):\n")
            sub = viewer.getSubViewer(PETSc.COMM_SELF)
            if self.coarse.is_coarse:
                sub.pushASCIITab()
                self.coarse.view(sub)
                sub.popASCIITab()
            viewer.restoreSubViewer(sub)

    def destroy(self, pc: PETSc.PC) -> None:
        # Collective: release PETSc objects now, not in rank-dependent garbage-collection order.
        self.reset(pc)

    def reset(self, pc: PETSc.PC) -> None:
        if self.local is not None:
            self.local.destroy()
        if self.coarse is not None:
            self.coarse.destroy()
        self.local = self.coarse = self._structure = None
