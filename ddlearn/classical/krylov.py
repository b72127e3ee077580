"""Krylov runs with honest bookkeeping: iterations, converged reason, true residual, history,
set-up and solve seconds (slowest rank)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable

from petsc4py import PETSc

from ..decomposition.collective import collective_check
from ..decomposition.timing import Timer
from .overlapping import exact_local_solves, is_symmetric

__all__ = ["KrylovResult", "solve", "solve_once", "reason_name", "check_symmetric",
           "check_symmetric_pc", "require_symmetric_pc", "options_ksp_type", "SYMMETRIC_KRYLOV"]

#: Krylov methods that need a symmetric operator and preconditioner
SYMMETRIC_KRYLOV = ("cg", "cr", "minres")


_REASONS = {getattr(PETSc.KSP.ConvergedReason, k): k
            for k in dir(PETSc.KSP.ConvergedReason) if k.isupper()}


def reason_name(reason: int) -> str:
    """PETSc's name of a KSP converged reason, e.g. ``CONVERGED_RTOL``."""
    return _REASONS.get(int(reason), str(int(reason)))


@dataclass
class KrylovResult:
    """One Krylov solve. ``rnorm_true`` is :math:`\\|b - Ax\\|/\\|b\\|` recomputed after the
    solve; ``history`` holds the residual norms the KSP monitored, relative to the first."""

    method: str
    iterations: int
    converged: bool
    reason: str
    rnorm_true: float
    setup_s: float
    solve_s: float
    train_s: float = 0.0
    history: list = field(default_factory=list, repr=False)

    def record(self) -> dict:
        return asdict(self)


def check_symmetric(A: PETSc.Mat, ksp_type: str,
                    measured: Callable[[], bool | None] | None = None) -> None:
    """CG and MINRES need a symmetric operator: refuse a nonsymmetric one (collective, so the
    error is raised on every rank). ``measured``: :func:`is_symmetric` of ``A`` where the caller
    has it (default: measured here)."""
    if ksp_type not in SYMMETRIC_KRYLOV:
        return
    if (measured or (lambda: is_symmetric(A)))() is False:
        raise ValueError(f"the matrix is not symmetric, so {ksp_type.upper()} does not apply; "
                         f"use a nonsymmetric Krylov method such as -ksp_type gmres")


def check_symmetric_pc(ksp: PETSc.KSP, matrix: bool = True) -> None:
    """Refuse, on every rank, what CG, CR or MINRES cannot use: a nonsymmetric matrix (the
    operator or the matrix the preconditioner is built from, tested as :func:`check_symmetric`
    does) or a Python preconditioner that declares itself nonsymmetric (``symmetric = False``).

    A preconditioner cannot see its KSP: it checks the options database only (``-ksp_type``
    under its prefix), so a Krylov method chosen in code (``ksp.setType("cg")``) escapes it.
    Call this on the KSP after configuring it (after ``setFromOptions``; again after
    ``setUp`` for a preconditioner whose form is known only then, there with
    ``matrix=False`` when the matrices were checked already). Collective."""
    ksp_type = ksp.getType()
    if ksp_type not in SYMMETRIC_KRYLOV:
        return
    if matrix:
        A, P = ksp.getOperators()
        for M in (A,) if P.handle == A.handle else (A, P):
            if M.getType() is not None:  # None: no operator set yet
                check_symmetric(M, ksp_type)
    pc = ksp.getPC()
    if pc.getType() != PETSc.PC.Type.PYTHON:
        return
    if getattr(pc.getPythonContext(), "symmetric", True) is False:
        raise ValueError(f"the preconditioner is not symmetric, so {ksp_type.upper()} does "
                         f"not apply: use -ksp_type gmres or fgmres, or a symmetric mode")


def options_ksp_type(pc: PETSc.PC) -> str | None:
    """The Krylov method the options database asks of the PC's prefix, if any (a PC cannot see a
    KSP type set in code)."""
    return PETSc.Options(pc.getOptionsPrefix() or "").getString("ksp_type", "") or None


def require_symmetric_pc(pc: PETSc.PC, symmetric: bool, fix: str) -> None:
    """In a Python PC's set-up: refuse a nonsymmetric preconditioner when the options database
    asks CG, CR or MINRES of the same prefix (on every rank); ``fix`` says what to choose
    instead. The KSP itself is checked again by :func:`check_symmetric_pc`."""
    ksp_type = options_ksp_type(pc)
    collective_check(pc.getComm(), symmetric or ksp_type not in SYMMETRIC_KRYLOV,
                     f"the preconditioner is not symmetric, so {str(ksp_type).upper()} does not "
                     f"apply: use -ksp_type gmres or fgmres, or {fix}")


def _wall(comm: PETSc.Comm, fn) -> float:
    comm.barrier()
    timer = Timer()
    fn()
    timer.lap("s")
    return timer.slowest(comm)["s"]


def solve_once(ksp: PETSc.KSP, A: PETSc.Mat, b: PETSc.Vec, x: PETSc.Vec) -> dict:
    r"""Solve ``A x = b`` with the set-up ``ksp`` (collective): ``solve_s`` (slowest rank),
    ``iterations``, ``reason`` (its number), ``reason_name``, ``converged`` and the true
    relative residual ``rnorm_true`` :math:`= \|b - Ax\| / \|b\|` (which CG's recursive
    residual can drift from at high contrast)."""
    seconds = _wall(A.getComm(), lambda: ksp.solve(b, x))
    r = b.duplicate()
    A.mult(x, r)
    r.aypx(-1.0, b)
    reason = int(ksp.getConvergedReason())
    out = {"solve_s": seconds, "iterations": ksp.getIterationNumber(), "reason": reason,
           "reason_name": reason_name(reason), "converged": reason > 0,
           "rnorm_true": r.norm() / b.norm()}
    r.destroy()
    return out


def solve(A: PETSc.Mat, b: PETSc.Vec, configure: Callable[[PETSc.PC], None], *,
          method: str = "", ksp_type: str = "cg", rtol: float = 1e-8, max_it: int = 10000,
          prefix: str = "") -> KrylovResult:
    """Solve ``A x = b`` from a zero guess with the preconditioner that ``configure`` sets up.

    Convergence is measured on the *unpreconditioned* residual, so every preconditioner is held
    to the same test ``||r_k|| <= rtol ||b||``. The KSP takes options under ``prefix`` (e.g.
    ``-asm_ksp_monitor``), which override everything set here.
    """
    check_symmetric(A, ksp_type)
    comm = A.getComm()
    ksp = PETSc.KSP().create(comm=comm)
    try:
        ksp.setOptionsPrefix(prefix)
        ksp.setOperators(A)
        ksp.setType(ksp_type)
        ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
        ksp.setTolerances(rtol=rtol, atol=0.0, max_it=max_it)
        configure(ksp.getPC())
        ksp.setFromOptions()
        # the PC, and the matrix unless checked above, under the KSP the options chose
        check_symmetric_pc(ksp, matrix=ksp_type not in SYMMETRIC_KRYLOV)
        ksp.setConvergenceHistory(reset=True)
        x = b.duplicate()
        x.set(0.0)
        # PCASM blocks (directly or as PCMG smoothers) default to exact LU, factored in the
        # timed set-up rather than in the first solve
        setup_s = _wall(comm, lambda: (ksp.setUp(), exact_local_solves(ksp.getPC()),
                                       ksp.setUpOnBlocks()))
        # a mode chosen from the model file is known only now
        check_symmetric_pc(ksp, matrix=False)
        once = solve_once(ksp, A, b, x)
        hist = ksp.getConvergenceHistory()
        result = KrylovResult(
            method=method, iterations=once["iterations"], converged=once["converged"],
            reason=once["reason_name"], rnorm_true=once["rnorm_true"], setup_s=setup_s,
            solve_s=once["solve_s"],
            history=[float(h / hist[0]) for h in hist] if len(hist) and hist[0] > 0 else [])
        x.destroy()
        return result
    finally:
        ksp.destroy()
