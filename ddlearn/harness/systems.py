"""The linear systems the benchmarks solve as a user's program would hand them to the PC, and
how they are solved: every solve is the one solve of a set-up KSP,
:func:`ddlearn.classical.krylov.solve_once` (iterations, reason, true relative residual
:math:`\|b - Ax\| / \|b\|`, the slowest rank's seconds).

- :func:`natural_matrix`: a problem's matrix in the natural ordering, PETSc's default rows,
  the grid coordinates attached;
- :func:`solve_from_options`: a KSP from the options database (CG by default), set up and
  solved once, with ``n_0`` and ddlearn's set-up split (the elasticity program and studies);
  :func:`solve_with_options` the same under a method's options, a failure recorded;
- :func:`pc_solves`: CG with ``ddlearn.pc.TwoLevelSchwarzPC`` (or one of PETSc's reference
  preconditioners, :data:`ddlearn.harness.methods.METHODS`: GAMG with its defaults or
  tuned) on several right-hand sides, with the set-up split and the coarse space's summary.
"""
from __future__ import annotations

import numpy as np
from petsc4py import PETSc

from ddlearn.classical.krylov import solve_once
from ddlearn.pc import TwoLevelSchwarzPC, set_coordinates

from .bench import failure, wall
from .methods import METHODS

__all__ = ["natural_matrix", "coarse_size", "solve_from_options",
           "solve_with_options", "pc_solves"]


def natural_matrix(problem) -> PETSc.Mat:
    """The problem's matrix in natural ordering, PETSc's default rows, coordinates attached;
    each rank assembles its own rows only."""
    A = PETSc.Mat().createAIJ((problem.n, problem.n), comm=PETSc.COMM_WORLD)
    A.setUp()
    lo, hi = A.getOwnershipRange()
    rows = problem.rows(np.arange(lo, hi))
    A.setPreallocationCSR((rows.indptr, rows.indices, rows.data))
    A.setOption(PETSc.Mat.Option.SYMMETRIC, True)
    A.assemble()
    set_coordinates(A, problem.coordinates(np.arange(lo, hi)))
    return A


def coarse_size(ksp: PETSc.KSP) -> int | None:
    """``n_0`` of ddlearn's PC (``None`` for other PCs or one level)."""
    pc = ksp.getPC()
    if pc.getType() != PETSc.PC.Type.PYTHON:
        return None
    ctx = pc.getPythonContext()
    meta = getattr(ctx, "meta", None) or {}
    if "n0" in meta:
        return int(meta["n0"])
    for Phi in (getattr(ctx, "Phi", None), getattr(getattr(ctx, "two_level", None), "Phi", None)):
        if Phi is not None:
            return int(Phi.getSize()[1])
    return None


def solve_from_options(A: PETSc.Mat, b: PETSc.Vec) -> dict:
    """A KSP from the options database (defaults CG, rtol 1e-8 on the unpreconditioned
    residual, no divergence test), set up and solved once (:func:`solve_once`), with its
    types, ``setup_s`` (slowest rank), ``n0`` and ddlearn's set-up split.

    At high contrast the 2-norm of CG's residual is far from monotone (it minimises the
    energy norm): at contrast 1e6 in 2D it climbs to 1e4 ``||b||`` (100² cells) and past 1e5
    (128²) on the way, which PETSc's default divergence test (``-ksp_divtol 1e5``) calls
    DIVERGED_DTOL; hence the default ``1e12`` here. The attainable true residual is limited by
    round-off in ``A x`` with ``||A|| ~ contrast``: a few 1e-5 in 2D at contrast 1e6 whatever
    the preconditioner, so the recorded true residual can sit above the recursive one CG
    stopped on."""
    ksp = PETSc.KSP().create(comm=A.getComm())
    ksp.setOperators(A)
    ksp.setType(PETSc.KSP.Type.CG)
    ksp.setTolerances(rtol=1e-8, divtol=1e12)
    ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
    ksp.setFromOptions()
    x = A.createVecRight()
    out = {"ksp": ksp.getType(), "pc": ksp.getPC().getType()}
    try:
        out["setup_s"] = wall(ksp.setUp, A.getComm().tompi4py())
        out.update(solve_once(ksp, A, b, x), n0=coarse_size(ksp))
        split = getattr(ksp.getPC().getPythonContext(), "timing", None) \
            if out["pc"] == PETSc.PC.Type.PYTHON else None
        if split:  # ddlearn's set-up split (partition, basis, factorisations, coarse operator)
            out["setup_split"] = {k: v for k, v in split.items() if k.endswith("_s")}
    finally:
        x.destroy()
        ksp.destroy()
    return out


def solve_with_options(A: PETSc.Mat, b: PETSc.Vec, options: dict) -> dict:
    """:func:`solve_from_options` with ``options`` (``{name: value}``, no dash) in the options
    database for this solve only; a failure is a result (``error``: :func:`.bench.failure`,
    ``converged`` false), so that one method's breakdown does not end a study."""
    opts = PETSc.Options()
    for k, v in options.items():
        opts.setValue(k, v)
    try:
        return solve_from_options(A, b)
    except Exception as e:  # noqa: BLE001 - a failing method is a result
        return {"error": failure(e), "converged": False}
    finally:
        for k in options:
            opts.delValue(k)


def pc_solves(A: PETSc.Mat, b: list, N: int, config: dict | str | None) -> dict:
    """Set up CG (rtol 1e-8 on the unpreconditioned residual, at most 3000 iterations) with
    ``TwoLevelSchwarzPC(subdomains=N, **config)`` for a dictionary ``config``, or with PETSc's
    reference preconditioner ``METHODS[config].options`` for a name (``"gamg"``: GAMG's
    defaults, ``"gamg-tuned"``: threshold 0.01; ``None`` is ``"gamg"``; its options under the
    prefix ``reference_<name>_``, where the command line's win; N unused), and solve every right-hand side of ``b``:
    iterations (-1: not converged), the worst true relative residual, set-up and mean solve
    seconds (slowest rank), the PC's set-up split, n_0 and the learned or spectral coarse space's
    summary."""
    comm = A.getComm().tompi4py()
    ksp = PETSc.KSP().create(comm=A.getComm())
    ksp.setOperators(A)
    ksp.setType("cg")
    ksp.setTolerances(rtol=1e-8, max_it=3000)
    ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
    pc = ksp.getPC()
    reference = "gamg" if config is None else config if isinstance(config, str) else None
    opts, options = PETSc.Options(), {}
    if reference is not None:
        if reference not in METHODS or not METHODS[reference].options:
            raise ValueError(f"unknown reference preconditioner {reference!r}; choose from "
                             f"{', '.join(m for m in METHODS if METHODS[m].options)} or give TwoLevelSchwarzPC's "
                             f"settings as a dict")
        prefix = f"reference_{reference.replace('-', '_')}_"
        options = {prefix + k: v for k, v in METHODS[reference].options.items()
                   if not opts.hasName(prefix + k)}
        for k, v in options.items():
            opts.setValue(k, v)
        ksp.setOptionsPrefix(prefix)
        pc.setFromOptions()
    else:
        pc.setType("python")
        pc.setPythonContext(TwoLevelSchwarzPC(subdomains=N, **config))
    x = b[0].duplicate()
    try:  # the reference's options stay until its set-up has read them
        setup = wall(lambda: (ksp.setUp(), ksp.setUpOnBlocks()), comm)
    finally:
        for k in options:
            opts.delValue(k)
    runs = [solve_once(ksp, A, v, x) for v in b]
    its = [r["iterations"] if r["converged"] else -1 for r in runs]
    ctx = pc.getPythonContext() if reference is None else None
    out = {"iterations": its, "rnorm_true_max": max(r["rnorm_true"] for r in runs),
           "setup_s": setup, "solve_s": float(np.mean([r["solve_s"] for r in runs])),
           "split": dict(ctx.timing) if ctx else {},
           "n0": ctx.Phi.getSize()[1] if ctx is not None and ctx.Phi is not None else 0,
           "spectral": ctx.meta.get("spectral") if ctx else None,
           "learned": ctx.meta.get("learned") if ctx else None,
           "schwarz_attention": ctx.meta.get("schwarz_attention") if ctx else None}
    ksp.destroy(), pc.destroy(), x.destroy()
    return out
