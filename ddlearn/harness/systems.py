"""The linear systems the benchmarks solve as a user's program would hand them to the PC.

- :func:`natural_matrix`: a problem's matrix in the natural ordering, PETSc's default rows,
  the grid coordinates attached;
- :func:`pc_solves`: CG with ``ddlearn.pc.TwoLevelSchwarzPC`` (or one of PETSc's reference
  preconditioners, :data:`ddlearn.harness.options.PETSC_REFERENCE`: GAMG with its defaults or
  tuned) on several right-hand sides, with the set-up split and the coarse space's summary.
"""
from __future__ import annotations

import numpy as np
from petsc4py import PETSc

from ddlearn.pc import TwoLevelSchwarzPC, set_coordinates

from .bench import wall
from .options import PETSC_REFERENCE

__all__ = ["natural_matrix", "pc_solves"]


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


def pc_solves(A: PETSc.Mat, b: list, N: int, config: dict | str | None) -> dict:
    """Set up CG (rtol 1e-8 on the unpreconditioned residual, at most 3000 iterations) with
    ``TwoLevelSchwarzPC(subdomains=N, **config)`` for a dictionary ``config``, or with PETSc's
    reference preconditioner ``PETSC_REFERENCE[config]`` for a name (``"gamg"``: GAMG's
    defaults, ``"gamg-tuned"``: threshold 0.01; ``None`` is ``"gamg"``; its options under the
    prefix ``reference_<name>_``, where the command line's win; N unused), and solve every right-hand side of ``b``:
    iterations (-1: not converged), the worst true relative residual, set-up and mean solve
    seconds (slowest rank), the PC's set-up split, n_0 and the coarse space's summary."""
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
        if reference not in PETSC_REFERENCE:
            raise ValueError(f"unknown reference preconditioner {reference!r}; choose from "
                             f"{', '.join(PETSC_REFERENCE)} or give TwoLevelSchwarzPC's "
                             f"settings as a dict")
        prefix = f"reference_{reference.replace('-', '_')}_"
        options = {prefix + k: v for k, v in PETSC_REFERENCE[reference].items()
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
    its, solve, res = [], [], []
    for v in b:
        solve.append(wall(lambda: ksp.solve(v, x), comm))
        its.append(ksp.getIterationNumber() if ksp.getConvergedReason() > 0 else -1)
        r = v.duplicate()
        A.mult(x, r)
        r.aypx(-1.0, v)
        res.append(r.norm() / v.norm())
        r.destroy()
    ctx = pc.getPythonContext() if reference is None else None
    out = {"iterations": its, "rnorm_true_max": max(res), "setup_s": setup,
           "solve_s": float(np.mean(solve)),
           "split": dict(ctx.timing) if ctx else {},
           "n0": ctx.Phi.getSize()[1] if ctx is not None and ctx.Phi is not None else 0,
           "spectral": ctx.meta.get("spectral") if ctx else None,
           "learned": ctx.meta.get("learned") if ctx else None}
    ksp.destroy(), pc.destroy(), x.destroy()
    return out
