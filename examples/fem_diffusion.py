"""A finite-element client: P1 elements for :math:`-\\nabla\\cdot(\\kappa\\nabla u) = 1` with
homogeneous Dirichlet conditions, assembled with scikit-fem, Dirichlet nodes eliminated, and
handed to PETSc in the mesh's own numbering with PETSc's default row distribution and the
nodes' coordinates. The preconditioner comes from the command line, nothing else selects it::

    mpiexec -n 4 python examples/fem_diffusion.py -m 320 -coefficient channels -contrast 1e6 \\
        -ksp_type cg -pc_type python -pc_python_type ddlearn.pc.TwoLevelSchwarzPC \\
        -ddlearn_subdomains 64

    mpiexec -n 4 python examples/fem_diffusion.py -dim 3 -m 24 -coefficient inclusions \\
        -contrast 1e6 -ksp_type cg -pc_type python \\
        -pc_python_type ddlearn.pc.TwoLevelSchwarzPC -ddlearn_subdomains 32 \\
        -ddlearn_partition rcb -ddlearn_coarse_space spectral

2D (``-dim 2``, the default): an unstructured triangular mesh of the unit square (jittered
points, Delaunay triangulation, nodes numbered by reverse Cuthill–McKee as FEM codes often do);
every rank assembles the whole matrix and keeps its rows.

3D (``-dim 3``): P1 tetrahedra on the unit cube (scikit-fem's tensor mesh of ``m^3`` cubes, six
tetrahedra each, interior nodes moved at random by up to 0.15 h) or, with ``-geometry ball``, on
the ball of radius 1/2 centred in the unit cube (scikit-fem's ball mesh refined ``-refine``
times: curved boundary, no tensor structure), nodes renumbered by reverse Cuthill–McKee; the
coefficient is one of ddlearn's seeded 3D families (:mod:`ddlearn.decomposition.coefficients`)
at the element centroids, and each rank assembles only the elements that touch the rows it
owns.

Options of the program itself:

  -dim {2,3}         dimension (default 2)
  -m M               mesh points per side: 2D (M+1)^2 points, about (M-1)^2 unknowns (default
                     64); 3D cube M^3 cells, (M-1)^3 unknowns (default 16)
  -coefficient NAME  element-wise kappa: 2D constant, channels (default) or inclusions; 3D
                     constant, channels, inclusions (default) or lognormal (the 3D families)
  -contrast C        kappa in the channels / inclusions, 1 elsewhere (default 1e6)
  -seed S            mesh jitter and inclusion positions (default 0)
  -geometry {cube,ball}   3D domain (default cube)
  -refine R          refinements of the 3D ball mesh (default 4: 6 017 nodes)
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
from skfem import (Basis, BilinearForm, ElementTetP0, ElementTetP1, ElementTriP0,  # noqa: E402
                   ElementTriP1, LinearForm, MeshTet, MeshTri, asm)
from skfem.helpers import dot, grad  # noqa: E402

from ddlearn.decomposition.coefficients import FAMILIES, family_field  # noqa: E402

COEFFICIENTS = ("constant", "channels", "inclusions")
COEFFICIENTS_3D = ("constant", *FAMILIES)
GEOMETRIES = ("cube", "ball")


def _rcm(p: np.ndarray, t: np.ndarray):
    """Points and elements renumbered by reverse Cuthill–McKee of the mesh graph (every pair of
    an element's vertices is an edge)."""
    k = t.shape[0]
    e = np.concatenate([t[[a, b]].T for a in range(k) for b in range(a + 1, k)])
    G = sp.csr_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(p.shape[1],) * 2)
    order = reverse_cuthill_mckee((G + G.T).tocsr(), symmetric_mode=True)
    new = np.empty_like(order)
    new[order] = np.arange(len(order))
    return np.ascontiguousarray(p[:, order]), np.ascontiguousarray(new[t])


def mesh(m: int, seed: int = 0) -> MeshTri:
    """Delaunay mesh of ``(m+1)^2`` points: a uniform grid, interior points moved at random by
    up to 0.3 h, nodes renumbered by reverse Cuthill–McKee of the mesh graph."""
    rng = np.random.default_rng(seed)
    g = np.linspace(0.0, 1.0, m + 1)
    X, Y = np.meshgrid(g, g)
    p = np.stack([X.ravel(), Y.ravel()])
    inner = (p[0] > 0) & (p[0] < 1) & (p[1] > 0) & (p[1] < 1)
    p[:, inner] += rng.uniform(-0.3 / m, 0.3 / m, (2, int(inner.sum())))
    return MeshTri(*_rcm(p, Delaunay(p.T).simplices.T))


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


def mesh3d(m: int = 16, seed: int = 0, geometry: str = "cube", refine: int = 4) -> MeshTet:
    """P1 tetrahedra of the unit cube (``m^3`` cubes of six tetrahedra, interior nodes moved at
    random by up to 0.15 h per coordinate: less than the smallest height of a tetrahedron, so
    none is inverted) or of the ball of radius 1/2 centred in the unit cube (scikit-fem's ball
    mesh refined ``refine`` times), nodes renumbered by reverse Cuthill–McKee."""
    if geometry == "cube":
        g = np.linspace(0.0, 1.0, m + 1)
        msh = MeshTet.init_tensor(g, g, g)
        p = msh.p.copy()
        inner = np.all((p > 0) & (p < 1), axis=0)
        p[:, inner] += np.random.default_rng(seed).uniform(-0.15 / m, 0.15 / m,
                                                           (3, int(inner.sum())))
    elif geometry == "ball":
        msh = MeshTet.init_ball(refine)
        p = 0.5 + 0.5 * msh.p / np.linalg.norm(msh.p, axis=0).max()
    else:
        raise ValueError(f"unknown -geometry {geometry!r}; choose one of {', '.join(GEOMETRIES)}")
    t = msh.t

    def signed_volumes(q):
        # 6 x volume = det[x1 - x0, x2 - x0, x3 - x0] per element
        return np.linalg.det(np.moveaxis(q[:, t[1:]] - q[:, t[:1]], 2, 0))
    if np.any(signed_volumes(p) * signed_volumes(msh.p) <= 0):
        raise ValueError("the mesh jitter inverted a tetrahedron")  # a safeguard, not expected
    return MeshTet(*_rcm(p, t))


def kappa3d(centroids: np.ndarray, name: str, contrast: float, seed: int = 0) -> np.ndarray:
    """Element coefficient at the tetrahedra's centroids ``(3, nt)``: 1, or ddlearn's seeded 3D
    family ``name`` (channels over layers, inclusions, lognormal) with values in
    ``[1, contrast]``."""
    if name == "constant":
        return np.ones(centroids.shape[1])
    if name not in FAMILIES:
        raise ValueError(f"unknown -coefficient {name!r} in 3D; choose one of "
                         f"{', '.join(COEFFICIENTS_3D)}")
    return family_field(name, contrast, seed, dim=3)(*centroids)


def system3d(m: int = 16, coefficient: str = "inclusions", contrast: float = 1e6,
             seed: int = 0, geometry: str = "cube", refine: int = 4, comm=None):
    """This rank's part of the 3D system: ``(rows, b, coordinates, (lo, hi), n)``, the rows
    ``lo:hi`` of ``A`` (scipy CSR, shape ``(hi - lo, n)``, all ``n`` interior nodes as columns,
    mesh numbering), of ``b`` and of the node coordinates, for PETSc's default distribution of
    ``n`` rows on ``comm`` (all rows when ``comm`` is None).

    Only the elements with a node among the rows ``lo:hi`` are assembled: they are all the
    elements that contribute to those rows. The coefficient is evaluated on every element, so a
    family normalised over its points (lognormal) is the same field on every rank.
    """
    msh = mesh3d(m, seed, geometry, refine)
    k = kappa3d(msh.p[:, msh.t].mean(axis=1), coefficient, contrast, seed)
    interior = np.setdiff1d(np.arange(msh.p.shape[1]), msh.boundary_nodes())
    n = len(interior)
    if comm is None:
        lo, hi = 0, n
    else:
        probe = PETSc.Vec().createMPI(n, comm=comm)  # PETSc's default row distribution
        lo, hi = probe.getOwnershipRange()
        probe.destroy()
    own = interior[lo:hi]
    mine = np.zeros(msh.p.shape[1], dtype=bool)
    mine[own] = True
    elements = np.flatnonzero(mine[msh.t].any(axis=0))
    if len(elements) == 0:
        return sp.csr_matrix((0, n)), np.zeros(0), np.zeros((0, 3)), (lo, hi), n
    basis = Basis(msh, ElementTetP1(), elements=elements)
    A = asm(_diffusion, basis, kappa=basis.with_element(ElementTetP0()).interpolate(k))
    b = asm(_load, basis)
    rows = A.tocsr()[own][:, interior].tocsr()
    rows.sort_indices()
    return rows, b[own], msh.p[:, own].T.copy(), (lo, hi), n


def rows_to_petsc(rows: sp.csr_matrix, n: int, comm=PETSc.COMM_WORLD) -> PETSc.Mat:
    """A distributed AIJ matrix from this rank's rows (PETSc's default distribution, global
    columns), exactly preallocated."""
    M = PETSc.Mat().createAIJ(((rows.shape[0], n), (rows.shape[0], n)), comm=comm,
                              csr=(rows.indptr.astype(PETSc.IntType),
                                   rows.indices.astype(PETSc.IntType), rows.data))
    M.setOption(PETSc.Mat.Option.SYMMETRIC, True)
    M.assemble()
    return M


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
        dim = opts.getInt("dim", 2)
        if dim not in (2, 3):
            raise ValueError(f"-dim {dim}: the FEM client is 2D or 3D; use -dim 2 or -dim 3")
        contrast = opts.getReal("contrast", 1e6)
        seed = opts.getInt("seed", 0)
        if dim == 2:
            m = opts.getInt("m", 64)
            name = opts.getString("coefficient", "channels")
            A_sp, b_np, coords = system(m, name, contrast, seed)
            A = to_petsc(A_sp)
            lo, hi = A.getOwnershipRange()
            b_np, coords, n = b_np[lo:hi], coords[lo:hi], A_sp.shape[0]
        else:
            name = opts.getString("coefficient", "inclusions")
            rows, b_np, coords, _, n = system3d(
                opts.getInt("m", 16), name, contrast, seed, opts.getString("geometry", "cube"),
                opts.getInt("refine", 4), comm=PETSc.COMM_WORLD)
            A = rows_to_petsc(rows, n)
        ksp = PETSc.KSP().create(comm=A.getComm())
        ksp.setOperators(A)
        ksp.setTolerances(rtol=1e-8)
        ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
        if opts.getBool("with_coordinates", True):
            from ddlearn.pc import set_coordinates
            set_coordinates(A, coords)
        ksp.setFromOptions()
        x, b = A.createVecs()
        b.setArray(b_np)
        ksp.solve(b, x)
        r = b.duplicate()
        A.mult(x, r)
        r.aypx(-1.0, b)
        out = {"unknowns": n, "iterations": ksp.getIterationNumber(),
               "reason": int(ksp.getConvergedReason()), "rnorm_true": r.norm() / b.norm()}
        PETSc.Sys.Print(f"P1 FEM {dim}D, {out['unknowns']} unknowns, {name} contrast "
                        f"{contrast:g}: "
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
