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

    mpiexec -n 4 python benchmarks/coarse_forms.py            # writes results/coarse_forms.json
    python benchmarks/coarse_forms.py --summary benchmarks/results/coarse_forms.json
    mpiexec -n 2 python benchmarks/coarse_forms.py --quick --out /tmp/forms.json
    mpiexec -n 4 python benchmarks/coarse_forms.py --resume   # an interrupted run goes on

Timings are of one run on oversubscribed cores: compare the methods side by side, not the
absolute seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import petsc4py

petsc4py.init([])
from mpi4py import MPI  # noqa: E402
from petsc4py import PETSc  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fem_diffusion  # noqa: E402
from coarse_spaces import natural_matrix  # noqa: E402
from ddlearn.classical.krylov import solve  # noqa: E402
from ddlearn.decomposition.problems import make_problem  # noqa: E402
from ddlearn.learned.common import atomic_write_json  # noqa: E402
from ddlearn.pc import TwoLevelSchwarzPC, set_coordinates  # noqa: E402

COMM = MPI.COMM_WORLD
FORMS = ("additive", "balanced", "deflated")


def fem_matrix(m: int):
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
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (tests)")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results",
                                                  "coarse_forms.json"))
    ap.add_argument("--summary", metavar="FILE", help="print the tables of a results file")
    ap.add_argument("--resume", action="store_true",
                    help="keep the rows already in --out and measure only the missing ones")
    args = ap.parse_args(argv)
    if args.summary:
        with open(args.summary) as f:
            print(summary(json.load(f)))
        return None
    m, n, Ns = (40, 47, (16,)) if args.quick else (320, 255, (64, 256))
    data = {"ranks": COMM.Get_size(), "cores": os.cpu_count(), "fem_m": m, "grid": n,
            "fem_unknowns": (m - 1) ** 2, "rows": []}
    if args.resume and os.path.exists(args.out):
        with open(args.out) as f:
            data["rows"] = json.load(f)["rows"]
    done = {(r["case"], r["coarse"], r["N"], r["correction"]) for r in data["rows"]}

    def measure(case, M, coarse, N, form="additive"):
        if (case, coarse, N, form) in done:
            return
        data["rows"].append({"case": case, **run(M, coarse, N, form)})
        PETSc.Sys.Print(data["rows"][-1])
        if COMM.rank == 0:  # after every row: an interrupted run resumes with --resume
            atomic_write_json(args.out, data)

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
    if COMM.rank == 0:
        atomic_write_json(args.out, data)
        print(summary(data))
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
