"""Classical Schwarz scaling: CG iterations of one-level ASM and two-level Schwarz against the
number of subdomains N.

    mpiexec -n 4 python benchmarks/schwarz_scaling.py [--quick] [--out DIR]
    python benchmarks/schwarz_scaling.py --report     (README.md: the table and plot from the JSON)

1D Poisson n = 1023 and 4095, overlap 2, N in {4, 8, 16, 32, 64}; 2D Poisson 255 x 255,
overlap 1, N in {4, 16, 64, 256}; interface-hat / Q1 coarse space; CG to rtol 1e-8 on the
unpreconditioned residual, random right-hand side (seed 0). Iteration counts do not depend on the
number of ranks (the decomposition is fixed by N); times do, and are not the point here.
Writes ``schwarz_scaling.json`` and ``schwarz_scaling.png``.
"""
from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import petsc4py

petsc4py.init([])
from petsc4py import PETSc  # noqa: E402

from ddlearn.decomposition.problems import make_problem  # noqa: E402
from ddlearn.harness import bench  # noqa: E402
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
    cells = []
    for problem, n in keys:
        for N in sorted({r["N"] for r in rows if (r["problem"], r["n"]) == (problem, n)}):
            it = {r["method"]: r for r in rows if (r["problem"], r["n"], r["N"]) == (problem, n, N)}
            size = f"{n}²" if problem.endswith("2d") else f"{n}"
            cells.append([problem, size, N, it["twolevel"]["n0"], it["asm"]["iterations"],
                          it["twolevel"]["iterations"]])
    return bench.markdown_table(["problem", "n", "N", "n_0", "one-level ASM",
                                 "two-level Schwarz"], cells)


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


def main(argv: list[str] | None = None) -> dict:
    ap = bench.parser("schwarz_scaling", __doc__, "1D n = 255 and 2D 63², N up to 64")
    args = bench.parse(ap, argv)
    rank0 = PETSc.COMM_WORLD.getRank() == 0
    if args.report:
        files = bench.results(args)
        data = files["schwarz_scaling"]
        if rank0:
            plot(data["rows"], os.path.join(args.out, "schwarz_scaling.png"))
        bench.write_readme(args, "Classical Schwarz scaling", [
            ("CG iterations", table(data["rows"])),
            ("Plot", "![iterations against N](schwarz_scaling.png)")], files)
        return data
    rows = run(QUICK if args.quick else FULL)
    data = {"ranks": PETSc.COMM_WORLD.getSize(), "cores": os.cpu_count(), "rows": rows}
    path = bench.write(args, data)
    bench.show(table(rows))
    if rank0:
        plot(rows, os.path.splitext(path)[0] + ".png")
    bench.show(f"wrote {path}")
    return data


if __name__ == "__main__":
    main()
