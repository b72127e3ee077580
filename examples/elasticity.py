"""Linear elasticity, a user-style petsc4py program: P1 (or Q1) vector elements (scikit-fem) on
the unit square or cube, clamped at x = 0, under gravity, Poisson ratio 0.3, Young's modulus 1
with random stiff circular (2D) or spherical (3D) inclusions of modulus ``-contrast`` (or one
ball at the centre), evaluated at the quadrature points. The clamped nodes are removed (scikit-fem numbers the dofs node-wise,
``dim * node + component``, so the block structure survives), the matrix is a distributed AIJ
matrix in the mesh's node numbering with PETSc's default rows split into whole nodes, block
size ``dim``, and the rigid-body modes as its near-null space. The solver comes from the
command line::

    mpiexec -n 4 python examples/elasticity.py -dim 3 -cells 16 -contrast 1e6 \\
        -ksp_type cg -pc_type gamg

    mpiexec -n 4 python examples/elasticity.py -dim 3 -cells 16 -contrast 1e6 -aux -parts 64 \\
        -ksp_type cg -pc_type python -pc_python_type ddlearn.pc.TwoLevelSchwarzPC \\
        -ddlearn_coarse_space spectral -ddlearn_spectral_nev 8

    mpiexec -n 4 python examples/elasticity.py -dim 3 -cells 16 -matis \\
        -ksp_type cg -pc_type python -pc_python_type ddlearn.pc.TwoLevelSchwarzPC

Options of the program itself:

  -dim {2,3}         dimension (default 2)
  -element {p1,q1}   P1 on simplices (default) or Q1 on squares / hexahedra
  -cells n           n cells per side (P1: n^2 squares cut in 2 triangles, n^3 cubes in 5
                     tetrahedra; default 32 in 2D, 8 in 3D)
  -nu v              Poisson ratio (default 0.3; towards 0.5 nearly incompressible)
  -ball              instead of random inclusions one ball (disc) of radius 0.25 at the centre,
                     PETSc's ksp tutorial ex56's sphere (there 1e-3, soft, by default)
  -refine r          instead of -cells: scikit-fem's reference mesh refined r times
  -contrast C        Young's modulus in the inclusions, 1 elsewhere (default 1e6)
  -inclusions K      number of inclusions (default 40 in 2D, 20 in 3D)
  -seed S            inclusion centres and radii (default 0)
  -aux               give the PC this program's own overlapping subdomains and their Neumann
                     matrices (ddlearn.pc.set_subdomains / set_auxiliary_matrices)
  -parts N           number of those subdomains (default 4 per rank)
  -aux_partition {metis,rcb}   how the mesh's elements are split (default metis)
  -rigid_body_modes  attach the rigid-body modes as near-null space (default true)
  -intorder q        quadrature order (default scikit-fem's, twice the element's degree: 4^3
                     points on a Q1 hexahedron; 3 is the 2 x 2 x 2 Gauss rule)
  -distributed       each rank assembles only the elements touching its own rows and keeps
                     those rows (default: every rank assembles the whole mesh)
  -matis             the matrix unassembled (MATIS), as PCBDDC and PCHPDDM take it: the
                     elements split into one part per rank (-aux_partition), each rank's local
                     matrix its part's stiffness (its subdomain's Neumann matrix)
  -o FILE            write the result as JSON

The assembly, the subdomains of ``-aux`` and the distributed assembly are
:mod:`ddlearn.harness.fem`'s; the solve is
:func:`ddlearn.harness.systems.solve_from_options`.
"""
from __future__ import annotations

import json
import sys

import petsc4py

petsc4py.init(sys.argv)
from petsc4py import PETSc  # noqa: E402

from ddlearn.harness.bench import peak_mb_ranks, peak_reset  # noqa: E402
from ddlearn.harness.fem import NU, attach_auxiliary, auxiliary, build, to_matis, to_petsc  # noqa: E402
from ddlearn.harness.systems import solve_from_options  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    """Solve once; ``argv`` holds extra ``-option value`` pairs for this call only (a flag
    without a value: ``"-aux", "1"``)."""
    opts = PETSc.Options()
    given = dict(zip(argv[::2], argv[1::2])) if argv else {}
    for key, value in given.items():
        opts.setValue(key, value)
    try:
        dim = opts.getInt("dim", 2)
        cells = opts.getInt("cells", 0) or None
        refine = opts.getInt("refine", -1)
        contrast = opts.getReal("contrast", 1e6)
        count = opts.getInt("inclusions", 0) if opts.hasName("inclusions") else None
        element = opts.getString("element", "p1")
        intorder = opts.getInt("intorder", 0) or None
        problem = build(dim, cells, None if refine < 0 else refine, contrast,
                        opts.getInt("seed", 0), count, element, opts.getReal("nu", NU),
                        opts.getBool("ball", False), intorder,
                        assemble=not opts.getBool("distributed", False))
        modes = opts.getBool("rigid_body_modes", True)
        matis = opts.getBool("matis", False)
        if matis:
            A, b, coords = to_matis(problem, method=opts.getString("aux_partition", "metis"),
                                    rigid_body_modes=modes)
        else:
            A, b, coords = to_petsc(problem, rigid_body_modes=modes)
        comm = A.getComm()
        parts = None
        if opts.getBool("aux", False):
            if matis:
                raise ValueError("-aux with -matis: a MATIS matrix carries its subdomains' "
                                 "Neumann matrices itself; drop one of them")
            parts = opts.getInt("parts", 4 * comm.getSize())
            attach_auxiliary(A, *auxiliary(problem, A, parts,
                                           opts.getString("aux_partition", "metis")))
        out = {"dim": dim, "element": element, "unknowns": A.getSize()[0],
               "distributed": problem.A is None, "intorder": intorder,
               "elements": problem.mesh.t.shape[1], "contrast": contrast, "nu": problem.nu,
               "ranks": comm.getSize(), "aux_parts": parts, "matis": matis}
        peak_reset()
        out.update(solve_from_options(A, b))
        out["peak_mb"] = peak_mb_ranks(comm.tompi4py())
        PETSc.Sys.Print(f"elasticity {dim}D {element.upper()}, {out['unknowns']} dofs, contrast {contrast:g}, "
                        f"{out['pc']}: {out['iterations']} iterations, {out['reason_name']}, true "
                        f"relative residual {out['rnorm_true']:.2e}, set-up "
                        f"{out['setup_s']:.2f} s, solve {out['solve_s']:.2f} s" +
                        (f", n0 = {out['n0']}" if out["n0"] is not None else ""))
        path = opts.getString("o", "")
        if path and comm.getRank() == 0:
            with open(path, "w") as f:
                json.dump(out, f, indent=1)
        for o in (A, b, coords):
            o.destroy()
        return out
    finally:
        for key in given:
            opts.delValue(key)


if __name__ == "__main__":
    main()
