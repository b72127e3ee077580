"""The coarse problem at scale: one coarse rank (sequential Cholesky) against the coarse problem
distributed over P ranks (``-ddlearn_coarse_ranks``) with an exact coarse solve
(``PCREDUNDANT``, the default, or ``PCTELESCOPE`` onto one rank with Cholesky) and against
three-level methods: the coarse problem solved by ddlearn's two-level PC (nested prefixes), its
subdomains groups of fine subdomains' coarse functions, with Nicolaides or a spectral space on
the third level (multilevel GenEO: the fine level's Neumann matrices projected onto
:math:`A_0`, :mod:`ddlearn.classical.splitting`), applied once (``preonly``) or by two or four
Chebyshev iterations (``-ddlearn_coarse_ksp_type chebyshev -ddlearn_coarse_ksp_norm_type none``,
still a fixed linear map for CG).

Cases (contrast 1e6, natural ordering, PETSc's rows, coordinates attached, b = 1, CG to rtol
1e-8 on the unpreconditioned residual):

- ``channels2d``: 2D ``random_channels``, box subdomains of 32² unknowns (N = 256: 512²),
  Nicolaides and spectral (k = 8) on the fine level;
- ``inclusions3d``: 3D ``random_inclusions3d``, box subdomains of 8³ unknowns (N = 216: 48³),
  spectral (k = 8) on the fine level;
- ``elasticity3d``: 3D P1 elasticity from ``examples/elasticity.py`` (16³ cells, inclusions of
  Young's modulus 1e6, b = gravity), N = 64 METIS subdomains of the client's with their
  Neumann matrices, spectral with GenEO's threshold (λ < 0.1, at most 32 per subdomain) on the
  fine level and on the third.

Recorded: iterations, set-up and solve (slowest rank), the PC's set-up split (local
factorisations, coarse triple product, coarse set-up) and apply split (local part, coarse part:
Phi^T x, coarse solve, Phi y), slowest rank::

    mpiexec -n 2 python benchmarks/coarse_solve.py [--cases channels2d inclusions3d]
             [--sizes N ...] [--out DIR]
    python benchmarks/coarse_solve.py --report     (README.md from the JSON)

Compare configurations of one run (ratios), not seconds of different runs.
"""
from __future__ import annotations

import os

import petsc4py

petsc4py.init([])
from mpi4py import MPI  # noqa: E402
from petsc4py import PETSc  # noqa: E402

from ddlearn.decomposition.problems import make_problem  # noqa: E402
from ddlearn.harness import bench  # noqa: E402
from ddlearn.harness.systems import natural_matrix  # noqa: E402

COMM = MPI.COMM_WORLD
SPACES = {"nicolaides": {"coarse_space": "nicolaides"},
          "spectral": {"coarse_space": "spectral", "spectral_nev": 8},
          # GenEO's adaptive count, as the elasticity study's "spectral aux tau"
          "spectral tau": {"coarse_space": "spectral", "spectral_nev": 32,
                           "spectral_threshold": 0.1}}
#: per case: what it is, its default N, the fine spaces, the third level's spectral settings
CASES = {
    "channels2d": {"title": "random_channels 1e6, 32² per subdomain", "N": 256,
                   "spaces": ("nicolaides", "spectral"), "third": {"spectral_nev": 8}},
    "inclusions3d": {"title": "random_inclusions3d 1e6, 8³ per subdomain", "N": 216,
                     "spaces": ("spectral",), "third": {"spectral_nev": 8}},
    "elasticity3d": {"title": "P1 elasticity (examples/elasticity.py -dim 3 -cells 16), 20 "
                              "inclusions 1e6, 13 872 dofs, the client's METIS subdomains and "
                              "Neumann matrices",
                     "N": 64, "spaces": ("spectral tau",),
                     "third": {"spectral_nev": 32, "spectral_threshold": 0.1}},
}
#: Chebyshev iterations on the coarse level: a fixed count, no norm, a fixed linear map
CHEBYSHEV = {"coarse_ksp_type": "chebyshev", "coarse_ksp_norm_type": "none"}


def configurations(N: int, size: int, case: str = "channels2d") -> dict:
    nested = {"coarse_ranks": size, "coarse_ksp_type": "preonly", "coarse_pc_type": "python",
              "coarse_pc_python_type": "ddlearn.pc.TwoLevelSchwarzPC"}
    third = {"nicolaides": {"coarse_ddlearn_coarse_space": "nicolaides"},
             "spectral": {"coarse_ddlearn_coarse_space": "spectral",
                          **{f"coarse_ddlearn_{k}": v for k, v in CASES[case]["third"].items()}}}

    def three(Nc, space, chebyshev=0):
        return {**nested, "coarse_ddlearn_subdomains": Nc, **third[space],
                **({**CHEBYSHEV, "coarse_ksp_max_it": chebyshev} if chebyshev else {})}

    return {
        "P=1 cholesky": {},
        f"P={size} redundant": {"coarse_ranks": size},
        f"P={size} telescope": {"coarse_ranks": size, "coarse_pc_type": "telescope",
                                "coarse_pc_telescope_reduction_factor": size,
                                "coarse_telescope_pc_type": "cholesky"},
        f"3-level N_c={N // 16} nicolaides": three(N // 16, "nicolaides"),
        f"3-level N_c={N // 8} nicolaides": three(N // 8, "nicolaides"),
        f"3-level N_c={N // 8} spectral": three(N // 8, "spectral"),
        f"3-level N_c={N // 8} nicolaides, chebyshev 2": three(N // 8, "nicolaides", 2),
        f"3-level N_c={N // 8} spectral, chebyshev 2": three(N // 8, "spectral", 2),
        f"3-level N_c={N // 8} spectral, chebyshev 4": three(N // 8, "spectral", 4),
    }


def system(case: str, N: int):
    """``(A, b, unknowns)`` of a case at ``N`` subdomains (box subdomains of the structured
    cases; the elasticity client's own subdomains and Neumann matrices attached)."""
    if case == "elasticity3d":
        ex = bench.load_example("elasticity")
        problem = ex.build(3, 16, contrast=1e6, seed=0)
        A, b, _ = ex.to_petsc(problem)
        ex.attach_auxiliary(A, *ex.auxiliary(problem, A, N, "metis"))
        return A, b, problem.unknowns
    family, sub, dim = {"channels2d": ("random_channels", 32, 2),
                        "inclusions3d": ("random_inclusions3d", 8, 3)}[case]
    k = int(round(N ** (1 / dim)))
    if k ** dim != N:
        raise SystemExit(f"--sizes {N}: {case} needs a {dim}-th power (k^{dim} boxes)")
    problem = make_problem(family, sub * k, contrast=1e6)
    A = natural_matrix(problem)
    b = A.createVecLeft()
    b.set(1.0)
    return A, b, problem.n


def run(A, b, prefix: str, settings: dict) -> dict:
    """One CG solve with the PC from the options database under ``prefix``."""
    opts = PETSc.Options()
    values = {"pc_type": "python", "pc_python_type": "ddlearn.pc.TwoLevelSchwarzPC",
              **{f"ddlearn_{k}": v for k, v in settings.items()}}
    for k, v in values.items():
        opts.setValue(prefix + k, str(v))
    ksp = PETSc.KSP().create(comm=A.getComm())
    ksp.setOptionsPrefix(prefix)
    ksp.setOperators(A)
    ksp.setType("cg")
    ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
    ksp.setTolerances(rtol=1e-8, atol=0.0, max_it=3000)
    ksp.setFromOptions()
    x = b.duplicate()
    setup_s = bench.wall(ksp.setUp)
    solve_s = bench.wall(lambda: ksp.solve(b, x))
    ctx = ksp.getPC().getPythonContext()
    coarse = ctx.two_level.coarse
    split = {k: COMM.allreduce(v, op=MPI.MAX) for k, v in ctx.timing.items()}
    nested = None
    if coarse.is_coarse and coarse.ksp.getPC().getType() == "python":
        inner = coarse.ksp.getPC().getPythonContext()
        nested = {"n0": inner.meta["n0"], "N": inner.subdomains.N, **inner.timing}
    nested = COMM.bcast(nested, root=coarse.ranks[0])
    out = {"iterations": ksp.getIterationNumber(), "converged": ksp.getConvergedReason() > 0,
           "setup_s": setup_s, "solve_s": solve_s, "n0": ctx.meta["n0"],
           "coarse_ranks": ctx.meta["coarse_ranks"], "coarse_solver": ctx.meta["coarse_solver"],
           "split": split, "nested": nested}
    ksp.destroy(), x.destroy()
    for k in values:
        opts.delValue(prefix + k)
    return out


def summary(data: dict) -> str:
    blocks = []
    for case, spec in CASES.items():
        runs = [r for r in data["runs"] if r.get("case", "channels2d") == case]
        if not runs:
            continue
        lines = [f"**{case}**: {spec['title']}, {data['ranks']} ranks", "",
                 "| N | fine space | coarse solve | n0 | its | its / P=1 | set-up local / "
                 "triple product / coarse set-up (s) | set-up + solve (s) | apply local / "
                 "coarse (s) | coarse share |",
                 "|---:|---|---|---:|---:|---:|---|---:|---|---:|"]
        for r in runs:
            base = next(q for q in runs if q["N"] == r["N"] and q["space"] == r["space"]
                        and q["config"] == "P=1 cholesky")
            s = r["split"]
            share = s["apply_coarse_s"] / (s["apply_local_s"] + s["apply_coarse_s"])
            its = r["iterations"] if r["converged"] else f"> {r['iterations']}"
            lines.append(f"| {r['N']} | {r['space']} | {r['config']} | {r['n0']} | "
                         f"{its} | {r['iterations'] / base['iterations']:.2f} | "
                         f"{s['local_s']:.2f} / {s['coarse_product_s']:.2f} / "
                         f"{s['coarse_setup_s']:.2f} | {r['setup_s'] + r['solve_s']:.2f} | "
                         f"{s['apply_local_s']:.2f} / {s['apply_coarse_s']:.2f} | "
                         f"{100 * share:.0f} % |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def main(argv: list[str] | None = None) -> dict:
    ap = bench.parser("coarse_solve", __doc__, "channels2d, N = 64, Nicolaides only (a smoke run)")
    ap.add_argument("--cases", nargs="+", default=None, choices=list(CASES))
    ap.add_argument("--sizes", type=int, nargs="+", default=None,
                    help="N (default: 256 for channels2d, 216 for inclusions3d, 64 for "
                         "elasticity3d)")
    ap.add_argument("--spaces", nargs="+", default=None, choices=list(SPACES))
    args = bench.parse(ap, argv)
    if args.report:
        files = bench.results(args)
        bench.write_readme(args, "The coarse problem at scale",
                           [("Table", summary(files["coarse_solve"]))], files)
        return files["coarse_solve"]
    cases = args.cases or (["channels2d"] if args.quick else list(CASES))
    data = {"ranks": COMM.Get_size(), "cores": os.cpu_count(), "runs": []}
    for case in cases:
        sizes = args.sizes or ([64] if args.quick else [CASES[case]["N"]])
        spaces = args.spaces or (["nicolaides"] if args.quick else list(CASES[case]["spaces"]))
        for N in sizes:
            A, b, n = system(case, N)
            for space in spaces:
                for j, (name, config) in enumerate(
                        configurations(N, COMM.Get_size(), case).items()):
                    r = run(A, b, f"c{case}{N}{space.replace(' ', '')}{j}_",
                            {"subdomains": N, **SPACES[space], **config})
                    r.update(case=case, N=N, n=n, space=space, config=name)
                    data["runs"].append(r)
                    bench.show(f"{case} {N} {space} {name} {r['iterations']} "
                               f"{ {k: round(v, 3) for k, v in r['split'].items()} }")
                    bench.write(args, data)
            A.destroy(), b.destroy()
    bench.show(summary(data))
    return data


if __name__ == "__main__":
    main()
