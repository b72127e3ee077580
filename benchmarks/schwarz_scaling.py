"""Classical Schwarz scaling: CG iterations of one-level ASM and two-level Schwarz against the
number of subdomains N.

    mpiexec -n 4 python benchmarks/schwarz_scaling.py [-quick] [-json FILE] [-plot FILE]
    python benchmarks/schwarz_scaling.py -report FILE     (the table from a JSON)

1D Poisson n = 1023 and 4095, overlap 2, N in {4, 8, 16, 32, 64}; 2D Poisson 255 x 255,
overlap 1, N in {4, 16, 64, 256}; interface-hat / Q1 coarse space; CG to rtol 1e-8 on the
unpreconditioned residual, random right-hand side (seed 0). Iteration counts do not depend on the
number of ranks (the decomposition is fixed by N); times do, and are not the point here.
"""
from __future__ import annotations

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import petsc4py

petsc4py.init(sys.argv)
from petsc4py import PETSc  # noqa: E402

from ddlearn.decomposition.problems import make_problem  # noqa: E402
from ddlearn.harness.methods import Case, run_methods  # noqa: E402

FULL = [("poisson1d", 1023, 2, [4, 8, 16, 32, 64]), ("poisson1d", 4095, 2, [4, 8, 16, 32, 64]),
        ("poisson2d", 255, 1, [4, 16, 64, 256])]
QUICK = [("poisson1d", 255, 2, [4, 8, 16]), ("poisson2d", 63, 1, [4, 16, 64])]
METHODS = ["asm", "twolevel"]


def run(configs) -> list[dict]:
    size = PETSc.COMM_WORLD.getSize()
    rows = []
    for name, n, overlap, Ns in configs:
        for N in Ns:
            if N < size:
                PETSc.Sys.Print(f"skipping N = {N} < {size} ranks")
                continue
            case = Case.build(make_problem(name, n), N, overlap)
            b = case.rhs(0)
            for r in run_methods(case, METHODS, b):
                rows.append({"problem": name, "n": n, "overlap": overlap, "N": N,
                             "n0": case.Phi.shape[1],
                             **{k: v for k, v in r.record().items() if k != "history"}})
                PETSc.Sys.Print(f"{name:9s} n={n:5d} N={N:3d} {r.method:8s} "
                                f"{r.iterations:4d} it  {r.reason}  true res {r.rnorm_true:.1e}")
            b.destroy()
            case.destroy()
    return rows


def table(rows) -> str:
    keys = sorted({(r["problem"], r["n"]) for r in rows}, key=lambda k: (k[0], k[1]))
    lines = ["| problem | n | N | n_0 | one-level ASM | two-level Schwarz |", "|---|---:|---:|---:|---:|---:|"]
    for problem, n in keys:
        for N in sorted({r["N"] for r in rows if (r["problem"], r["n"]) == (problem, n)}):
            it = {r["method"]: r for r in rows if (r["problem"], r["n"], r["N"]) == (problem, n, N)}
            size = f"{n}²" if problem.endswith("2d") else f"{n}"
            lines.append(f"| {problem} | {size} | {N} | {it['twolevel']['n0']} | "
                         f"{it['asm']['iterations']} | {it['twolevel']['iterations']} |")
    return "\n".join(lines)


def plot(rows, path):
    keys = sorted({(r["problem"], r["n"]) for r in rows})
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.8), squeeze=False)
    for ax, (problem, n) in zip(axes[0], keys):
        for m, style in zip(METHODS, ("o--", "s-")):
            pts = sorted((r["N"], r["iterations"]) for r in rows
                         if (r["problem"], r["n"], r["method"]) == (problem, n, m))
            ax.semilogx(*zip(*pts), style, base=2, label=m)
        ax.set_title(f"{problem}, n = {n}")
        ax.set_xlabel("subdomains N")
        ax.set_ylabel("CG iterations (rtol 1e-8)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    opts = PETSc.Options()
    saved = opts.getString("report", "")
    if saved:
        if PETSc.COMM_WORLD.getRank() == 0:
            with open(saved) as f:
                print(table(json.load(f)["rows"]))
        return
    quick = opts.getBool("quick", False)
    out = opts.getString("json", "benchmarks/results/schwarz_scaling.json")
    png = opts.getString("plot", "benchmarks/results/schwarz_scaling.png")
    rows = run(QUICK if quick else FULL)
    if PETSc.COMM_WORLD.getRank() == 0:
        print(table(rows))
        with open(out, "w") as f:
            json.dump({"ranks": PETSc.COMM_WORLD.getSize(), "cores": os.cpu_count(),
                       "rows": rows}, f, indent=1)
        plot(rows, png)
        print(f"wrote {out} and {png}")


if __name__ == "__main__":
    main()
