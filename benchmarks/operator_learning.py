"""The paper's experiment with fair baselines: Schwarz attention against global low-rank attention,
FLARE and FLARE++ on 1D Poisson with Fourier right-hand sides, under one training-speed protocol.

    python benchmarks/operator_learning.py --n 1023 --seeds 3 --name operator_learning_n1023
    python benchmarks/operator_learning.py --quick --out DIR                    # small, ~1 minute
    python benchmarks/operator_learning.py --report     # merge every run in DIR: README.md

Per size ``n`` and model (``ddlearn.learned.operators.protocol``):

1. initial validation error of the random initialisation and of the data-aware one
   (``ddlearn.learned.operators.data_init``; its cost in seconds);
2. learning-rate sweep: one run per learning rate at ``--sweep-steps`` (default 500; seed 0),
   the rate with the lowest validation error is kept;
3. budget ladder with that rate for ``--seeds`` seeds (seed s: data draw, initialisation,
   range-finder sketch and batch order): the smallest budget (each its own cosine schedule) whose
   run reaches relative test error 1e-2 and 3e-3, in steps and in seconds (initialisation
   included; CPU seconds of the single-threaded process, so that jobs sharing the machine do not
   enter the measurement). The ladder stops for a model once both are reached, or after ``--patience``
   consecutive rungs without a lower validation error (a plateau).

FLARE++ trains a third of every budget (its input-dependent routing costs far more per step).
A run writes ``DIR/<--name>.json``. ``--report`` merges every run of the folder
(``operator_learning*.json`` but the summary), prints the tables, fits the scaling exponents and
writes ``operator_learning_summary.json``, its plots and ``README.md``.
"""
from __future__ import annotations

import json
import os
import time

import matplotlib

import numpy as np  # noqa: E402
import torch  # noqa: E402

from ddlearn.decomposition.problems import Poisson1D  # noqa: E402
from ddlearn.harness import bench  # noqa: E402
from ddlearn.harness.report import plt, save_figure  # noqa: E402
from ddlearn.nn.operators import FLARE, FLAREPlusPlus, GlobalAttention, SchwarzAttention  # noqa: E402
from ddlearn.learned.operators.checkpoint import MODELS  # noqa: E402
from ddlearn.learned.operators.data import make_splits  # noqa: E402
from ddlearn.learned.operators.data_init import data_init  # noqa: E402
from ddlearn.learned.operators.protocol import budget_ladder, lr_sweep  # noqa: E402
from ddlearn.learned.operators.training import evaluate  # noqa: E402

FAMILIES = tuple(MODELS)
THRESHOLDS = (1e-2, 3e-3)
OVERLAP = 2


def model_grid(n: int, quick: bool):
    """``(family, name, factory, steps_factor)`` for every model of the comparison."""
    Nr = [(16, 4)] if quick else [(16, 2), (16, 4), (64, 2), (64, 4)]
    rgs = [16] if quick else [16, 32, 64]
    out = [("schwarz", f"schwarz N={N} r_l={rl}",
            lambda seed, N=N, rl=rl: SchwarzAttention((n,), N, OVERLAP, rl, "hats", seed=seed), 1.0)
           for N, rl in Nr]
    out += [("global", f"global r_g={rg}", lambda seed, rg=rg: GlobalAttention(n, rg, seed=seed), 1.0)
            for rg in rgs]
    out.append(("flare", "flare H=4 M=64 d=16", lambda seed: FLARE((n,), 4, 64, 16, seed=seed), 1.0))
    out.append(("flare++", "flare++ H=2 M=32 d=8",
                lambda seed: FLAREPlusPlus((n,), 2, 32, 8, seed=seed), 1 / 3))
    return out


def data_splits(problem, args, seed: int):
    """The experiment's Fourier data: (n+1)/4 modes unless ``--modes`` says otherwise."""
    return make_splits(problem, args.train, args.val, args.test,
                       modes=args.modes or (problem.n + 1) // 4, decay=args.decay, seed=seed)


def init_errors(factory, splits) -> dict:
    """Validation error of the random and of the data-aware initialisation (seed 0)."""
    model = factory(0)
    random = evaluate(model, splits.val)
    t0 = time.process_time()
    data_init(model, splits.train, seed=0)
    return {"random": random, "data": evaluate(model, splits.val), "init_s": time.process_time() - t0}


def run_model(n, family, name, factory, factor, args) -> dict:
    """Initial errors, learning-rate sweep and budget ladder of one model at one size."""
    problem = Poisson1D(n)
    splits = [data_splits(problem, args, args.data_seed + 100 * s) for s in range(args.seeds)]
    scaled = lambda b: int(round(b * factor))  # noqa: E731
    kw = {"batch_size": args.batch, "evaluations": args.evaluations, "init": args.init == "data"}
    rec = {"family": family, "model": name, "n": n, "params": factory(0).num_parameters(),
           "steps_factor": factor, "init_kind": args.init, "init": init_errors(factory, splits[0])}
    lr, sweep = lr_sweep(factory, splits[0], args.lr, scaled(args.sweep_steps), seed=0, **kw)
    rec["lr"], rec["sweep"] = lr, sweep
    ladder = [scaled(b) for b in args.ladder]
    rec["ladders"] = [budget_ladder(factory, splits[s], ladder, THRESHOLDS, lr, seed=s,
                                    patience=args.patience, **kw)
                      for s in range(args.seeds)]
    return rec


def spread(values):
    """``(mean, min, max)`` or ``None`` if any seed did not get there."""
    if not values or any(v is None for v in values):
        return None
    return float(np.mean(values)), float(min(values)), float(max(values))


def label(rec) -> str:
    """The model's name, marked when it was trained from its random initialisation."""
    return rec["model"] + (" [random init]" if rec["init_kind"] == "random" else "")


def summarise(rec) -> dict:
    """Per threshold: steps and seconds (mean, min, max over seeds); the best test error."""
    out = {"family": rec["family"], "model": label(rec), "n": rec["n"], "params": rec["params"],
           "random_init": rec["init_kind"] == "random",
           "lr": rec["lr"], "seeds": len(rec["ladders"]), "steps_factor": rec["steps_factor"],
           "max_budget_run": max(r["budget"] for lad in rec["ladders"] for r in lad["runs"]),
           "best_test_error": spread([min(r["test_error"] for r in lad["runs"])
                                      for lad in rec["ladders"]])}
    for t in THRESHOLDS:
        hits = [lad["reached"][str(t)] for lad in rec["ladders"]]
        out[f"steps_to_{t:g}"] = spread([h and h["steps"] for h in hits])
        out[f"seconds_to_{t:g}"] = spread([h and h["seconds"] for h in hits])
        out[f"reached_{t:g}"] = sum(h is not None for h in hits)
    return out


def best_of(rows, family, n, tau, random_init: bool):
    """The model of ``family`` at ``n`` reaching ``tau`` in every seed: from the data-aware start
    the one with the fewest parameters, from the random start the one with the fewest steps
    (then parameters); ``None`` if there is none."""
    ok = [r for r in rows if r["family"] == family and r["n"] == n and r[f"steps_to_{tau:g}"]
          and r["random_init"] == random_init]
    steps = lambda r: r[f"steps_to_{tau:g}"][0]  # noqa: E731
    key = (lambda r: (steps(r), r["params"])) if random_init else (lambda r: (r["params"], steps(r)))
    return min(ok, key=key, default=None)


def fit_exponent(ns, values):
    """Least-squares slope of ``log value`` against ``log n`` (``None`` for < 2 points or a
    non-positive value)."""
    if len(ns) < 2 or min(values) <= 0:
        return None
    return float(np.polyfit(np.log(ns), np.log(values), 1)[0])


def series(rows, family, tau, random_init: bool) -> dict:
    """:func:`best_of` at every ``n``: its model, parameters, steps and seconds to ``tau`` (means
    over seeds) and the exponent of a power law in ``n`` fitted to each. Where the family has
    runs at ``n`` but none reaches ``tau`` in every seed, ``not_reached`` holds ``(n, largest
    budget run)``: the steps to ``tau`` there are more than that."""
    runs = [r for r in rows if r["family"] == family and r["random_init"] == random_init]
    pts = [(n, best_of(rows, family, n, tau, random_init)) for n in sorted({r["n"] for r in runs})]
    ns = [n for n, b in pts if b is not None]
    best = [b for _, b in pts if b is not None]
    entry = {"n": ns, "model": [b["model"] for b in best], "params": [b["params"] for b in best],
             "steps": [b[f"steps_to_{tau:g}"][0] for b in best],
             "seconds": [b[f"seconds_to_{tau:g}"][0] for b in best],
             "not_reached": [(n, max(r["max_budget_run"] for r in runs if r["n"] == n))
                             for n, b in pts if b is None]}
    for key in ("params", "steps", "seconds"):
        entry[f"exponent_{key}"] = fit_exponent(ns, entry[key])
    return entry


def scaling(rows) -> dict:
    """Against ``n``, per family and threshold: the parameters of the smallest model reaching it
    from the data-aware start (``"data"``), and the steps and seconds of the fastest model reaching
    it from the random start (``"random"``: from the data-aware start the steps are 0)."""
    return {f"{fam} {t:g}": {"data": series(rows, fam, t, False), "random": series(rows, fam, t, True)}
            for fam in ("schwarz", "global") for t in THRESHOLDS}


def budget_ratios(fam) -> dict:
    """Smallest budget to each threshold over each family's models and the Schwarz / global
    ratio, in steps and in seconds."""
    entry = {}
    for t in THRESHOLDS:
        for unit in ("steps", "seconds"):
            best = {f: min((r[f"{unit}_to_{t:g}"][0] for r in rows if r[f"{unit}_to_{t:g}"]),
                           default=None) for f, rows in fam.items()}
            entry[f"{unit}_to_{t:g}"] = best
            entry[f"{unit}_ratio_{t:g}"] = (best["schwarz"] / best["global"]
                                            if None not in best.values() and best["global"] > 0
                                            else None)
    return entry


def targets(rows) -> dict:
    """The targets' comparisons per ``n`` and start: from the data-aware start the best global
    model's test error (lowest mean over seeds), the smallest Schwarz model at or below it and the
    parameter ratio; for both starts the budget ratios of :func:`budget_ratios`."""
    out = {}
    for n in sorted({r["n"] for r in rows}):
        for start in ("data", "random"):
            fam = {f: [r for r in rows if r["n"] == n and r["family"] == f and r["best_test_error"]
                       and r["random_init"] == (start == "random")] for f in ("schwarz", "global")}
            if not (fam["schwarz"] and fam["global"]):
                continue
            entry = {}
            if start == "data":
                g = min(fam["global"], key=lambda r: r["best_test_error"][0])
                s = min((r for r in fam["schwarz"]
                         if r["best_test_error"][0] <= g["best_test_error"][0]),
                        key=lambda r: r["params"], default=None)
                entry = {"best_global": g["model"], "best_global_error": g["best_test_error"][0],
                         "best_global_params": g["params"], "schwarz": s and s["model"],
                         "schwarz_error": s and s["best_test_error"][0],
                         "schwarz_params": s and s["params"],
                         "param_ratio": s and s["params"] / g["params"]}
            out.setdefault(str(n), {})[start] = entry | budget_ratios(fam)
    return out


def fmt_spread(s, f):
    return "–" if s is None else f"{s[0]:{f}} ({s[1]:{f}}–{s[2]:{f}})"


def fmt_reached(row, unit, t, f):
    """Mean (min–max) over seeds, or how many seeds reached ``t`` when not all did."""
    s = row[f"{unit}_to_{t:g}"]
    k = row[f"reached_{t:g}"]
    return fmt_spread(s, f) if s is not None or k == 0 else f"{k}/{row['seeds']} seeds"


def tables(recs, rows) -> str:
    lines = ["Initialisation (seed 0, validation error) and learning-rate sweep "
             "(validation error after the sweep budget):", "",
             "| n | model | params | random init | data-aware init | init s | "
             + " | ".join(f"lr {lr:g}" for lr in recs[0]["sweep_lrs"]) + " | chosen lr |",
             "|---:|---|---:|---:|---:|---:|" + "---:|" * (len(recs[0]["sweep_lrs"]) + 1)]
    for r in recs:
        val = {s["lr"]: s["val_error"] for s in r["sweep"]}
        lines.append(f"| {r['n']} | {label(r)} | {r['params']} | {r['init']['random']:.2e} | "
                     f"{r['init']['data']:.2e} | {r['init']['init_s']:.2f} | "
                     + " | ".join(f"{val[lr]:.2e}" if lr in val else "–" for lr in r["sweep_lrs"])
                     + f" | {r['lr']:g} |")
    lines += ["", "Budget ladder: smallest budget reaching the test error, mean (min–max) over seeds; "
              "– = not reached within the ladder, k/S seeds = reached in k of S seeds only:", "",
              "| n | model | params | lr | seeds | ladder up to | steps to 1e-2 | s to 1e-2 | "
              "steps to 3e-3 | s to 3e-3 | best test error |",
              "|---:|---|---:|---:|---:|---:|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['n']} | {r['model']} | {r['params']} | {r['lr']:g} | {r['seeds']} | "
                     f"{r['max_budget_run']} | "
                     + "".join(f"{fmt_reached(r, u, t, f)} | " for t in THRESHOLDS
                               for u, f in (("steps", ".0f"), ("seconds", ".2f")))
                     + f"{fmt_spread(r['best_test_error'], '.2e')} |")
    return "\n".join(lines)


def scaling_table(sc) -> str:
    lines = ["| family, threshold | start | n | model | params | steps | seconds | exponent params | "
             "exponent steps | exponent seconds |", "|---|---|---|---|---|---|---|---:|---:|---:|"]
    e = lambda v: "–" if v is None else f"{v:.2f}"  # noqa: E731
    for key, starts in sc.items():
        for start, s in starts.items():
            lines.append(f"| {key} | {start} | {s['n']} | {'; '.join(s['model'])} | {s['params']} | "
                         f"{[round(v) for v in s['steps']]} | {[round(v, 2) for v in s['seconds']]} | "
                         f"{e(s['exponent_params'])} | {e(s['exponent_steps'])} | "
                         f"{e(s['exponent_seconds'])} |")
    return "\n".join(lines)


# the four models' colours of the committed plots; a model added to the registry takes the next
# colours of matplotlib's cycle
COLOURS = {"schwarz": "tab:blue", "global": "tab:red", "flare": "tab:green", "flare++": "tab:purple",
           **{f: f"C{5 + k}" for k, f in enumerate(FAMILIES[4:])}}


def ladder_plot(recs, n, path):
    """Test error against step budget at one size, one panel per start."""
    starts = [k for k in ("data", "random") if any(r["n"] == n and r["init_kind"] == k for r in recs)]
    fig, axes = plt.subplots(1, len(starts), figsize=(6.5 * len(starts), 4.8), sharey=True,
                             squeeze=False)
    for ax, start in zip(axes[0], starts):
        for r in (r for r in recs if r["n"] == n and r["init_kind"] == start):
            b = sorted({run["budget"] for lad in r["ladders"] for run in lad["runs"]})
            err = [np.mean([run["test_error"] for lad in r["ladders"] for run in lad["runs"]
                            if run["budget"] == x]) for x in b]
            ax.semilogy([max(x, 1) for x in b], err, "o-", color=COLOURS[r["family"]], alpha=0.8,
                        label=r["model"])
        ax.set_xscale("symlog", linthresh=100)
        for t in THRESHOLDS:
            ax.axhline(t, color="k", ls=":", lw=0.8)
        ax.set_xlabel("step budget (own cosine schedule; 0 = the initialisation alone)")
        ax.set_title(f"{'data-aware' if start == 'data' else 'random'} start")
        ax.legend(fontsize=6, ncol=2)
    axes[0][0].set_ylabel("relative test error (mean over seeds)")
    fig.suptitle(f"1D Poisson n = {n}: budget ladder (a model's ladder stops once both "
                 "thresholds are reached or on a plateau)")
    save_figure(fig, path, 120)


def scaling_plot(sc, path):
    """Parameters (data-aware start) and steps and seconds (random start) against ``n``."""
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    panels = ((axes[0], "data", "params", "parameters of the smallest model (data-aware start)"),
              (axes[1], "random", "steps", "steps of the fastest model (random start)"),
              (axes[2], "random", "seconds", "CPU seconds of that run (random start)"))
    for ax, start, key, ylabel in panels:
        for name, starts in sc.items():
            s = starts[start]
            if not s["n"]:
                continue
            fam, t = name.split()
            ax.loglog(s["n"], s[key], "o-" if t == "0.003" else "s--", color=COLOURS[fam],
                      label=f"{fam}, test error {t}: slope {s[f'exponent_{key}'] or float('nan'):.2f}")
            if key == "steps" and s["not_reached"]:
                n_out, b_out = zip(*s["not_reached"])
                ax.loglog(n_out, b_out, "^" if t == "0.003" else "v", mfc="none",
                          ms=6 if fam == "schwarz" else 11,
                          color=COLOURS[fam], label=f"{fam}, test error {t}: not within these steps")
        ns = sorted({n for starts in sc.values()
                     for n in starts[start]["n"] + [m for m, _ in starts[start]["not_reached"]]})
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("n")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, which="both")
        if ax.lines:
            lo, hi = ax.get_ylim()
            ax.set_ylim(lo, hi * 6)  # room for the legend above the data
            ax.legend(fontsize=6, loc="upper left", ncol=2)
    fig.suptitle("reaching a test error, against n (slopes: fitted power-law exponents)")
    save_figure(fig, path, 120)


SUMMARY = "operator_learning_summary"


def report(args) -> dict:
    """Merge every run in the results folder: tables, exponents, targets, plots, the summary
    JSON and README.md."""
    runs = {name: data for name, data in bench.results(args).items() if name != SUMMARY}
    recs = [r for data in runs.values() for r in data["records"]]
    recs.sort(key=lambda r: (r["n"], FAMILIES.index(r["family"]), r["params"]))
    rows = [summarise(r) for r in recs]
    sc = scaling(rows)
    tg = targets(rows)
    text = tables(recs, rows)
    print(text)
    print()
    print(scaling_table(sc))
    print()
    print(json.dumps(tg, indent=1))
    summary = {"sources": [f"{name}.json" for name in runs], "rows": rows, "scaling": sc,
               "targets": tg}
    bench.write(args, summary, SUMMARY)
    stem = os.path.join(args.out, SUMMARY)
    figures = []
    for n in sorted({r["n"] for r in recs}):
        ladder_plot(recs, n, f"{stem}_ladder_n{n}.png")
        figures.append(f"![budget ladder n = {n}]({SUMMARY}_ladder_n{n}.png)")
    scaling_plot(sc, f"{stem}_scaling.png")
    figures.append(f"![scaling against n]({SUMMARY}_scaling.png)")
    bench.write_readme(args, "Operator learning: Schwarz attention against global attention, "
                       "FLARE and FLARE++", [
                           ("Sweeps and budget ladders", text),
                           ("Scaling with n", scaling_table(sc)),
                           ("Targets", "```json\n" + json.dumps(tg, indent=1) + "\n```"),
                           ("Plots", "\n\n".join(figures))], runs,
                       intro=f"`{SUMMARY}.json` and the plots are what this command derives "
                             f"from the runs below.")
    return summary


def main(argv=None):
    ap = bench.parser("operator_learning", __doc__, "n = 255, few models, tiny budgets")
    ap.add_argument("--n", type=int, nargs="+", default=None, help="sizes (default 1023; quick: 255)")
    ap.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    ap.add_argument("--models", nargs="+", help="only these models, by name (e.g. 'global r_g=64')")
    ap.add_argument("--init", choices=("data", "random"), default="data",
                    help="initialisation before training (default: data-aware)")
    ap.add_argument("--lr", type=float, nargs="+", default=[3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2],
                    help="learning-rate sweep")
    ap.add_argument("--sweep-steps", type=int, default=None, help="sweep budget (default 500)")
    ap.add_argument("--ladder", type=int, nargs="+", default=None,
                    help="step budgets (default 0 250 500 1000 2000 4000)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--patience", type=int, default=2,
                    help="stop a model's ladder after this many rungs without a lower validation "
                         "error (0: never)")
    ap.add_argument("--evaluations", type=int, default=20, help="validation checks per run")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--modes", type=int, default=None, help="Fourier modes K (default (n+1)/4)")
    ap.add_argument("--decay", type=float, default=0.0, help="coefficient decay a_k ~ k^-p")
    ap.add_argument("--train", type=int, default=1024)
    ap.add_argument("--val", type=int, default=128)
    ap.add_argument("--test", type=int, default=256)
    ap.add_argument("--data-seed", type=int, default=0)
    ap.add_argument("--name", default="operator_learning", help="file stem of the run's JSON")
    args = bench.parse(ap, argv)
    if args.report:
        return report(args)
    args.n = args.n or ([255] if args.quick else [1023])
    args.sweep_steps = args.sweep_steps or (40 if args.quick else 500)
    args.patience = args.patience or None
    args.ladder = args.ladder or ([0, 20, 40] if args.quick else [0, 250, 500, 1000, 2000, 4000])
    torch.set_num_threads(1)
    t0 = time.time()
    out = {"args": {k: v for k, v in vars(args).items() if k != "argv"}, "cores": os.cpu_count(),
           "torch_threads": 1, "records": []}
    for n in args.n:
        grid = [g for g in model_grid(n, args.quick)
                if g[0] in args.families and (not args.models or g[1] in args.models)]
        for i, (family, name, factory, factor) in enumerate(grid):
            rec = run_model(n, family, name, factory, factor, args)
            rec["sweep_lrs"] = args.lr
            out["records"].append(rec)
            s = summarise(rec)
            print(f"[{i + 1}/{len(grid)}] n={n} {name:22s} params={rec['params']:7d} "
                  f"init {rec['init']['random']:.2e} -> {rec['init']['data']:.2e} lr={rec['lr']:g} "
                  f"steps to 1e-2 {fmt_spread(s['steps_to_0.01'], '.0f')} "
                  f"3e-3 {fmt_spread(s['steps_to_0.003'], '.0f')} "
                  f"best {fmt_spread(s['best_test_error'], '.2e')} [{time.time() - t0:.0f} s]",
                  flush=True)
            out["wall_s"] = time.time() - t0
            # after every model, atomically: an interrupted long run keeps its last complete file
            path = bench.write(args, out, args.name)
    print(f"wrote {path}; {time.time() - t0:.0f} s")
    return out


if __name__ == "__main__":
    main()
