"""Learned two-level preconditioner vs classical two-level Schwarz (same decomposition, overlap
and coarse space), CG to rtol 1e-8 with the true residual checked.

    mpiexec -n 4 python benchmarks/learned_preconditioner.py [--steps S] [--quick]
    python benchmarks/learned_preconditioner.py --report   # markdown table from the JSON

Cases: 1D Poisson n = 4095, N = 8..64; 2D Poisson 255², N = 16, 64, 256; 2D channels (contrast
1e6) N = 64 with PETSc's GDSW and GAMG alongside. Each case trains the learned preconditioner on
its own random vectors, then solves right-hand sides it never saw: random (3 seeds), a point
source and a smooth one. Writes ``results/learned_preconditioner.json`` and ``.png``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
OUT = os.path.join(HERE, "results", "learned_preconditioner")

CASES = [("poisson1d", 4095, N, 2) for N in (8, 16, 32, 64)] + \
        [("poisson2d", 255, N, 1) for N in (16, 64, 256)] + [("channels", 255, 64, 1)]
QUICK = [("poisson1d", 511, 8, 2), ("poisson2d", 31, 16, 1)]


def rhs_sets(problem):
    """name -> natural-ordering right-hand side, none of them seen in training."""
    import numpy as np

    from ddlearn.learned.operators.data import fourier_rhs

    out = {f"random{s}": np.random.default_rng(100 + s).uniform(-1, 1, problem.n) for s in range(3)}
    point = np.zeros(problem.n)
    point[np.ravel_multi_index(tuple(g // 3 for g in problem.grid[::-1]), problem.grid[::-1])] = 1
    out["point"] = point
    out["smooth"] = fourier_rhs(problem, 1, 4, 2.0, np.random.default_rng(7))[0]
    return out


def run_case(name, n, N, overlap, steps, extra):
    import torch
    from petsc4py import PETSc

    from ddlearn.learned.operators.distributed import DistributedSchwarzAttention
    from ddlearn.learned.coarse.basis import (basis_correction_model, distributed_basis,
                                       gather_smoothing, learned_meta)
    from ddlearn.learned.coarse.pc_training import PCTrainConfig, train_preconditioner
    from ddlearn.learned.coarse.learned_insitu import LearnedInsitu
    from ddlearn.pc import TwoLevelSchwarzPC
    from ddlearn.decomposition.problems import make_problem
    from ddlearn.classical.krylov import solve
    from ddlearn.harness.methods import METHODS, Case

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
            r = solve(case.A, b, configure, method=m, rtol=1e-8, prefix=f"{m}_")
            rows.append({"rhs": label, **{k: v for k, v in r.record().items() if k != "history"}})
        b.destroy()
    S.destroy()
    case.destroy()
    return {"problem": name, "n": problem.n, "N": N, "overlap": overlap,
            "ranks": PETSc.COMM_WORLD.getSize(), "training": tr.record(), "solves": rows}


def summarise(case):
    """Per-method mean iterations / solve seconds over the right-hand sides."""
    import numpy as np

    out = {}
    for m in dict.fromkeys(r["method"] for r in case["solves"]):
        rs = [r for r in case["solves"] if r["method"] == m]
        out[m] = {"iterations": {r["rhs"]: r["iterations"] for r in rs},
                  "mean_iterations": float(np.mean([r["iterations"] for r in rs])),
                  "solve_s": float(np.mean([r["solve_s"] for r in rs])),
                  "all_converged": all(r["converged"] and r["rnorm_true"] < 1e-8 for r in rs)}
    return out


def report(data) -> str:
    lines = ["| problem | N | classical two-level its (mean; random/point/smooth) | learned its "
             "| learned/classical solve time | train s | payback solves | other |",
             "|---|---:|---|---|---:|---:|---:|---|"]
    for c in data["cases"]:
        s = summarise(c)
        tl, ln = s["twolevel"], s["learned"]
        fmt = lambda d: f"{d['mean_iterations']:.1f} ({'/'.join(str(v) for v in d['iterations'].values())})"
        # training pays back only through fewer iterations; equal counts differ by timing noise
        saved = tl["solve_s"] - ln["solve_s"]
        fewer = ln["mean_iterations"] < tl["mean_iterations"]
        payback = f"{c['training']['seconds'] / saved:.0f}" if fewer and saved > 0 else "never"
        other = ", ".join(f"{m} {v['mean_iterations']:.1f}" for m, v in s.items()
                          if m not in ("twolevel", "learned"))
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
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20, help="training steps per case")
    ap.add_argument("--quick", action="store_true", help="two small cases (for tests)")
    ap.add_argument("--only", default=None,
                    help="comma list of problem names to run (default: all cases)")
    ap.add_argument("--json", default=OUT + ".json")
    ap.add_argument("--report", action="store_true", help="print the table of an existing JSON")
    args = ap.parse_args(argv)
    if args.report:
        print(report(json.load(open(args.json))))
        return
    import petsc4py
    petsc4py.init([])
    from petsc4py import PETSc

    cases = []
    only = args.only.split(",") if args.only else None
    for name, n, N, overlap in (QUICK if args.quick else CASES):
        if only and name not in only:
            continue
        extra = ("gdsw", "gamg") if name == "channels" else ()
        cases.append(run_case(name, n, N, overlap, args.steps, extra))
    data = {"steps": args.steps, "ranks": PETSc.COMM_WORLD.getSize(), "cores": os.cpu_count(),
            "cases": cases}
    if PETSc.COMM_WORLD.getRank() == 0:
        os.makedirs(os.path.dirname(args.json), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
        plot(data, os.path.splitext(args.json)[0] + ".png")
        print(report(data))


if __name__ == "__main__":
    main()
