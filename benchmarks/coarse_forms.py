"""GDSW-family coarse spaces and the forms of the coarse correction, side by side in one run.

1. The unstructured finite-element client (``examples/fem_diffusion.py``: P1 on a jittered
   Delaunay mesh, RCM numbering, PETSc's rows), channels of contrast 1e6, N = 64 and 256:
   hats, Nicolaides, GDSW and RGDSW (``-ddlearn_coarse_space``), CG iterations and n_0.
2. The coarse correction ``-ddlearn_coarse_correction {additive,balanced,deflated}`` for hats,
   GDSW and spectral (k = 8) on the 2D channels 255² (natural ordering, coordinates, N = 64)
   and for hats and GDSW on the FEM client (N = 64; spectral would need the client's Neumann
   matrices): iterations, set-up, solve and time per iteration (apply
   time plus one matrix product and the Krylov work). Additive and balanced run CG, deflated
   (nonsymmetric) GMRES(100).

CG/GMRES to rtol 1e-8 on the unpreconditioned residual, b = 1::

    mpiexec -n 4 python benchmarks/coarse_forms.py            # writes results/coarse_forms/
    python benchmarks/coarse_forms.py --report                # README.md from the JSON
    mpiexec -n 2 python benchmarks/coarse_forms.py --quick --out /tmp/forms
    mpiexec -n 4 python benchmarks/coarse_forms.py --resume   # an interrupted run goes on

Timings are of one run on oversubscribed cores: compare the methods side by side, not the
absolute seconds.
"""
from __future__ import annotations

import os

import petsc4py

petsc4py.init([])
from mpi4py import MPI  # noqa: E402
from petsc4py import PETSc  # noqa: E402

from ddlearn.classical.krylov import solve  # noqa: E402
from ddlearn.decomposition.problems import make_problem  # noqa: E402
from ddlearn.harness import bench  # noqa: E402
from ddlearn.harness.systems import natural_matrix  # noqa: E402
from ddlearn.pc import TwoLevelSchwarzPC, set_coordinates  # noqa: E402

COMM = MPI.COMM_WORLD
FORMS = ("additive", "balanced", "deflated")


def fem_matrix(m: int):
    fem_diffusion = bench.load_example("fem_diffusion")
    A, _, xy = fem_diffusion.system(m, "channels", 1e6)
    M = fem_diffusion.to_petsc(A)
    lo, hi = M.getOwnershipRange()
    set_coordinates(M, xy[lo:hi])
    return M


def run(A, coarse: str, N: int, correction: str = "additive") -> dict:
    """One solve with ddlearn's PC; the PC's summary (n_0) and set-up split."""
    holder = {}

    def configure(pc):
        pc.setType("python")
        holder["ctx"] = TwoLevelSchwarzPC(coarse, N, 1, correction=correction)
        pc.setPythonContext(holder["ctx"])

    b = A.createVecLeft()
    b.set(1.0)
    ksp = "gmres" if correction == "deflated" else "cg"
    if ksp == "gmres":
        PETSc.Options().setValue("cf_ksp_gmres_restart", 100)
    r = solve(A, b, configure, method=coarse, ksp_type=ksp, rtol=1e-8, max_it=3000,
              prefix="cf_")
    b.destroy()
    ctx = holder["ctx"]
    return {"coarse": coarse, "N": N, "correction": correction, "ksp": ksp,
            "iterations": r.iterations, "converged": r.converged, "reason": r.reason, "rnorm_true": r.rnorm_true,
            "setup_s": r.setup_s, "solve_s": r.solve_s,
            "per_iteration_s": r.solve_s / max(r.iterations, 1), "n0": ctx.meta.get("n0"),
            "split": dict(ctx.timing)}


def main(argv=None):
    ap = bench.parser("coarse_forms", __doc__, "small sizes (tests)")
    ap.add_argument("--resume", action="store_true",
                    help="keep the rows already in DIR/coarse_forms.json and measure only the "
                         "missing ones")
    args = bench.parse(ap, argv)
    if args.report:
        files = bench.results(args)
        bench.write_readme(args, "GDSW-family coarse spaces and the forms of the coarse "
                           "correction", [("Tables", summary(files["coarse_forms"]))], files)
        return files["coarse_forms"]
    path = os.path.join(args.out, "coarse_forms.json")
    m, n, Ns = (40, 47, (16,)) if args.quick else (320, 255, (64, 256))
    data = {"ranks": COMM.Get_size(), "cores": os.cpu_count(), "fem_m": m, "grid": n,
            "fem_unknowns": (m - 1) ** 2, "rows": []}
    if args.resume and os.path.exists(path):
        old = bench.read(path)
        data["rows"], data["earlier_runs"] = old["rows"], bench.earlier_runs(old)
    done = {(r["case"], r["coarse"], r["N"], r["correction"]) for r in data["rows"]}

    def measure(case, M, coarse, N, form="additive"):
        if (case, coarse, N, form) in done:
            return
        data["rows"].append({"case": case, **run(M, coarse, N, form)})
        PETSc.Sys.Print(data["rows"][-1])
        bench.write(args, data)  # after every row: an interrupted run resumes with --resume

    A = fem_matrix(m)
    for N in Ns:
        for coarse in ("hats", "nicolaides", "gdsw", "rgdsw"):
            measure("fem channels 1e6", A, coarse, N)
    for case, M in (("fem channels 1e6", A),
                    ("channels 255^2", natural_matrix(make_problem("channels", n,
                                                                   contrast=1e6)))):
        # spectral on the FEM client needs the client's Neumann matrices: its algebraic ones
        # are indefinite on some box subdomains (the PC refuses them)
        for coarse in ("hats", "gdsw") + (("spectral",) if case.startswith("channels") else ()):
            for form in FORMS:
                measure(case, M, coarse, Ns[0], form)
        M.destroy()
    bench.write(args, data)
    bench.show(summary(data))
    return data


def summary(data) -> str:
    rows = data["rows"]
    out = [f"measured on {data['cores']} cores, {data['ranks']} ranks", "",
           "| coarse space | N | CG its | n_0 | set-up s |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        if r["case"].startswith("fem") and r["correction"] == "additive":
            out.append(f"| {r['coarse']} | {r['N']} | {r['iterations']} | {r['n0']} | "
                       f"{r['setup_s']:.2f} |")
    out += ["", "| case | coarse space | correction | Krylov | its | s per iteration | "
            "solve s |", "|---|---|---|---|---:|---:|---:|"]
    seen = set()
    for r in rows:
        key = (r["case"], r["coarse"], r["correction"], r["N"])
        if r["N"] != min(x["N"] for x in rows) or key in seen:
            continue
        seen.add(key)
        out.append(f"| {r['case']} | {r['coarse']} | {r['correction']} | {r['ksp']} | "
                   f"{r['iterations']}{'' if r['converged'] else ' (not converged)'} | "
                   f"{r['per_iteration_s'] * 1e3:.1f} ms | {r['solve_s']:.2f} |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
