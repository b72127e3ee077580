r"""Time to solution: where ddlearn's two-level Schwarz wins and where tuned AMG does, measured
side by side in one run (the map of ``docs/time_to_solution.md``).

    mpiexec -n 4 python benchmarks/time_to_solution.py [--quick] [--out DIR] [--cases ...]
             [--name STEM]
    python benchmarks/time_to_solution.py --report     (README.md and the plots from the JSONs)

``--name`` writes ``<STEM>.json`` and its plot (default ``time_to_solution``): a run on another
rank count beside the main one (the committed ``time_to_solution_8ranks``: 8 ranks on the
2-core machine, oversubscribed, the 3D diffusion cases). The report has a map and a table per
JSON.

Every matrix reaches the preconditioners as a C program would hand it over: the assembled AIJ
matrix in its own numbering, PETSc's default rows, the block size and the near-null space
(rigid-body modes for elasticity, ``MatSetNearNullSpace``), the coordinates; no Neumann matrices.

Cases (``--cases``; sizes of the full run, ``--quick`` a few thousand unknowns):

- ``ball-stiff`` / ``ball-soft``: PETSc's ksp tutorial ex56 built here (examples/elasticity.py
  ``-element q1 -ball``): 3D Q1 elasticity, ν = 0.25, a ball of radius 0.25 at the centre of
  modulus 1e6 / 1e-3, clamped at x = 0 (ex56 clamps a face too), 23³ cells, 39 744 dofs;
- ``nu-0.49``, ``nu-0.499``, ``nu-0.4999``: the same without the ball, nearly incompressible
  (Q1 displacements lock as ν → 1/2: the condition number grows like 1/(1 - 2ν));
- ``inclusions-elasticity``: 3D P1 elasticity, 20 random stiff balls of modulus 1e6, ν = 0.3,
  14³ cells in tetrahedra (the elasticity study's 3D case), 9 450 dofs;
- ``inclusions3d``, ``channels3d``: 7-point diffusion, the random families of contrast 1e6,
  31³ = 29 791 unknowns;
- ``layers3d``: 7-point diffusion, four thin stiff horizontal layers (two grid cells thick) of
  contrast 1e6, 31³;
- ``channels2d``, ``inclusions2d``: 5-point diffusion, the random families of contrast 1e6,
  255²;
- ``anisotropic2d``: 5-point diffusion :math:`-(\epsilon u_{xx} + u_{yy})`, ε = 1e-4, 255²
  (grid-aligned anisotropy).

Methods: PETSc's ``gamg`` (defaults), ``gamg-tuned`` (threshold 0.01) and ``gamg-sor`` (threshold
0.01, SSOR smoothing; :data:`ddlearn.harness.methods.METHODS`), all with the near-null
space, PETSc's own two-level Schwarz ``mg-gdsw`` (PCMG, additive, one ASM block per rank with
LU, PETSc's GDSW coarse space), and ddlearn's
``TwoLevelSchwarzPC`` with one and with eight subdomains per rank, overlap 1, CHOLMOD local
solves where the build has them: for systems its default (``harmonic``: GDSW split by
coefficient and enriched by sampled A-harmonic traces), ``gdsw`` (split by coefficient),
``gdsw`` unsplit and ``nicolaides``, each with the balanced coarse correction, the default on
systems (``spectral`` is refused: the algebraic Neumann matrices of elasticity are indefinite); for
scalar problems its default (``hats`` on the box partition), ``gdsw``, ``harmonic`` and
``spectral`` (8 vectors per subdomain, Dirichlet pencil). CG to rtol 1e-8 on the
unpreconditioned residual, the right-hand side of the case (elasticity: its load; diffusion:
f = 1), zero start, at most 3000 iterations. Times: slowest rank, barriers around set-up and
solve; ranks share the machine's cores (say so), so compare methods within one run: the table
gives every total as a ratio to ``gamg-tuned``'s.
"""
from __future__ import annotations

import os
import sys

import numpy as np  # noqa: E402
import petsc4py  # noqa: E402
import scipy.sparse as sp  # noqa: E402

petsc4py.init([sys.argv[0]])
from petsc4py import PETSc  # noqa: E402

from ddlearn.decomposition.problems import Diffusion2D, Diffusion3D, make_problem  # noqa: E402
from ddlearn.harness import bench, fem  # noqa: E402
from ddlearn.harness.report import plt, save_figure  # noqa: E402
from ddlearn.harness.methods import METHODS  # noqa: E402
from ddlearn.harness.study import Rows  # noqa: E402
from ddlearn.harness.systems import natural_matrix, solve_with_options  # noqa: E402
from ddlearn.pc import set_coordinates  # noqa: E402

CONTRAST = 1e6
#: name -> (kind, parameters of the full run, parameters of --quick)
CASES = {
    "ball-stiff": ("elasticity", dict(dim=3, cells=23, element="q1", ball=True,
                                      contrast=CONTRAST, nu=0.25), dict(cells=7)),
    "ball-soft": ("elasticity", dict(dim=3, cells=23, element="q1", ball=True, contrast=1e-3,
                                     nu=0.25), dict(cells=7)),
    "nu-0.49": ("elasticity", dict(dim=3, cells=15, element="q1", contrast=1.0, count=0,
                                   nu=0.49), dict(cells=5)),
    "nu-0.499": ("elasticity", dict(dim=3, cells=15, element="q1", contrast=1.0, count=0,
                                    nu=0.499), dict(cells=5)),
    "nu-0.4999": ("elasticity", dict(dim=3, cells=15, element="q1", contrast=1.0, count=0,
                                     nu=0.4999), dict(cells=5)),
    "inclusions-elasticity": ("elasticity", dict(dim=3, cells=14, contrast=CONTRAST, nu=0.3),
                              dict(cells=4)),
    "inclusions3d": ("diffusion", dict(name="random_inclusions3d", n=31), dict(n=11)),
    "channels3d": ("diffusion", dict(name="random_channels3d", n=31), dict(n=11)),
    "layers3d": ("diffusion", dict(name="layers3d", n=31), dict(n=11)),
    "channels2d": ("diffusion", dict(name="random_channels", n=255), dict(n=31)),
    "inclusions2d": ("diffusion", dict(name="random_inclusions", n=255), dict(n=31)),
    "anisotropic2d": ("diffusion", dict(name="anisotropic2d", n=255), dict(n=31)),
}
PC = {"pc_type": "python", "pc_python_type": "ddlearn.pc.TwoLevelSchwarzPC"}
#: ddlearn's configurations per kind of problem ("default": no coarse-space option)
DDLEARN = {
    "elasticity": {"default": {}, "gdsw": {"ddlearn_coarse_space": "gdsw"},
                   "gdsw unsplit": {"ddlearn_coarse_space": "gdsw",
                                    "ddlearn_gdsw_split_ratio": "0"},
                   "nicolaides": {"ddlearn_coarse_space": "nicolaides"}},
    "diffusion": {"default": {}, "gdsw": {"ddlearn_coarse_space": "gdsw"},
                  "harmonic": {"ddlearn_coarse_space": "harmonic"},
                  "spectral": {"ddlearn_coarse_space": "spectral",
                               "ddlearn_spectral_nev": "8"}},
}
#: the GAMG variants: "GAMG's best" is the fastest of them
GAMG = ("gamg", "gamg-tuned", "gamg-sor")
PETSC = {name: METHODS[name].options for name in (*GAMG, "mg-gdsw")}
PER_RANK = (1, 8)


def layers3d(n: int) -> Diffusion3D:
    """Four thin stiff horizontal layers (two grid cells thick) of contrast 1e6 in the cube."""
    h = 1.0 / (n + 1)

    def kappa(x, y, z):
        return np.where(np.abs(((z + 0.125) % 0.25) - 0.125) < h, CONTRAST, 1.0)
    return Diffusion3D(n, kappa, label="layers3d", info={"contrast": CONTRAST})


def anisotropic2d(n: int, epsilon: float = 1e-4):
    r"""``(problem, matrix)``: :math:`-(\epsilon u_{xx} + u_{yy})` by the 5-point scheme,
    :math:`\epsilon T \otimes I + I \otimes T` in the natural ordering (x fastest), :math:`T`
    the 1D Dirichlet Laplacian; the problem (a constant-coefficient one) gives the grid and the
    coordinates."""
    h = 1.0 / (n + 1)
    T = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1]) / h ** 2
    eye = sp.identity(n)
    M = (sp.kron(eye, epsilon * T) + sp.kron(T, eye)).tocsr()
    M.sort_indices()
    return make_problem("poisson2d", n), M


def diffusion_problem(name: str, n: int):
    """``(problem, matrix)``: the case's diffusion problem; ``matrix`` ``None`` where the
    problem assembles its own."""
    if name == "layers3d":
        return layers3d(n), None
    if name == "anisotropic2d":
        return anisotropic2d(n)
    return make_problem(name, n, contrast=CONTRAST, seed=0), None


def build_case(kind: str, params: dict):
    """The case's problem (scipy, on every rank): an elasticity problem of the example, or a
    ``(problem, matrix)`` pair of :func:`diffusion_problem`; built once for all methods."""
    if kind == "elasticity":
        return fem.build(params["dim"], params["cells"], contrast=params["contrast"],
                        count=params.get("count"), element=params.get("element", "p1"),
                        nu=params["nu"], ball=params.get("ball", False))
    return diffusion_problem(params["name"], params["n"])


def _matrix_and_rhs(kind: str, problem):
    """``(A, b, keep)``: the case's PETSc matrix and right-hand side (``keep``: objects to
    destroy with them), fresh for each method."""
    if kind == "elasticity":
        A, b, coords = fem.to_petsc(problem)
        return A, b, [coords]
    p, M = problem
    if M is None:
        A = natural_matrix(p)
    else:  # natural_matrix's layout and coordinates with this matrix's values
        A = PETSc.Mat().createAIJ((p.n, p.n), comm=PETSc.COMM_WORLD)
        A.setUp()
        lo, hi = A.getOwnershipRange()
        rows = M[lo:hi]
        A.setPreallocationCSR((rows.indptr, rows.indices, rows.data))
        A.setOption(PETSc.Mat.Option.SYMMETRIC, True)
        A.assemble()
        set_coordinates(A, p.coordinates(np.arange(lo, hi)))
    b = A.createVecLeft()
    b.set(1.0)
    return A, b, []


def run_one(kind: str, problem, method: str, N: int | None, max_it: int) -> dict:
    """One solve with ``method``'s options on a fresh matrix; a failure is a result."""
    options = {"ksp_type": "cg", "ksp_rtol": "1e-8", "ksp_max_it": str(max_it)}
    if method in PETSC:
        options.update(PETSC[method])
    else:
        options.update(PC, **DDLEARN[kind][method], ddlearn_subdomains=str(N))
    A, b, keep = _matrix_and_rhs(kind, problem)
    rec = {"method": method, "N": N, "dofs": A.getSize()[0], "options": options,
           **solve_with_options(A, b, options)}
    if "error" not in rec:
        rec["total_s"] = rec["setup_s"] + rec["solve_s"]
    for o in (A, b, *keep):
        o.destroy()
    return rec


def benchmark(args) -> dict:
    ranks = PETSc.COMM_WORLD.getSize()
    data = {"ranks": ranks, "cores": os.cpu_count(), "max_it": args.max_it,
            "quick": args.quick, "per_rank": list(PER_RANK), "cases": {}}
    rows = Rows(args, data, lambda r: (r["case"], r["method"], r["N"]), args.name)
    # a kept row of a configuration the study no longer runs is dropped
    data["rows"] = [r for r in data["rows"] if r["method"] in PETSC
                    or r["method"] in DDLEARN[CASES[r["case"]][0]]]
    for case in args.cases:
        kind, params, quick = CASES[case]
        params = {**params, **(quick if args.quick else {})}
        data["cases"][case] = {"kind": kind, **params}
        runs = [(m, None) for m in PETSC] + [(m, k * ranks) for k in PER_RANK
                                             for m in DDLEARN[kind]]
        problem = build_case(kind, params)
        for method, N in runs:
            if rows.done((case, method, N)) or args.methods and method not in args.methods:
                continue
            rec = rows.add({"case": case, **run_one(kind, problem, method, N, args.max_it)})
            PETSc.Sys.Print(f"{case} {method} N={N}: {bench.outcome(rec)} "
                            + (f"{rec['setup_s']:.2f} + {rec['solve_s']:.2f} s"
                               if "total_s" in rec else rec.get("error", "")[:200]))
    return data


def _name(rec: dict) -> str:
    return rec["method"] if rec["N"] is None else f"{rec['method']} N={rec['N']}"


def best_ddlearn(rows: list[dict]) -> dict | None:
    """The converged ddlearn run of least total time."""
    ok = [r for r in rows if r["N"] is not None and r.get("converged")]
    return min(ok, key=lambda r: r["total_s"]) if ok else None


def table(data: dict) -> str:
    lines = [f"{data['ranks']} ranks on {data['cores']} cores"
             + (" (oversubscribed)" if data["ranks"] > (data["cores"] or 1) else "")
             + f", CG rtol 1e-8, at most {data['max_it']} iterations; times in seconds "
             "(slowest rank), total / gamg-tuned's in the last column", "",
             "| case | dofs | method | its | set-up | solve | total | / gamg-tuned |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
    for case in data["cases"]:
        rows = [r for r in data["rows"] if r["case"] == case]
        ref = next((r for r in rows if r["method"] == "gamg-tuned" and r.get("converged")),
                   None)
        for r in rows:
            t = (f"{r['setup_s']:.2f} | {r['solve_s']:.2f} | {r['total_s']:.2f} | "
                 + (f"{r['total_s'] / ref['total_s']:.2f}" if ref and r.get("converged")
                    else "–")) if "total_s" in r else "– | – | – | –"
            lines.append(f"| {case} | {r['dofs']} | {_name(r)} | {bench.outcome(r)} | {t} |")
    return "\n".join(lines)


def best_gamg(rows: list[dict]) -> dict | None:
    """The converged GAMG run (defaults, tuned, tuned with SSOR smoothing) of least total
    time: a user picks the GAMG that works best (Chebyshev's eigenvalue estimate can make tuned
    GAMG indefinite, SSOR needs none)."""
    ok = [r for r in rows if r["method"] in GAMG and r.get("converged")]
    return min(ok, key=lambda r: r["total_s"]) if ok else None


def map_table(data: dict) -> str:
    """Per case: ddlearn's best run against GAMG's best (tuned unless it failed)."""
    lines = ["| case | ddlearn's best | its | total s | GAMG's best | its | total s | "
             "ratio | winner |", "|---|---|---:|---:|---|---:|---:|---:|---|"]
    for case in data["cases"]:
        rows = [r for r in data["rows"] if r["case"] == case]
        ref, best = best_gamg(rows), best_ddlearn(rows)
        if ref is None or best is None:
            continue
        ratio = best["total_s"] / ref["total_s"]
        lines.append(f"| {case} | {_name(best)} | {best['iterations']} | "
                     f"{best['total_s']:.2f} | {ref['method']} | {ref['iterations']} | "
                     f"{ref['total_s']:.2f} | {ratio:.2f} | "
                     f"{'ddlearn' if ratio < 1 else ref['method']} |")
    return "\n".join(lines)


def errors(data: dict) -> str:
    seen, out = set(), []
    for r in data["rows"]:
        if r.get("error") and (r["method"], r["error"][:120]) not in seen:
            seen.add((r["method"], r["error"][:120]))
            out.append(f"- {r['case']}, {_name(r)}: {r['error'][:300]}")
    return "\n".join(out) or "none"


def plot(data: dict, path: str) -> None:
    cases = list(data["cases"])
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(cases)), 4.0))
    methods = (*PETSC, "ddlearn best")
    width = 0.8 / len(methods)
    for k, method in enumerate(methods):
        vals = []
        for case in cases:
            rows = [r for r in data["rows"] if r["case"] == case]
            r = best_ddlearn(rows) if method == "ddlearn best" else \
                next((r for r in rows if r["method"] == method), None)
            vals.append(r["total_s"] if r and r.get("converged") else np.nan)
        ax.bar(np.arange(len(cases)) + (k - (len(methods) - 1) / 2) * width, vals, width,
               label=method)
    ax.set(yscale="log", ylabel="total time (s)", xticks=range(len(cases)))
    ax.set_xticklabels(cases, rotation=30, ha="right", fontsize=8)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    save_figure(fig, path)


def main(argv=None):
    ap = bench.parser("time_to_solution", __doc__, "a few thousand unknowns per case")
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--max-it", type=int, default=3000)
    ap.add_argument("--methods", nargs="+", default=None,
                    choices=sorted({*PETSC, *(m for c in DDLEARN.values() for m in c)}),
                    help="run these methods only (default all; with --resume the others' "
                         "rows are kept)")
    ap.add_argument("--name", default="time_to_solution", help="file stem of the JSON and plot")
    args = bench.parse(ap, argv)
    if args.report:
        files = bench.results(args)
        sections = []
        for name, data in files.items():
            if PETSc.COMM_WORLD.getRank() == 0:
                plot(data, os.path.join(args.out, f"{name}.png"))
            title = "" if name == "time_to_solution" else f" ({name}.json)"
            sections += [(f"Map{title}", map_table(data)), (f"All runs{title}", table(data)),
                         (f"Plot{title}", f"![total time per case]({name}.png)"),
                         (f"Errors{title}", errors(data))]
        bench.write_readme(args, "Time to solution: ddlearn against tuned GAMG", sections,
                           files)
        return files["time_to_solution"]
    data = benchmark(args)
    path = bench.write(args, data, args.name)
    if PETSc.COMM_WORLD.getRank() == 0:
        plot(data, os.path.splitext(path)[0] + ".png")
    bench.show(map_table(data))
    bench.show(table(data))
    return data


if __name__ == "__main__":
    main()
