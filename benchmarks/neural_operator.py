r"""Neural operators with every token mixer in one backbone, on data made by the project's solver.

::

    python benchmarks/neural_operator.py [--part sweep|darcy|multiscale|ablation|transfer|all]
        [--shard I/N] [--data DIR] [--quick] [--out DIR]
    python benchmarks/neural_operator.py --report

Every mixer of :data:`ddlearn.nn.MIXERS` in :class:`ddlearn.nn.model.NeuralOperator` (the same
depth, heads and MLPs; only the mixer differs) at equal parameters: the budget's width, or, for
a model more than 10 % off the Schwarz model's parameter count there (FLARE and FLARE++, whose
keys and values are residual MLPs), the width nearest that count (:func:`matched_width`), and
the ``neuraloperator`` package's FNO (:class:`ddlearn.harness.fno.GridFNO`, its width and modes
chosen to match the parameter count within 10 %), trained with the same loop
(:func:`ddlearn.nn.train.fit`: relative L2 loss, AdamW, one-cycle schedule, the same epochs,
batch and training samples), on:

- ``darcy``: FNO's Darcy flow at 43² (:mod:`ddlearn.harness.datasets`), three seeds per model,
  each model at the learning rate its own ``sweep`` chose (the same three rates for every model,
  a third of the epochs, scored on 100 held-out training samples);
- ``multiscale``: the channels and inclusions sets (contrast 1e4, 50², input log10 kappa);
- ``ablation``: the Schwarz mixer's overlap 0/1/2, subdomains 16/36/64, local-only,
  coarse-only, softmax against Galerkin, nicolaides against hats coarse basis, the levels summed in
  every head (the paper's form) or side by side against on separate heads (the default),
  attention instead of :math:`\Phi` as the prolongation;
- ``transfer``: the Darcy models of seed 0 evaluated on the 85² test set (no retraining).

Each run writes ``runs/neural_operator-<run>.json`` (stamped) and its checkpoint every epoch
(``checkpoints/``, not committed): an interrupted study resumes where it stopped, now or in a
later run of the same command. ``--shard I/N`` runs every N-th run (two processes on two cores). The budget
(``BUDGET``) is stated in every run's JSON.
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from ddlearn.harness import bench
from ddlearn.harness.report import plt, save_figure
from ddlearn.harness.datasets import ensure_dataset
from ddlearn.harness.fno import GridFNO, fno_matching
from ddlearn.nn import MIXERS
from ddlearn.nn.data import Split, load_dataset
from ddlearn.nn.model import NeuralOperator
from ddlearn.nn.train import FIT, Normalizer, fit, parameter_count, predict
from ddlearn.nn.trainer import relative_error
from ddlearn.nn.checkpoint import load as load_checkpoint

STUDY = "neural_operator"
MODELS = list(MIXERS) + ["fno"]
#: the same for every model: backbone, optimiser and data budget (2-core CPU)
BUDGET = {"width": 32, "depth": 3, "heads": 2, "mlp_ratio": 2, "latents": 32, "batch_size": 4,
          "epochs": 8, "train": 200, "validation": 100, "weight_decay": 1e-4,
          "lrs": [3e-4, 1e-3, 3e-3], "seeds": [0, 1, 2],
          "schwarz": {"subdomains": 36, "overlap": 1, "partitioner": "boxes", "coarse": "nicolaides",
                      "attention": "softmax", "levels": "both", "combine": "split",
                      "prolongation": "phi"}}
QUICK = {**BUDGET, "width": 16, "depth": 1, "latents": 8, "batch_size": 4, "epochs": 2,
         "train": 8, "validation": 4, "lrs": [1e-3, 3e-3], "seeds": [0],
         "schwarz": {**BUDGET["schwarz"], "subdomains": 4}}
DATA = {"darcy": ("darcy", 2, 43), "darcy85": ("darcy", 2, 85),
        "channels": ("channels", 2, 50), "inclusions": ("inclusions", 2, 50)}
ABLATIONS = {"overlap0": {"overlap": 0}, "overlap2": {"overlap": 2},
             "subdomains16": {"subdomains": 16}, "subdomains64": {"subdomains": 64},
             "local": {"levels": "local"}, "coarse": {"levels": "coarse"},
             "galerkin": {"attention": "galerkin"}, "hats": {"coarse": "hats"},
             "sum": {"combine": "sum"}, "concat": {"combine": "concat"},
             "prolongation": {"prolongation": "attention"}}
#: the multiscale sets' models (this machine's budget: the mixers the targets name and FLARE++)
MULTISCALE_MODELS = ["schwarz", "galerkin", "flare", "flare++"]


def build(model: str, budget: dict, schwarz: dict | None = None, width: int | None = None):
    """A model of the study by name: a mixer in the backbone (at :func:`matched_width` unless
    ``width`` is given), or the matching FNO."""
    if model == "fno":
        ref = build("flare", budget)
        m = fno_matching(parameter_count(ref))
        return GridFNO(2, m["hidden"], m["modes"], m["layers"])
    s = {**budget["schwarz"], **(schwarz or {})}
    options = {"flare": {"latents": budget["latents"]}, "flare++": {"latents": budget["latents"]},
               "physics": {"slices": budget["latents"]},
               "schwarz": {k: s[k] for k in ("attention", "levels", "combine", "prolongation")}
               }.get(model, {})
    layout = {k: s[k] for k in ("subdomains", "overlap", "partitioner", "coarse")}
    return NeuralOperator(dim=2, width=width or matched_width(model, budget),
                          depth=budget["depth"], heads=budget["heads"], mixer=model,
                          mixer_options=options, layout=layout if model == "schwarz" else None,
                          mlp_ratio=budget["mlp_ratio"])


def matched_width(model: str, budget: dict, tolerance: float = 0.1) -> int:
    """The budget's width where ``model`` has the Schwarz model's parameter count there within
    ``tolerance``; otherwise the multiple of the heads (up to 4 x the width) nearest it."""
    count = lambda m, w: parameter_count(build(m, budget, width=w))
    width, heads = budget["width"], budget["heads"]
    target = count("schwarz", width)
    if model == "schwarz" or abs(count(model, width) - target) <= tolerance * target:
        return width
    return min(range(heads, 4 * width + 1, heads), key=lambda w: abs(count(model, w) - target))


def dataset(name: str, args, quick: bool):
    family, dim, res = DATA[name]
    opts = {"train": 24, "test": 8, "fine": 169 if family == "darcy" else 50} if quick else {}
    if quick and family == "darcy":
        opts["fine"], res = 29, {43: 15, 85: 29}[res]
        opts["resolutions"] = [15, 29]
    return load_dataset(ensure_dataset(family, dim, res, args.data, progress=not quick, **opts))


def splits(data, budget):
    """The first ``train`` training samples, the last ``validation`` ones, the test set."""
    tr = data.train
    n, v = budget["train"], budget["validation"]
    if n + v > len(tr):
        raise ValueError(f"the budget asks for {n} + {v} training samples; the dataset has "
                         f"{len(tr)}")
    return (Split(tr.coefficient[:n], tr.solution[:n]),
            Split(tr.coefficient[-v:], tr.solution[-v:]), data.test)


def error(model, split, coords, norm) -> float:
    pred = predict(model, split.coefficient, coords, norm)
    return float(relative_error(pred, torch.as_tensor(
        split.solution.reshape(len(split.solution), -1))).mean())


def run_one(args, budget, run: str, model_name: str, data_name: str, seed: int, lr: float,
            epochs: int, schwarz: dict | None = None) -> dict:
    """Train one model (resuming its checkpoint), evaluate, write its JSON."""
    path = Path(args.out) / "runs" / f"{STUDY}-{run}.json"
    if path.exists() and not args.quick:
        return bench.read(str(path))
    data = dataset(data_name, args, args.quick)
    train, val, test = splits(data, budget)
    torch.manual_seed(seed)
    model = build(model_name, budget, schwarz)
    model.use_mesh(data.coords)
    config = replace(FIT, epochs=epochs, batch_size=budget["batch_size"], lr=lr,
                     weight_decay=budget["weight_decay"], seed=seed)
    bench.peak_reset()
    ckpt = str(Path(args.out) / "checkpoints" / f"{run}.pt")
    out = fit(model, train, test, data.coords, config, checkpoint=ckpt, progress=not args.quick,
              log_input=True, eval_every=epochs,
              describe={"dataset": data.record.get("sha256"), "train": len(train.solution)})
    norm = Normalizer.from_state(out["normalizer"])
    result = {"run": run, "model": model_name, "data": data_name, "seed": seed, "lr": lr,
              "epochs": epochs, "parameters": parameter_count(model),
              "width": model.config.get("width"),
              "test_error": out["test_error"], "validation_error": error(model, val, data.coords,
                                                                          norm),
              "seconds_per_epoch": out["seconds_per_epoch"], "peak_mb": bench.peak_mb(),
              "history": out["history"], "budget": budget, "schwarz": schwarz or {},
              "layout": model.mesh.describe() if getattr(model, "mesh", None) else None,
              "dataset": {k: data.record.get(k) for k in ("family", "grid", "sha256")},
              "threads": torch.get_num_threads()}
    bench.write(args, result, f"runs/{STUDY}-{run}")
    bench.show(f"{run}: test {result['test_error']:.4g}, val {result['validation_error']:.4g}, "
               f"{result['seconds_per_epoch']:.1f} s/epoch, {result['parameters']} parameters")
    return result


def sweep_epochs(budget: dict) -> int:
    return max(1, round(budget["epochs"] / 3))


def best_lr(args, budget, model: str) -> float:
    """The sweep's best rate for ``model`` (validation error), running the sweep if needed."""
    runs = [run_one(args, budget, f"sweep-{model}-lr{lr:g}", model, "darcy", 0, lr,
                    sweep_epochs(budget)) for lr in budget["lrs"]]
    return min(runs, key=lambda r: r["validation_error"])["lr"]


def plan(args, budget) -> list:
    """Every run of the requested parts, as ``(run, thunk)`` in a fixed order."""
    parts = ["sweep", "darcy", "transfer", "multiscale", "ablation"] if args.part == "all" \
        else [args.part]
    todo = []
    for part in parts:
        if part == "sweep":
            todo += [(f"sweep-{m}-lr{lr:g}", lambda m=m, lr=lr: run_one(
                args, budget, f"sweep-{m}-lr{lr:g}", m, "darcy", 0, lr,
                sweep_epochs(budget))) for m in MODELS for lr in budget["lrs"]]
        elif part in ("darcy", "multiscale"):
            sets = ["darcy"] if part == "darcy" else ["channels", "inclusions"]
            models = MODELS if part == "darcy" else MULTISCALE_MODELS
            todo += [(f"{d}-{m}-s{s}", lambda d=d, m=m, s=s: run_one(
                args, budget, f"{d}-{m}-s{s}", m, d, s, best_lr(args, budget, m),
                budget["epochs"])) for d in sets for m in models for s in budget["seeds"]]
        elif part == "ablation":
            todo += [(f"ablation-{a}", lambda a=a, o=o: run_one(
                args, budget, f"ablation-{a}", "schwarz", "darcy", 0,
                best_lr(args, budget, "schwarz"), budget["epochs"], o))
                for a, o in ABLATIONS.items()]
        elif part == "transfer":
            todo += [(f"transfer-{m}", lambda m=m: transfer(args, budget, m)) for m in MODELS]
    return todo


def transfer(args, budget, model_name: str) -> dict:
    """The Darcy 43² model of seed 0 evaluated on the 85² test set."""
    run = f"darcy-{model_name}-s0"
    source = run_one(args, budget, run, model_name, "darcy", 0, best_lr(args, budget, model_name),
                     budget["epochs"])
    saved = load_checkpoint(str(Path(args.out) / "checkpoints" / f"{run}.pt"))
    model = build(model_name, budget)
    model.load_state_dict(saved["state"])
    norm = Normalizer.from_state(saved["extra"]["normalizer"])
    fine = dataset("darcy85", args, args.quick)
    model.use_mesh(fine.coords)
    result = {"run": f"transfer-{model_name}", "model": model_name, "trained_on": "darcy",
              "test_error_trained_grid": source["test_error"],
              "test_error_fine_grid": error(model, fine.test, fine.coords, norm),
              "fine_grid": fine.record.get("grid"), "budget": budget}
    bench.write(args, result, f"runs/{STUDY}-transfer-{model_name}")
    return result


# -- the report ------------------------------------------------------------------------------

def _runs(out: str) -> dict:
    return {p.stem.removeprefix(f"{STUDY}-"): bench.read(str(p))
            for p in sorted((Path(out) / "runs").glob(f"{STUDY}-*.json"))}


def _stat(values):
    v = np.asarray(values, dtype=float)
    return f"{v.mean():.4f} ± {v.std():.4f}" if len(v) > 1 else f"{v.mean():.4f}"


def tables(runs: dict) -> list[tuple[str, str]]:
    sections = []
    for part, sets in (("darcy", ["darcy"]), ("multiscale", ["channels", "inclusions"])):
        for d in sets:
            rows = []
            for m in MODELS:
                rs = [r for k, r in runs.items() if k.startswith(f"{d}-{m}-s")]
                if not rs:
                    continue
                rows.append([m, len(rs), _stat([r["test_error"] for r in rs]),
                             rs[0]["parameters"], f"{rs[0]['lr']:g}",
                             f"{np.median([r['seconds_per_epoch'] for r in rs]):.1f}",
                             f"{max(r['peak_mb'] for r in rs):.0f}"])
            if rows:
                means = {m: np.mean([r["test_error"] for k, r in runs.items()
                                     if k.startswith(f"{d}-{m}-s")]) for m, *_ in rows}
                ratios = ", ".join(f"{m} {means['schwarz'] / v:.2f}" for m, v in means.items()
                                   if m != "schwarz") if "schwarz" in means else ""
                sections.append((f"{d}: test relative L2 (mean ± std over seeds)",
                                 bench.markdown_table(["model", "seeds", "test rel. L2",
                                                       "parameters", "lr", "s / epoch",
                                                       "peak MB"], rows)
                                 + (f"\n\nSchwarz's mean error over each model's: {ratios}."
                                    if ratios else "")))
    sweep = [[k.removeprefix("sweep-"), f"{r['validation_error']:.4f}", f"{r['test_error']:.4f}"]
             for k, r in runs.items() if k.startswith("sweep-")]
    if sweep:
        sections.append(("learning-rate sweep (seed 0, a third of the epochs)",
                         bench.markdown_table(["model-lr", "validation", "test"], sweep)))
    abl = [[k.removeprefix("ablation-"), json_short(r["schwarz"]), f"{r['test_error']:.4f}",
            f"{r['seconds_per_epoch']:.1f}"] for k, r in runs.items()
           if k.startswith("ablation-")]
    base = runs.get("darcy-schwarz-s0")
    if abl and base:
        abl.insert(0, ["default", json_short(BUDGET["schwarz"]), f"{base['test_error']:.4f}",
                       f"{base['seconds_per_epoch']:.1f}"])
    if abl:
        sections.append(("Schwarz ablations (Darcy 43², seed 0)",
                         bench.markdown_table(["variant", "change", "test rel. L2", "s / epoch"],
                                              abl)))
    tr = [[r["model"], f"{r['test_error_trained_grid']:.4f}", f"{r['test_error_fine_grid']:.4f}"]
          for k, r in runs.items() if k.startswith("transfer-")]
    if tr:
        sections.append(("resolution transfer (trained on 43², tested on 85², seed 0)",
                         bench.markdown_table(["model", "43² test", "85² test"], tr)))
    return sections


def json_short(d: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items())


def plot(runs: dict, out: str) -> str | None:
    fig, ax = plt.subplots(figsize=(7, 4))
    for m in MODELS:
        rs = [r for k, r in runs.items() if k.startswith(f"darcy-{m}-s")]
        for i, r in enumerate(rs):
            h = [e for e in r["history"] if "test_error" in e]
            ax.plot([e["epoch"] for e in h], [e["test_error"] for e in h],
                    color=f"C{MODELS.index(m)}", label=m if i == 0 else None, marker="o")
    if not ax.lines:
        plt.close(fig)
        return None
    ax.set(xlabel="epoch", ylabel="test relative L2", yscale="log", title="Darcy 43²")
    ax.legend()
    path = os.path.join(out, "darcy_test_error.png")
    return save_figure(fig, path, 120)


def report(args) -> None:
    runs = _runs(args.out)
    sections = tables(runs)
    if plot(runs, args.out):
        sections.append(("test error during training", "![Darcy](darcy_test_error.png)"))
    stamps = {}
    for k, r in runs.items():  # one line per distinct command and commit
        p = r.get("provenance", {})
        stamps.setdefault((p.get("command"), p.get("commit"), p.get("dirty")), []).append(k)
    made = [f"- `{c}` at commit {h}{' (with uncommitted changes)' if d else ''}: {len(ks)} runs"
            for (c, h, d), ks in stamps.items()]
    proc = next(iter(runs.values()), {}).get("provenance", {})
    intro = (f"Budget, the same for every model: `{json_short(BUDGET)}`. One thread per run, "
             f"on {proc.get('cores')} cores ({proc.get('processor')}); each run's JSON in "
             f"`runs/` holds its full stamp and history.\n\nMade by:\n\n" + "\n".join(made))
    bench.write_readme(args, "Neural operators: every token mixer in one backbone", sections,
                       {}, intro=intro)


def main(argv=None) -> None:
    ap = bench.parser(STUDY, __doc__.split("\n")[0])
    ap.add_argument("--part", default="all",
                    choices=["sweep", "darcy", "multiscale", "ablation", "transfer", "all"])
    ap.add_argument("--shard", default="0/1", help="I/N: run every N-th run starting at I")
    ap.add_argument("--data", default=None, help="dataset cache folder (default: "
                    "$DDLEARN_DATA or ~/.cache/ddlearn/datasets)")
    args = bench.parse(ap, argv)
    if args.report:
        return report(args)
    torch.set_num_threads(1)  # two shards share two cores; one thread is also the fair timing
    budget = QUICK if args.quick else BUDGET
    try:
        i, n = (int(v) for v in args.shard.split("/"))
        assert 0 <= i < n
    except (ValueError, AssertionError):
        ap.error(f"--shard must be I/N with 0 <= I < N, got {args.shard!r}")
    for k, (run, thunk) in enumerate(plan(args, budget)):
        if k % n == i:
            thunk()
    report(args)


if __name__ == "__main__":
    main(sys.argv[1:])
