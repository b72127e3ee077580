"""A plain petsc4py program, written the way a PETSc user writes one (after petsc4py's own
``demo/poisson2d``): the 5-point diffusion operator on the unit square in *natural* ordering,
rows split by PETSc's default distribution, and a KSP configured purely from the command line.
Nothing here knows about subdomains::

    mpiexec -n 4 python examples/petsc_client.py -n 255 -ksp_type cg \\
        -pc_type python -pc_python_type ddlearn.pc.TwoLevelSchwarzPC \\
        -ddlearn_subdomains 64 -ddlearn_coarse_space nicolaides -ksp_view

Options of the program itself:

  -n N              interior points per direction (default 255)
  -contrast C       five vertical channels of coefficient C in a background of 1 (default 1:
                    the Laplacian)
  -with_coordinates hand the grid coordinates to ddlearn's PC (the one ddlearn line a user
                    adds to get box partitions and hat coarse functions)
"""
from __future__ import annotations

import sys

import numpy as np
import petsc4py

petsc4py.init(sys.argv)
from petsc4py import PETSc  # noqa: E402


def coefficient(x: np.ndarray, contrast: float) -> np.ndarray:
    """Five vertical channels of width 1/20 and value ``contrast`` in a background of 1."""
    centres = (2 * np.arange(5) + 1) / 10
    inside = np.any(np.abs(x[..., None] - centres) <= 1 / 40 + 1e-12, axis=-1)
    return np.where(inside, contrast, 1.0)


def assemble(n: int, contrast: float = 1.0, comm=PETSc.COMM_WORLD) -> PETSc.Mat:
    r""":math:`-\nabla\cdot(\kappa\nabla u)` with harmonic-mean edge coefficients, Dirichlet
    boundary, row ``iy * n + ix``; each rank assembles the rows PETSc gives it."""
    A = PETSc.Mat().createAIJ((n * n, n * n), nnz=(5, 4), comm=comm)
    A.setOption(PETSc.Mat.Option.SYMMETRIC, True)
    lo, hi = A.getOwnershipRange()
    rows = np.arange(lo, hi)
    ix, iy = rows % n, rows // n
    h = 1.0 / (n + 1)
    k_here = coefficient((ix + 1) * h, contrast)
    diag = np.zeros(len(rows))
    cols, vals = [], []
    for dx, dy in ((0, -1), (-1, 0), (1, 0), (0, 1)):
        jx, jy = ix + dx, iy + dy
        k_there = coefficient((jx + 1) * h, contrast)
        k_edge = 2 * k_here * k_there / (k_here + k_there) / h**2
        diag += k_edge
        inside = (jx >= 0) & (jx < n) & (jy >= 0) & (jy < n)
        cols.append(np.where(inside, jy * n + jx, -1))
        vals.append(np.where(inside, -k_edge, 0.0))
    cols = np.stack(cols[:2] + [rows] + cols[2:], axis=1)
    vals = np.stack(vals[:2] + [diag] + vals[2:], axis=1)
    keep = cols >= 0
    indptr = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(PETSc.IntType)
    A.setValuesCSR(indptr, cols[keep].astype(PETSc.IntType), vals[keep])
    A.assemble()
    return A


def coordinates(A: PETSc.Mat, n: int) -> np.ndarray:
    """The grid points of this rank's rows, shape ``(nlocal, 2)``."""
    lo, hi = A.getOwnershipRange()
    rows = np.arange(lo, hi)
    return np.stack([(rows % n + 1), (rows // n + 1)], axis=1) / (n + 1)


def main(argv: list[str] | None = None) -> dict:
    """Solve once; ``argv`` holds extra ``-option value`` pairs for this call only."""
    opts = PETSc.Options()
    given = dict(zip(argv[::2], argv[1::2])) if argv else {}
    for key, value in given.items():
        opts.setValue(key, value)
    try:
        n = opts.getInt("n", 255)
        contrast = opts.getReal("contrast", 1.0)
        A = assemble(n, contrast)
        ksp = PETSc.KSP().create(comm=A.getComm())
        ksp.setOperators(A)
        ksp.setTolerances(rtol=1e-8)
        ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
        if opts.getBool("with_coordinates", False):
            from ddlearn.pc import set_coordinates
            set_coordinates(A, coordinates(A, n))
        ksp.setFromOptions()
        x, b = A.createVecs()
        b.set(1.0)
        ksp.solve(b, x)
        r = b.duplicate()
        A.mult(x, r)
        r.aypx(-1.0, b)
        out = {"n": n, "iterations": ksp.getIterationNumber(),
               "reason": int(ksp.getConvergedReason()), "rnorm_true": r.norm() / b.norm()}
        PETSc.Sys.Print(f"{n}x{n}, contrast {contrast:g}: {out['iterations']} iterations, "
                        f"reason {out['reason']}, true relative residual "
                        f"{out['rnorm_true']:.2e}")
        for o in (ksp, A, x, b, r):
            o.destroy()
        return out
    finally:
        for key in given:
            opts.delValue(key)


if __name__ == "__main__":
    main()
