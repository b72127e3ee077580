"""A finite-element client: P1 elements for :math:`-\\nabla\\cdot(\\kappa\\nabla u) = 1` on an
unstructured triangular mesh of the unit square (jittered points, Delaunay triangulation, nodes
numbered by reverse Cuthill–McKee as FEM codes often do), assembled with scikit-fem, Dirichlet
nodes eliminated, and handed to PETSc in the mesh's own numbering with PETSc's default row
distribution and the nodes' coordinates. The preconditioner comes from the command line::

    mpiexec -n 4 python examples/fem_diffusion.py -m 320 -coefficient channels -contrast 1e6 \\
        -ksp_type cg -pc_type python -pc_python_type ddlearn.pc.TwoLevelSchwarzPC \\
        -ddlearn_subdomains 64

Options of the program itself:

  -m M               mesh points per side (M+1)^2 points, about (M-1)^2 unknowns (default 64)
  -coefficient {constant,channels,inclusions}   element-wise kappa (default channels)
  -contrast C        kappa in the channels / inclusions, 1 elsewhere (default 1e6)
  -seed S            mesh jitter and inclusion positions (default 0)
  -with_coordinates  attach the node coordinates for ddlearn's PC (default true)
"""
from __future__ import annotations

import sys

import numpy as np
import petsc4py
import scipy.sparse as sp

petsc4py.init(sys.argv)
from petsc4py import PETSc  # noqa: E402
from scipy.sparse.csgraph import reverse_cuthill_mckee  # noqa: E402
from scipy.spatial import Delaunay  # noqa: E402
from skfem import Basis, BilinearForm, ElementTriP0, ElementTriP1, LinearForm, MeshTri, asm  # noqa: E402
from skfem.helpers import dot, grad  # noqa: E402

COEFFICIENTS = ("constant", "channels", "inclusions")


def mesh(m: int, seed: int = 0) -> MeshTri:
    """Delaunay mesh of ``(m+1)^2`` points: a uniform grid, interior points moved at random by
    up to 0.3 h, nodes renumbered by reverse Cuthill–McKee of the mesh graph."""
    rng = np.random.default_rng(seed)
    g = np.linspace(0.0, 1.0, m + 1)
    X, Y = np.meshgrid(g, g)
    p = np.stack([X.ravel(), Y.ravel()])
    inner = (p[0] > 0) & (p[0] < 1) & (p[1] > 0) & (p[1] < 1)
    p[:, inner] += rng.uniform(-0.3 / m, 0.3 / m, (2, int(inner.sum())))
    t = Delaunay(p.T).simplices
    e = np.concatenate([t[:, [0, 1]], t[:, [1, 2]], t[:, [2, 0]]])
    G = sp.csr_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(p.shape[1],) * 2)
    order = reverse_cuthill_mckee((G + G.T).tocsr(), symmetric_mode=True)
    new = np.empty_like(order)
    new[order] = np.arange(len(order))
    return MeshTri(p[:, order], new[t].T)


def kappa(centroids: np.ndarray, name: str, contrast: float, seed: int = 0) -> np.ndarray:
    """Element coefficient at the triangles' centroids ``(2, nt)``."""
    x, y = centroids
    if name == "constant":
        return np.ones_like(x)
    if name == "channels":
        centres = (2 * np.arange(5) + 1) / 10
        inside = np.any(np.abs(x[:, None] - centres) <= 1 / 40, axis=1)
    elif name == "inclusions":
        rng = np.random.default_rng(seed + 1)
        c, r = rng.uniform(0.05, 0.95, (40, 2)), rng.uniform(0.02, 0.05, 40)
        inside = np.any((x[:, None] - c[:, 0])**2 + (y[:, None] - c[:, 1])**2 <= r**2, axis=1)
    else:
        raise ValueError(f"unknown coefficient {name!r}; choose one of {', '.join(COEFFICIENTS)}")
    return np.where(inside, contrast, 1.0)


@BilinearForm
def _diffusion(u, v, w):
    return w["kappa"] * dot(grad(u), grad(v))


@LinearForm
def _load(v, w):
    return 1.0 * v


def system(m: int, coefficient: str = "channels", contrast: float = 1e6, seed: int = 0):
    """``(A, b, coordinates)`` of the interior nodes, scipy CSR, in the mesh's numbering."""
    msh = mesh(m, seed)
    basis = Basis(msh, ElementTriP1())
    k = kappa(msh.p[:, msh.t].mean(axis=1), coefficient, contrast, seed)
    A = asm(_diffusion, basis, kappa=basis.with_element(ElementTriP0()).interpolate(k))
    b = asm(_load, basis)
    interior = basis.complement_dofs(basis.get_dofs())
    return A[interior][:, interior].tocsr(), b[interior], msh.p[:, interior].T.copy()


def to_petsc(A, comm=PETSc.COMM_WORLD) -> PETSc.Mat:
    """The scipy matrix as a distributed AIJ matrix with PETSc's default row distribution."""
    M = PETSc.Mat().createAIJ(A.shape, comm=comm)
    M.setUp()
    lo, hi = M.getOwnershipRange()
    rows = A[lo:hi]
    rows.sort_indices()
    M.setPreallocationCSR((rows.indptr.astype(PETSc.IntType), rows.indices.astype(PETSc.IntType),
                           rows.data))
    M.setOption(PETSc.Mat.Option.SYMMETRIC, True)
    M.assemble()
    return M


def main(argv: list[str] | None = None) -> dict:
    """Solve once; ``argv`` holds extra ``-option value`` pairs for this call only."""
    opts = PETSc.Options()
    given = dict(zip(argv[::2], argv[1::2])) if argv else {}
    for key, value in given.items():
        opts.setValue(key, value)
    try:
        m = opts.getInt("m", 64)
        name = opts.getString("coefficient", "channels")
        contrast = opts.getReal("contrast", 1e6)
        A_sp, b_np, coords = system(m, name, contrast, opts.getInt("seed", 0))
        A = to_petsc(A_sp)
        lo, hi = A.getOwnershipRange()
        ksp = PETSc.KSP().create(comm=A.getComm())
        ksp.setOperators(A)
        ksp.setTolerances(rtol=1e-8)
        ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
        if opts.getBool("with_coordinates", True):
            from ddlearn.pc import set_coordinates
            set_coordinates(A, coords[lo:hi])
        ksp.setFromOptions()
        x, b = A.createVecs()
        b.setArray(b_np[lo:hi])
        ksp.solve(b, x)
        r = b.duplicate()
        A.mult(x, r)
        r.aypx(-1.0, b)
        out = {"unknowns": A_sp.shape[0], "iterations": ksp.getIterationNumber(),
               "reason": int(ksp.getConvergedReason()), "rnorm_true": r.norm() / b.norm()}
        PETSc.Sys.Print(f"P1 FEM, {out['unknowns']} unknowns, {name} contrast {contrast:g}: "
                        f"{out['iterations']} iterations, reason {out['reason']}, true relative "
                        f"residual {out['rnorm_true']:.2e}")
        for o in (ksp, A, x, b, r):
            o.destroy()
        return out
    finally:
        for key in given:
            opts.delValue(key)


if __name__ == "__main__":
    main()
