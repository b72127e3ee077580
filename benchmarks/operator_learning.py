"""The paper's experiment: Schwarz attention against global low-rank attention, FLARE and FLARE++
on 1D Poisson with Fourier right-hand sides.

    python benchmarks/operator_learning.py                  # n = 1023 (the record)
    python benchmarks/operator_learning.py --n 255 4095     # other sizes
    python benchmarks/operator_learning.py --quick          # n = 255, small, under a minute

For each model and learning rate in the sweep the run trains with Adam (cosine schedule), keeps
the best-validation state and records parameters, steps and seconds to 1e-2 and 1e-3 relative
test error, final test error and the relative operator error; per model the learning rate with
the best validation error is reported. ``--seeds K`` repeats the best Schwarz and the best global
configuration with K seeds. Writes JSON (``--json``) and PNG plots next to it.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import torch

from ddlearn.learned.attention import GlobalAttention, SchwarzAttention
from ddlearn.learned.data import make_splits
from ddlearn.learned.flare import FLARE, FLAREPlusPlus
from ddlearn.learned.operator_error import operator_error
from ddlearn.decomposition.problems import Poisson1D
from ddlearn.learned.training import TrainConfig, train


def model_grid(n: int, quick: bool):
    """``(name, factory, steps_factor)`` for every model of the comparison."""
    Ns, rls, rgs = ([4, 8], [4], [16, 64]) if quick else ([4, 8, 16], [2, 4, 8], [8, 16, 32, 64])
    out = []
    for N in Ns:
        for rl in rls:
            out.append((f"schwarz N={N} r_l={rl}",
                        lambda seed, N=N, rl=rl: SchwarzAttention((n,), N, 2, rl, "hats", seed=seed), 1.0))
    for rg in rgs:
        out.append((f"global r_g={rg}", lambda seed, rg=rg: GlobalAttention(n, rg, seed=seed), 1.0))
    out.append(("flare H=4 M=64 d=16", lambda seed: FLARE((n,), 4, 64, 16, seed=seed), 1.0))
    # FLARE++ builds per-sample routing (B x H x M x n): a third of the steps keeps it affordable.
    out.append(("flare++ H=2 M=32 d=8", lambda seed: FLAREPlusPlus((n,), 2, 32, 8, seed=seed), 1 / 3))
    return out


def data_splits(problem, args, seed: int):
    """The experiment's Fourier data: (n+1)/4 modes unless ``--modes`` says otherwise."""
    return make_splits(problem, args.train, args.val, args.test,
                       modes=args.modes or (problem.n + 1) // 4, decay=args.decay, seed=seed)


def train_config(args, lr: float, factor: float, seed: int) -> TrainConfig:
    """Adam with a cosine schedule to lr/100 over ``factor`` times the step budget."""
    return TrainConfig(steps=max(1, int(args.steps * factor)), batch_size=args.batch, lr=lr,
                       lr_final=lr / 100, eval_every=args.eval_every, progress=args.progress,
                       seed=seed)


def run_one(name, factory, splits, problem, cfg: TrainConfig, seed: int) -> dict:
    torch.manual_seed(seed)
    model = factory(seed)
    res = train(model, splits, cfg, problem=problem.describe())
    s2, t2 = res.history.first_below(1e-2)
    s3, t3 = res.history.first_below(1e-3)
    return {"model": name, "n": problem.n, "N": model.config.get("N"),
            "params": model.num_parameters(), "lr": cfg.lr, "seed": seed,
            "steps_to_1e-2": s2, "steps_to_1e-3": s3, "seconds_to_1e-2": t2, "seconds_to_1e-3": t3,
            "val_error": res.best_val, "final_rel_error": res.final_test, "op_rel_error": operator_error(model, problem.matrix()),
            "train_s": res.seconds, "steps": res.steps, "steps_per_s": res.steps / res.seconds,
            "stopped": res.stopped,
            "curve": {"step": res.history.step, "test_error": res.history.test_error}}


def best_by_val(records):
    return min(records, key=lambda r: r["val_error"])


def experiment(n: int, args) -> list[dict]:
    problem = Poisson1D(n)
    splits = data_splits(problem, args, args.data_seed)
    rows = []
    grid = [g for g in model_grid(n, args.quick) if not args.models or g[0] in args.models]
    for i, (name, factory, factor) in enumerate(grid):
        per_lr = []
        for lr in args.lr:
            cfg = train_config(args, lr, factor, seed=0)
            per_lr.append(run_one(name, factory, splits, problem, cfg, seed=0))
        best = best_by_val(per_lr)
        best["lr_sweep"] = {str(r["lr"]): r["final_rel_error"] for r in per_lr}
        best["data"] = splits.meta
        rows.append(best)
        print(f"[{i + 1}/{len(grid)}] n={n} {name:24s} params={best['params']:7d} lr={best['lr']:.0e} "
              f"test={best['final_rel_error']:.2e} op={best['op_rel_error']:.2e} "
              f"steps->1e-2={best['steps_to_1e-2']} ->1e-3={best['steps_to_1e-3']} "
              f"{best['steps_per_s']:.0f} steps/s", flush=True)
    return rows


def seed_repeats(n, rows, args) -> list[dict]:
    """Repeat the best Schwarz and best global configuration (at their chosen lr) with seeds."""
    problem = Poisson1D(n)
    grid = {name: (f, factor) for name, f, factor in model_grid(n, args.quick)}
    out = []
    for family in ("schwarz", "global"):
        best = best_by_val([r for r in rows if r["model"].startswith(family) and r["n"] == n])
        factory, factor = grid[best["model"]]
        for seed in range(args.seeds):
            splits = data_splits(problem, args, args.data_seed + 100 * seed)
            cfg = train_config(args, best["lr"], factor, seed)
            r = run_one(best["model"], factory, splits, problem, cfg, seed)
            r.pop("curve")
            out.append(r)
            print(f"  seed {seed}: {best['model']:24s} test={r['final_rel_error']:.2e} "
                  f"steps->1e-2={r['steps_to_1e-2']}", flush=True)
    return out


def table(rows) -> str:
    lines = ["| model | n | params | lr | steps to 1e-2 | steps to 1e-3 | s to 1e-2 | final test error | operator error | steps/s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    fmt = lambda v, f: "–" if v is None else format(v, f)  # noqa: E731
    for r in rows:
        lines.append(f"| {r['model']} | {r['n']} | {r['params']} | {r['lr']:.0e} | "
                     f"{fmt(r['steps_to_1e-2'], 'd')} | {fmt(r['steps_to_1e-3'], 'd')} | "
                     f"{fmt(r['seconds_to_1e-2'], '.1f')} | {r['final_rel_error']:.2e} | "
                     f"{r['op_rel_error']:.2e} | {r['steps_per_s']:.0f} |")
    return "\n".join(lines)


def seed_table(seeds) -> str:
    """Spread over seeds (data draw, initialisation and batch order) of the repeated configs."""
    import numpy as np
    lines = ["| model | n | seeds | final test error: mean | min | max | steps to 1e-2: mean | min | max |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key in dict.fromkeys((r["model"], r["n"]) for r in seeds):
        rs = [r for r in seeds if (r["model"], r["n"]) == key]
        e = np.array([r["final_rel_error"] for r in rs])
        st = [r["steps_to_1e-2"] for r in rs if r["steps_to_1e-2"] is not None]
        steps = (f"{np.mean(st):.0f} | {min(st)} | {max(st)}" if len(st) == len(rs)
                 else f"{len(st)}/{len(rs)} reached | – | –")
        lines.append(f"| {key[0]} | {key[1]} | {len(rs)} | {e.mean():.2e} | {e.min():.2e} | "
                     f"{e.max():.2e} | {steps} |")
    return "\n".join(lines)


def plots(rows, stem):
    colours = {"schwarz": "tab:blue", "global": "tab:red", "flare ": "tab:green", "flare++": "tab:purple"}
    family = lambda name: next(k for k in ("flare++", "flare ", "schwarz", "global") if name.startswith(k))  # noqa: E731
    for n in sorted({r["n"] for r in rows}):
        sub = [r for r in rows if r["n"] == n]
        fig, ax = plt.subplots(figsize=(7.5, 4.8))
        for r in sub:
            ax.loglog(r["curve"]["step"], r["curve"]["test_error"], color=colours[family(r["model"])],
                      alpha=0.8, lw=1.2 if r["model"].startswith(("schwarz", "global")) else 2,
                      label=r["model"])
        ax.axhline(1e-2, color="k", ls=":", lw=0.8)
        ax.axhline(1e-3, color="k", ls=":", lw=0.8)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("relative test error")
        ax.set_title(f"1D Poisson n = {n}: test error during training")
        ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        base = stem if stem.endswith(f"_n{n}") else f"{stem}_n{n}"
        fig.savefig(f"{base}_steps.png", dpi=120)
        plt.close(fig)
        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        for fam, c in colours.items():
            pts = [(r["params"], r["final_rel_error"]) for r in sub if family(r["model"]) == fam]
            if pts:
                ax.loglog(*zip(*pts), "o", color=c, label=fam.strip())
        ax.set_xlabel("parameters")
        ax.set_ylabel("final relative test error")
        ax.set_title(f"1D Poisson n = {n}: error against parameters")
        ax.grid(alpha=0.3, which="both")
        ax.legend()
        fig.tight_layout()
        fig.savefig(f"{base}_params.png", dpi=120)
        plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=None, help="sizes (default 1023; quick: 255)")
    ap.add_argument("--quick", action="store_true", help="n = 255, few models, 400 steps")
    ap.add_argument("--steps", type=int, default=None, help="optimizer steps (default 3000; quick 400)")
    ap.add_argument("--lr", type=float, nargs="+", default=None, help="learning-rate sweep (default 3e-3 1e-2)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--modes", type=int, default=None, help="Fourier modes K (default (n+1)/4)")
    ap.add_argument("--decay", type=float, default=0.0, help="coefficient decay a_k ~ k^-p")
    ap.add_argument("--train", type=int, default=1024)
    ap.add_argument("--val", type=int, default=128)
    ap.add_argument("--test", type=int, default=256)
    ap.add_argument("--data-seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=0, help="repeat the best Schwarz/global with K seeds")
    ap.add_argument("--json", default="benchmarks/results/operator_learning.json")
    ap.add_argument("--progress", action="store_true", help="progress bar per training run")
    ap.add_argument("--models", nargs="+", help="only these models, by name (e.g. 'global r_g=64')")
    ap.add_argument("--report", metavar="JSON", help="only print the tables of an earlier run")
    args = ap.parse_args(argv)
    if args.report:
        with open(args.report) as f:
            data = json.load(f)
        print(table(data["records"]))
        if data["seed_repeats"]:
            print(seed_table(data["seed_repeats"]))
        return data
    args.n = args.n or ([255] if args.quick else [1023])
    args.steps = args.steps or (400 if args.quick else 3000)
    args.lr = args.lr or ([1e-2] if args.quick else [3e-3, 1e-2])
    torch.set_num_threads(1)
    t0 = time.time()
    rows, seeds = [], []
    for n in args.n:
        rows += experiment(n, args)
        if args.seeds:
            seeds += seed_repeats(n, rows, args)
    print(table(rows))
    if seeds:
        print(seed_table(seeds))
    out = {"args": vars(args), "cores": os.cpu_count(), "torch_threads": 1,
           "records": rows, "seed_repeats": seeds, "wall_s": time.time() - t0}
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    plots(rows, os.path.splitext(args.json)[0])
    print(f"wrote {args.json} and plots; {time.time() - t0:.0f} s")
    return out


if __name__ == "__main__":
    main()
