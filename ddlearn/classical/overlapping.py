r"""The one-level overlapping Schwarz operator :math:`M_{AS1}^{-1} = \sum_i R_i^T A_i^{-1} R_i`
(``basic``, symmetric, for CG) or its restricted variant :math:`\sum_i \tilde R_i^T A_i^{-1}R_i`
(``restrict``, RAS) as PETSc's PCASM fed our index sets.

``subdomains`` is anything with ``index_sets(overlapping: bool)`` returning this rank's PETSc
index sets in the matrix's numbering (:class:`~ddlearn.decomposition.layout.Layout`,
:class:`~ddlearn.decomposition.subdomains.Subdomains`).
"""
from __future__ import annotations

from petsc4py import PETSc

__all__ = ["ASM_TYPES", "configure_asm", "asm_pc", "exact_local_solves"]

ASM_TYPES = {"basic": PETSc.PC.ASMType.BASIC, "restrict": PETSc.PC.ASMType.RESTRICT,
             "interpolate": PETSc.PC.ASMType.INTERPOLATE}


def _set_subdomains(pc: PETSc.PC, subdomains, variant: str) -> None:
    if variant not in ASM_TYPES:
        raise ValueError(f"unknown ASM variant {variant!r}; choose one of {sorted(ASM_TYPES)}")
    pc.setType(PETSc.PC.Type.ASM)
    pc.setASMType(ASM_TYPES[variant])
    pc.setASMOverlap(0)  # the index sets already carry the overlap
    overlapping, owned = subdomains.index_sets(True), subdomains.index_sets(False)
    pc.setASMLocalSubdomains(len(overlapping), overlapping, owned)
    for s in overlapping + owned:
        s.destroy()


def configure_asm(pc: PETSc.PC, subdomains, variant: str = "basic") -> PETSc.PC:
    r"""Make ``pc`` (typically a KSP's PC, set up later by the KSP) one-level Schwarz on
    ``subdomains``. Call :func:`exact_local_solves` after its set-up for exact local solves
    (:func:`ddlearn.classical.krylov.solve` does)."""
    _set_subdomains(pc, subdomains, variant)
    return pc


def exact_local_solves(pc: PETSc.PC) -> None:
    """After set-up of a PCASM (or a PCMG whose smoothers are PCASM): local solves preonly +
    LU unless the options database chose otherwise under the PC's prefix (the PETSc way: types
    in code, options decide). PCASM factors its blocks at the first solve
    (PCSetUpOnBlocks), so nothing is factored twice."""
    if pc.getType() == PETSc.PC.Type.MG:
        for level in range(1, pc.getMGLevels()):
            exact_local_solves(pc.getMGSmoother(level).getPC())
        return
    if pc.getType() != PETSc.PC.Type.ASM:
        return
    opts = PETSc.Options(pc.getOptionsPrefix() or "")
    for ksp in pc.getASMSubKSP():
        if not opts.hasName("sub_ksp_type"):
            ksp.setType(PETSc.KSP.Type.PREONLY)
        if not opts.hasName("sub_pc_type"):
            ksp.getPC().setType(PETSc.PC.Type.LU)


def asm_pc(A: PETSc.Mat, subdomains, variant: str = "basic", prefix: str = "") -> PETSc.PC:
    """A set-up stand-alone one-level Schwarz PC for ``A`` on ``subdomains`` (exact local
    solves by default), reading options under ``prefix``. A later ``setOperators`` + ``setUp``
    with new values of the same structure refactors the blocks and reuses the rest."""
    pc = PETSc.PC().create(comm=A.getComm())
    pc.setOptionsPrefix(prefix)
    pc.setOperators(A, A)
    _set_subdomains(pc, subdomains, variant)
    pc.setFromOptions()
    pc.setUp()
    exact_local_solves(pc)
    pc.setUpOnBlocks()  # factor now, so that set-up time is set-up time
    return pc
