"""Learned two-level preconditioner vs classical two-level Schwarz (same decomposition, overlap
and coarse space), CG to rtol 1e-8 with the true residual checked.

    mpiexec -n 2 python benchmarks/learned_preconditioner.py [--steps S] [--quick] [--out DIR]
    python benchmarks/learned_preconditioner.py --report   # README.md and the plot from the JSON

Cases: 1D Poisson n = 4095, N = 8..64; 2D Poisson 255², N = 16, 64, 256; 2D channels (contrast
1e6) N = 64 with PETSc's GDSW and GAMG alongside (GAMG with its defaults, ``gamg``, and tuned,
``gamg-tuned``: the harness's methods). Each case trains the learned preconditioner on
its own random vectors, then solves right-hand sides it never saw: random (3 seeds), a point
source and a smooth one. Writes ``learned_preconditioner.json`` and ``.png`` (``--only`` picks
cases; ``--name`` another file stem, e.g. ``learned_preconditioner_channels60``).
"""
from __future__ import annotations

import os

import matplotlib
import numpy as np
import petsc4py
import torch

matplotlib.use("Agg")
petsc4py.init([])
import matplotlib.pyplot as plt  # noqa: E402
from petsc4py import PETSc  # noqa: E402

from ddlearn.classical.krylov import solve  # noqa: E402
from ddlearn.decomposition.problems import make_problem  # noqa: E402
from ddlearn.harness import bench  # noqa: E402
from ddlearn.harness.methods import METHODS, Case, prefix  # noqa: E402
from ddlearn.learned.coarse.basis import (basis_correction_model, distributed_basis,  # noqa: E402
                                          gather_smoothing, learned_meta)
from ddlearn.learned.coarse.learned_insitu import LearnedInsitu  # noqa: E402
from ddlearn.learned.coarse.pc_training import PCTrainConfig, train_preconditioner  # noqa: E402
from ddlearn.learned.operators.data import fourier_rhs  # noqa: E402
from ddlearn.learned.operators.distributed import DistributedSchwarzAttention  # noqa: E402
from ddlearn.pc import TwoLevelSchwarzPC  # noqa: E402

CASES = [("poisson1d", 4095, N, 2) for N in (8, 16, 32, 64)] + \
        [("poisson2d", 255, N, 1) for N in (16, 64, 256)] + [("channels", 255, 64, 1)]
QUICK = [("poisson1d", 511, 8, 2), ("poisson2d", 31, 16, 1)]


def rhs_sets(problem):
    """name -> natural-ordering right-hand side, none of them seen in training."""
    out = {f"random{s}": np.random.default_rng(100 + s).uniform(-1, 1, problem.n) for s in range(3)}
    point = np.zeros(problem.n)
    point[np.ravel_multi_index(tuple(g // 3 for g in problem.grid[::-1]), problem.grid[::-1])] = 1
    out["point"] = point
    out["smooth"] = fourier_rhs(problem, 1, 4, 2.0, np.random.default_rng(7))[0]
    return out


def run_case(name, n, N, overlap, steps, extra):
    torch.set_num_threads(1)
    problem = make_problem(name, n)
    case = Case.build(problem, N, overlap)
    S = DistributedSchwarzAttention(basis_correction_model(case.dec, 8), case.layout.comm)
    PETSc.Sys.Print(f"{name} n={problem.n} N={N}: training ...")
    basis = distributed_basis(S, case.layout, case.A, case.Phi)
    tr = train_preconditioner(basis, case.layout, case.A, PCTrainConfig(steps=steps))
    S.meta.update(learned_meta(case.coarse, gather_smoothing(basis, case.layout), case.layout,
                               case.A))
    methods = {"twolevel": lambda pc: METHODS["twolevel"](pc, case),
               "learned": lambda pc: (pc.setType("python"),
                                      pc.setPythonContext(TwoLevelSchwarzPC(LearnedInsitu(S))))}
    for m in extra:
        methods[m] = lambda pc, f=METHODS[m]: f(pc, case)
    rows = []
    for label, f in rhs_sets(problem).items():
        b = case.layout.from_natural(f)
        for m, configure in methods.items():
            r = solve(case.A, b, configure, method=m, rtol=1e-8, prefix=prefix(m))
            rows.append({"rhs": label, **{k: v for k, v in r.record().items() if k != "history"}})
        b.destroy()
    S.destroy()
    case.destroy()
    return {"problem": name, "n": problem.n, "N": N, "overlap": overlap,
            "ranks": PETSc.COMM_WORLD.getSize(), "training": tr.record(), "solves": rows}


def summarise(case):
    """Per-method mean iterations / set-up / solve seconds over the right-hand sides."""
    out = {}
    for m in dict.fromkeys(r["method"] for r in case["solves"]):
        rs = [r for r in case["solves"] if r["method"] == m]
        out[m] = {"iterations": {r["rhs"]: r["iterations"] for r in rs},
                  "mean_iterations": float(np.mean([r["iterations"] for r in rs])),
                  "solve_s": float(np.mean([r["solve_s"] for r in rs])),
                  "setup_s": float(np.mean([r["setup_s"] for r in rs])),
                  "all_converged": all(r["converged"] and r["rnorm_true"] < 1e-8 for r in rs)}
    return out


def report(data) -> str:
    lines = ["| problem | N | classical two-level its (mean; random/point/smooth) | learned its "
             "| learned/classical solve time | train s | payback solves | other (mean its / "
             "set-up + solve s) |",
             "|---|---:|---|---|---:|---:|---:|---|"]
    for c in data["cases"]:
        s = summarise(c)
        tl, ln = s["twolevel"], s["learned"]
        fmt = lambda d: f"{d['mean_iterations']:.1f} ({'/'.join(str(v) for v in d['iterations'].values())})"
        # training pays back only through fewer iterations; equal counts differ by timing noise
        saved = tl["solve_s"] - ln["solve_s"]
        fewer = ln["mean_iterations"] < tl["mean_iterations"]
        payback = f"{c['training']['seconds'] / saved:.0f}" if fewer and saved > 0 else "never"
        other = ", ".join(f"{m} {v['mean_iterations']:.1f} / {v['setup_s'] + v['solve_s']:.2f} s"
                          for m, v in s.items() if m not in ("twolevel", "learned"))
        lines.append(f"| {c['problem']} n={c['n']} | {c['N']} | {fmt(tl)} | {fmt(ln)} | "
                     f"{ln['solve_s'] / tl['solve_s']:.2f} | {c['training']['seconds']:.0f} | "
                     f"{payback} | {other} |")
    return "\n".join(lines)


def plot(data, path):
    if not any(c["problem"] in ("poisson1d", "poisson2d") for c in data["cases"]):
        return  # the plot shows the Poisson scaling only
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, prob in zip(axes, ("poisson1d", "poisson2d")):
        cs = [c for c in data["cases"] if c["problem"] == prob]
        if not cs:
            continue
        Ns = [c["N"] for c in cs]
        for m, style in (("twolevel", "o-"), ("learned", "s--")):
            ax.plot(Ns, [summarise(c)[m]["mean_iterations"] for c in cs], style, label=m)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("subdomains N")
        ax.set_ylabel("CG iterations (mean over 5 right-hand sides)")
        ax.set_title(f"{prob}, n = {cs[0]['n']}")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    ap = bench.parser("learned_preconditioner", __doc__, "two small cases (for tests)")
    ap.add_argument("--steps", type=int, default=20, help="training steps per case")
    ap.add_argument("--only", default=None,
                    help="comma list of problem names to run (default: all cases)")
    ap.add_argument("--name", default="learned_preconditioner",
                    help="file stem of the JSON and plot in DIR")
    args = bench.parse(ap, argv)
    if args.report:
        files = bench.results(args)
        sections = []
        for name, data in files.items():
            sections.append((f"{name}.json", report(data)))
            if PETSc.COMM_WORLD.getRank() == 0:
                plot(data, os.path.join(args.out, f"{name}.png"))
        sections.append(("Plot", "![CG iterations against N](learned_preconditioner.png)"))
        bench.write_readme(args, "Learned two-level preconditioner against classical "
                           "two-level Schwarz", sections, files)
        return files
    cases = []
    only = args.only.split(",") if args.only else None
    for name, n, N, overlap in (QUICK if args.quick else CASES):
        if only and name not in only:
            continue
        extra = ("mg-gdsw", "gamg", "gamg-tuned") if name == "channels" else ()
        cases.append(run_case(name, n, N, overlap, args.steps, extra))
    data = {"steps": args.steps, "ranks": PETSc.COMM_WORLD.getSize(), "cores": os.cpu_count(),
            "cases": cases}
    path = bench.write(args, data, args.name)
    if PETSc.COMM_WORLD.getRank() == 0:
        plot(data, os.path.splitext(path)[0] + ".png")
    bench.show(report(data))
    return data


if __name__ == "__main__":
    main()
