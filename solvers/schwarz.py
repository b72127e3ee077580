r"""Classical overlapping Schwarz preconditioners on a ddlearn decomposition.

- One-level additive Schwarz :math:`M_{AS1}^{-1} = \sum_i R_i^T A_i^{-1} R_i` is PETSc's PCASM fed
  our index sets (``basic`` is symmetric, for CG; ``restrict`` is RAS).
- The coarse correction :math:`\Phi A_0^{-1}\Phi^T` with :math:`A_0 = \Phi^T A \Phi` assembled by
  a PETSc triple product (:meth:`Mat.ptap`) and factored on the coarse rank only.
- Classical two-level additive Schwarz :math:`M_{AS2}^{-1} = M_{AS1}^{-1} + \Phi A_0^{-1}\Phi^T`
  as a petsc4py Python PC context.
"""
from __future__ import annotations

import numpy as np
from petsc4py import PETSc

from .options import set_defaults

__all__ = ["configure_asm", "asm_pc", "CoarseCorrection", "TwoLevelSchwarz", "ASM_TYPES"]

ASM_TYPES = {"basic": PETSc.PC.ASMType.BASIC, "restrict": PETSc.PC.ASMType.RESTRICT,
             "interpolate": PETSc.PC.ASMType.INTERPOLATE}


def configure_asm(pc: PETSc.PC, layout, variant: str = "basic") -> PETSc.PC:
    r"""Make ``pc`` one-level additive Schwarz on ``layout``'s subdomains.

    The index sets already carry the overlap :math:`n_\delta`, so PETSc adds none; local solves
    default to exact LU (``-{prefix}sub_pc_type``).
    """
    if variant not in ASM_TYPES:
        raise ValueError(f"unknown ASM variant {variant!r}; choose one of {sorted(ASM_TYPES)}")
    set_defaults(pc.getOptionsPrefix(), {"sub_ksp_type": "preonly", "sub_pc_type": "lu"})
    pc.setType(PETSc.PC.Type.ASM)
    pc.setASMType(ASM_TYPES[variant])
    pc.setASMOverlap(0)
    overlapping, owned = layout.index_sets(True), layout.index_sets(False)
    pc.setASMLocalSubdomains(len(overlapping), overlapping, owned)
    for s in overlapping + owned:
        s.destroy()
    return pc


def asm_pc(A: PETSc.Mat, layout, variant: str = "basic", prefix: str = "") -> PETSc.PC:
    """A set-up stand-alone one-level Schwarz PC (:func:`configure_asm`) for ``A`` on
    ``layout``'s subdomains, reading options under ``prefix``."""
    pc = PETSc.PC().create(comm=A.getComm())
    pc.setOptionsPrefix(prefix)
    pc.setOperators(A, A)
    configure_asm(pc, layout, variant)
    pc.setFromOptions()
    pc.setUp()
    return pc


class CoarseCorrection:
    r"""The coarse-level operator :math:`y = \Phi A_0^{-1} \Phi^T x`, :math:`A_0 = \Phi^T A\Phi`.

    ``Phi`` is a distributed matrix whose :math:`n_0` columns all live on the coarse rank
    (:meth:`ddlearn.layout.Layout.phi`), so :math:`\Phi^T x` lands there, the coarse rank alone
    solves with its sequential factorisation of :math:`A_0`, and :math:`\Phi` sends the result
    back. The coarse solver is a KSP with prefix ``{prefix}coarse_`` (default: preonly +
    Cholesky).
    """

    def __init__(self, A: PETSc.Mat, Phi: PETSc.Mat, coarse_rank: int = 0, prefix: str = ""):
        self.Phi = Phi
        comm = A.getComm()
        self.is_coarse = comm.getRank() == coarse_rank
        A0 = A.ptap(Phi)
        n0 = A0.getSize()[0]
        # Collective: only the coarse rank asks for rows, so only it receives the sequential A_0.
        want = np.arange(n0 if self.is_coarse else 0, dtype=PETSc.IntType)
        iset = PETSc.IS().createGeneral(want, comm=PETSc.COMM_SELF)
        (self.A0,) = A0.createSubMatrices(iset)
        iset.destroy()
        A0.destroy()
        self.xc, self.yc = Phi.createVecRight(), Phi.createVecRight()
        self.ksp = None
        if self.is_coarse:
            self.ksp = PETSc.KSP().create(comm=PETSc.COMM_SELF)
            self.ksp.setOptionsPrefix(prefix + "coarse_")
            set_defaults(prefix + "coarse_", {"ksp_type": "preonly", "pc_type": "cholesky"})
            self.ksp.setOperators(self.A0)
            self.ksp.setFromOptions()
            self.ksp.setUp()
            # Sequential views of the coarse vectors' storage (all n_0 entries are local here).
            self._xs = PETSc.Vec().createWithArray(self.xc.getArray(), comm=PETSc.COMM_SELF)
            self._ys = PETSc.Vec().createWithArray(self.yc.getArray(), comm=PETSc.COMM_SELF)

    @property
    def n0(self) -> int:
        return self.Phi.getSize()[1]

    def apply(self, x: PETSc.Vec, y: PETSc.Vec, add: bool = False) -> None:
        r"""``y = Phi A_0^{-1} Phi^T x`` (or ``y += ...`` with ``add``)."""
        self.Phi.multTranspose(x, self.xc)
        if self.is_coarse:
            self.ksp.solve(self._xs, self._ys)
        if add:
            self.Phi.multAdd(self.yc, y, y)
        else:
            self.Phi.mult(self.yc, y)

    def destroy(self) -> None:
        for obj in (self.ksp, getattr(self, "_xs", None), getattr(self, "_ys", None),
                    self.A0, self.xc, self.yc):
            if obj is not None:
                obj.destroy()


class TwoLevelSchwarz:
    r"""Classical two-level additive Schwarz as a petsc4py Python PC context:

    .. math:: M_{AS2}^{-1} = \sum_i R_i^T A_i^{-1} R_i + \Phi A_0^{-1}\Phi^T,
              \qquad A_i = R_i A R_i^T,\ A_0 = \Phi^T A \Phi.

    The local part is a PCASM (prefix ``{prefix}local_``), the coarse part a
    :class:`CoarseCorrection` (prefix ``{prefix}coarse_``).

    Parameters
    ----------
    layout : ddlearn.layout.Layout
    Phi : PETSc.Mat
        Coarse basis from :meth:`Layout.phi`.
    variant : str
        ASM variant of the local part; ``basic`` keeps the preconditioner symmetric.
    """

    def __init__(self, layout, Phi: PETSc.Mat, variant: str = "basic"):
        self.layout, self.Phi, self.variant = layout, Phi, variant
        self.local = self.coarse = None

    def setUp(self, pc: PETSc.PC) -> None:
        self.reset(pc)
        _, P = pc.getOperators()
        prefix = pc.getOptionsPrefix() or ""
        self.local = asm_pc(P, self.layout, self.variant, prefix + "local_")
        self.coarse = CoarseCorrection(P, self.Phi, self.layout.coarse_rank, prefix)

    def apply(self, pc: PETSc.PC, x: PETSc.Vec, y: PETSc.Vec) -> None:
        self.local.apply(x, y)
        self.coarse.apply(x, y, add=True)

    def applyTranspose(self, pc, x, y):
        self.local.applyTranspose(x, y)
        self.coarse.apply(x, y, add=True)

    def view(self, pc: PETSc.PC, viewer: PETSc.Viewer) -> None:
        viewer.printfASCII(f"  classical two-level additive Schwarz: N = {self.layout.dec.N} "
                           f"subdomains, overlap {self.layout.dec.overlap}, n_0 = "
                           f"{self.Phi.getSize()[1]} coarse functions on rank "
                           f"{self.layout.coarse_rank}, local variant {self.variant}\n")

    def destroy(self, pc: PETSc.PC) -> None:
        # Collective: release PETSc objects now, not in rank-dependent garbage-collection order.
        self.reset(pc)

    def reset(self, pc: PETSc.PC) -> None:
        if self.local is not None:
            self.local.destroy()
            self.coarse.destroy()
        self.local = self.coarse = None
