r"""The learned coarse space on coefficient fields it never saw, against hats, spectral and GAMG.

    mpiexec -n 2 python benchmarks/many_fields.py [--quick] [--model FILE] [--out DIR]
             [--name STEM]
    python benchmarks/many_fields.py --report     (README.md and plots from every JSON in DIR)

A run writes ``DIR/<STEM>.json`` (default stem ``many_fields``; the committed variants:
``many_fields_ablation``, ``many_fields_starts``, ``many_fields_trained255`` with ``--model``
the 255² model beside them, ``many_fields_steps`` with ``--steps-curve``,
``many_fields_attention`` with ``--k 4``: the Schwarz-attention coarse space against the
classical ones at its k) and its plots.
``--report`` prints each file's condensed table (a ``--steps-curve`` file: iterations against
refinement steps, with the hats and spectral k = 8 of the first fields file on the same
fields), the first fields file's learned iterations over each other's on the fields they share,
and every fields file's full tables.

Fields: the seeded families of :mod:`ddlearn.decomposition.coefficients` (``channels``,
``inclusions``, ``lognormal``) at contrast 1e6 with test seeds (``SEEDS["test"]`` on: never
used in training or validation), ``--fields`` of them at 255² (N = 64) and ``--large-fields``
at 511² (N = 256), so the local resolution (about 32² per subdomain) is the training one; plus
the constant coefficient (Poisson). Matrix in the natural ordering, PETSc's default rows,
coordinates attached (for the hats). Methods (``ddlearn.pc.TwoLevelSchwarzPC`` on box
subdomains, overlap 1, exact local solves; CG to rtol 1e-8 from a random right-hand side): the
Q1 ``hats``; ``gdsw`` and ``rgdsw``; ``spectral`` and ``learned`` at their defaults and with
k vectors per subdomain, each alone and with the hats; ``schwarz attention k=K`` (the shipped
Schwarz-attention model of the dimension, or ``--attention-model``; left out where there is
none); PETSc's GAMG with its defaults (``gamg``) and tuned (``gamg-tuned``: threshold 0.01,
``METHODS["gamg-tuned"]`` of :mod:`ddlearn.harness.methods`). On ``--curve-fields`` channels fields: iterations against k for spectral
and learned. Times: slowest rank, set-up split (partition, coarse basis, local factorisations,
coarse matrix; the learned basis split into factorisation + features, forward pass,
refinement). The one-off training time comes from the model's record; the fields after which it
has paid back against spectral follow from the per-field totals.
"""
from __future__ import annotations

import json
import os

import numpy as np
import torch

import petsc4py

petsc4py.init([])
from mpi4py import MPI  # noqa: E402
from petsc4py import PETSc  # noqa: E402

from ddlearn.classical.coarse.hats import Hats  # noqa: E402
from ddlearn.classical.coarse.spectral import Spectral  # noqa: E402
from ddlearn.learned.coarse.learned import Learned  # noqa: E402
from ddlearn.decomposition.problems import family_problem_name, make_problem  # noqa: E402
from ddlearn.learned.coarse.learned import PRETRAINED_BY_DIM  # noqa: E402
from ddlearn.learned.coarse.local_training import SEEDS  # noqa: E402
from ddlearn.learned.coarse.schwarz_attention import (PRETRAINED_ATTENTION,  # noqa: E402
                                                      SchwarzAttentionCoarse)
from ddlearn.harness import bench  # noqa: E402
from ddlearn.harness.report import plt, save_figure  # noqa: E402
from ddlearn.harness.systems import natural_matrix, pc_solves  # noqa: E402

COMM = MPI.COMM_WORLD
FAMILIES = ("channels", "inclusions", "lognormal")
#: subdomains per grid: about 32² (2D) or 12³ (3D) unknowns each, the models' training
#: resolutions; 2D and 3D grids never share an n
N_OF = {63: 4, 127: 16, 255: 64, 511: 256, 24: 8, 48: 64}
DIM_OF = {63: 2, 127: 2, 255: 2, 511: 2, 24: 3, 48: 3}
#: the threshold of the adaptive variants (spectral and learned alike)
TAU = 0.5
#: the starts of the ablation: each feeds the same refinement (the served steps, the
#: a-posteriori check off so that no subdomain gets more)
ABLATION = ("network", "random", "polynomial", "previous")


def ablation_name(start: str, k: int) -> str:
    return f"learned k={k} start={start}, no check"


def attention_name(path: str) -> str:
    """The method name of a Schwarz-attention model: its ``k`` from the record."""
    with open(path + ".json") as f:
        return f"schwarz attention k={json.load(f)['train_config']['k']}"


def methods(k: int, model: str | None, attention: str | None = None) -> dict:
    """Every method by name (instances persist over the fields of a run: the warm and
    ``previous`` variants start from the last field's vectors of the same subdomain);
    ``attention``: a Schwarz-attention model (its method left out without one)."""
    out = {"hats": dict(coarse_space="hats"), "gdsw": dict(coarse_space="gdsw"),
           "rgdsw": dict(coarse_space="rgdsw"),
           "spectral": dict(coarse_space="spectral"), "learned": dict(coarse_space="learned"),
           f"spectral k={k}": dict(coarse_space=Spectral(k)),
           f"spectral k={k} warm": dict(coarse_space=Spectral(k, warm_start=True)),
           f"spectral tau={TAU}": dict(coarse_space=Spectral(k, TAU)),
           f"hats+spectral k={k}": dict(coarse_space=Hats() + Spectral(k)),
           f"learned k={k}": dict(coarse_space=Learned(model, nev=k)),
           f"learned k={k} neumann pencil": dict(coarse_space=Learned(model, nev=k,
                                                                      pencil="neumann")),
           f"learned tau={TAU}": dict(coarse_space=Learned(model, nev=k, threshold=TAU)),
           f"hats+learned k={k}": dict(coarse_space=Hats() + Learned(model, nev=k)),
           # served as by default, a-posteriori check on: what a bad start costs
           f"learned k={k} random start": dict(coarse_space=Learned(model, nev=k,
                                                                    start="random")),
           "gamg": "gamg", "gamg-tuned": "gamg-tuned"}
    for start in ABLATION:
        out[ablation_name(start, k)] = dict(coarse_space=Learned(model, nev=k, start=start,
                                                                 tol=1e300))
    if attention is not None:
        out[attention_name(attention)] = dict(coarse_space=SchwarzAttentionCoarse(attention))
    return out


def field(family: str, n: int, seed: int, contrast: float):
    kwargs = {} if family == "poisson" else {"contrast": contrast, "seed": seed}
    return make_problem(family_problem_name(family, DIM_OF[n]), n, **kwargs)


def size_label(n: int) -> str:
    return f"{n}{'³' if DIM_OF[n] == 3 else '²'}"


def solve_field(problem, N: int, configs: dict) -> list[dict]:
    A = natural_matrix(problem)
    lo, hi = A.getOwnershipRange()
    b = A.createVecLeft()
    b.setArray(np.random.default_rng(0).uniform(-1, 1, problem.n)[lo:hi])
    rows = []
    for name, config in configs.items():
        r = pc_solves(A, [b], N, config)
        for key in ("learned", "schwarz_attention"):
            if r[key] and r[key].get("model"):
                r[key] = {**r[key], "model": bench.relative(r[key]["model"])}
        rows.append({"method": name, "iterations": r["iterations"][0], "setup_s": r["setup_s"],
                     "solve_s": r["solve_s"], "total_s": r["setup_s"] + r["solve_s"],
                     "split": r["split"], "n0": r["n0"], "learned": r["learned"],
                     "spectral": r["spectral"], "attention": r["schwarz_attention"]})
    A.destroy(), b.destroy()
    return rows


def main(argv: list[str] | None = None):
    ap = bench.parser("many_fields", __doc__,
                      "63² (2 fields), 127² (1 field) and 24³ (1 field), k = 8 only")
    ap.add_argument("--model", help="learned coarse-space model (default: the one shipped for "
                    "the dimension)")
    ap.add_argument("--attention-model", help="Schwarz-attention coarse-space model (default: "
                    "the one shipped for each dimension; its method is left out where none is)")
    ap.add_argument("--fields", type=int, default=20, help="fields per family at 255²")
    ap.add_argument("--large-fields", type=int, default=5, help="fields per family at 511²")
    ap.add_argument("--fields-3d", type=int, default=0, help="fields per family at 48³ (N = 64)")
    ap.add_argument("--curve-fields", type=int, default=5, help="channels fields for its vs k")
    ap.add_argument("--methods", nargs="+", help="a subset of the methods (default: all)")
    ap.add_argument("--steps-curve", type=int, nargs="*", default=[],
                    help="only: iterations against refinement steps on the curve fields")
    ap.add_argument("--contrast", type=float, default=1e6)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--name", default="many_fields", help="file stem of the JSON and plots")
    args = bench.parse(ap, argv)
    if args.report:
        return readme(args)
    torch.set_num_threads(1)  # one thread per rank: the ranks already share the cores
    if args.steps_curve:
        return steps_curve(args)
    sizes = ((63, 2), (127, 1), (24, 1)) if args.quick else \
        ((255, args.fields), (511, args.large_fields), (48, args.fields_3d))
    curve_ks = () if args.quick or not args.curve_fields else (2, 4, 8)
    models = {dim: args.model or PRETRAINED_BY_DIM[dim] for dim in (2, 3)}
    records = {}
    for dim, path in models.items():
        if os.path.exists(path + ".json"):
            with open(path + ".json") as f:
                records[dim] = json.load(f)
    attention = {dim: path for dim, path in PRETRAINED_ATTENTION.items()
                 if os.path.exists(path + ".json")}
    if args.attention_model:
        with open(args.attention_model + ".json") as f:
            attention[json.load(f)["train_config"]["dim"]] = args.attention_model
    by_dim = {dim: methods(args.k, args.model, attention.get(dim)) for dim in (2, 3)}
    if args.methods:
        known = {m for c in by_dim.values() for m in c}
        unknown = set(args.methods) - known
        if unknown:
            ap.error(f"unknown methods {sorted(unknown)}; choose from {sorted(known)}")
        by_dim = {dim: {m: c[m] for m in args.methods if m in c} for dim, c in by_dim.items()}
    rows = []
    for n, count in sizes:
        if count == 0:
            continue
        N = N_OF[n]
        jobs = [(fam, SEEDS["test"] + s) for fam in FAMILIES for s in range(count)]
        jobs.append(("poisson", 0))
        for family, seed in jobs:
            problem = field(family, n, seed, args.contrast)
            for r in solve_field(problem, N, by_dim[DIM_OF[n]]):
                rows.append({"family": family, "seed": seed, "n": n, "dim": DIM_OF[n], "N": N,
                             **r})
                PETSc.Sys.Print(f"{size_label(n)} {family} {seed}: {r['method']:18s} its {r['iterations']:4d}"
                                f"  setup {r['setup_s']:.2f} s  solve {r['solve_s']:.2f} s")
    curve = []
    for seed in range(args.curve_fields if curve_ks else 0):
        problem = field("channels", 255, SEEDS["test"] + seed, args.contrast)
        for k in curve_ks:
            cfg = {m: c for m, c in methods(k, args.model).items()
                   if m in (f"spectral k={k}", f"learned k={k}")}
            for r in solve_field(problem, 64, cfg):
                curve.append({"seed": SEEDS["test"] + seed, "k": k, **r})
                PETSc.Sys.Print(f"curve {seed} {r['method']}: its {r['iterations']}")
    data = {"ranks": COMM.Get_size(), "cores": os.cpu_count(), "contrast": args.contrast,
            "k": args.k, "model": os.path.basename(models[2]),
            "models": {str(dim): bench.relative(path) for dim, path in models.items()},
            "attention_models": {str(dim): bench.relative(path)
                                 for dim, path in attention.items()},
            "training": {key: records.get(2, {}).get(key) for key in
                         ("data_s", "train_s", "ranks", "fields", "samples", "train_config")},
            "training_by_dim": {str(dim): {key: rec.get(key) for key in
                                           ("data_s", "train_s", "ranks", "fields", "samples",
                                            "train_config")}
                                for dim, rec in records.items()},
            "rows": rows, "curve": curve}
    path = bench.write(args, data, args.name)
    bench.show(report(data))
    if COMM.Get_rank() == 0:
        plot(data, os.path.splitext(path)[0])
    bench.show(f"wrote {path}")
    return data


def readme(args) -> dict:
    """README.md from every JSON of the study in the results folder, the plots redrawn."""
    files = bench.results(args)
    sections = [("Condensed", summaries(list(files.items())))]
    for name, data in files.items():
        if _is_steps(data):
            continue
        if COMM.Get_rank() == 0:
            plot(data, os.path.join(args.out, name))
        figures = [f"![{name}]({name}.png)"] + \
            ([f"![{name}: vectors per subdomain]({name}_vectors.png)"] if data["curve"] else [])
        sections.append((f"{name}.json", report(data) + "\n\n" + "\n\n".join(figures)))
    bench.write_readme(args, "The learned coarse space on coefficient fields it never saw",
                       sections, files)
    return files


def steps_curve(args) -> dict:
    """CG iterations of the learned coarse space against its refinement steps (0: the network's
    vectors alone) on ``--curve-fields`` channels fields at 255²."""
    rows = []
    for seed in range(args.curve_fields):
        problem = field("channels", 255, SEEDS["test"] + seed, args.contrast)
        cfg = {f"learned steps={s}": dict(coarse_space=Learned(args.model, nev=args.k,
                                                                     steps=s))
               for s in args.steps_curve}
        for r in solve_field(problem, 64, cfg):
            rows.append({"seed": SEEDS["test"] + seed, **r})
    data = {"ranks": COMM.Get_size(), "contrast": args.contrast, "rows": rows}
    path = bench.write(args, data, args.name)
    bench.show(steps_table(data))
    bench.show(f"wrote {path}")
    return data


def steps_table(data) -> str:
    """Mean / max CG iterations and learned-basis seconds against the refinement steps."""
    steps = sorted({int(r["method"].split("=")[1]) for r in data["rows"]})
    lines = ["| refinement steps s | CG its (mean) | max | learned basis s |",
             "|---:|---:|---:|---:|"]
    for s in steps:
        rs = [r for r in data["rows"] if r["method"] == f"learned steps={s}"]
        label = {0: "0 (the network's vectors alone)", 2: "2 (default)"}.get(s, str(s))
        lines.append(f"| {label} | {np.mean([r['iterations'] for r in rs]):.1f} | "
                     f"{max(r['iterations'] for r in rs)} | "
                     f"{np.mean([r['split']['basis_s'] for r in rs]):.2f} |")
    return "\n".join(lines)


def _is_steps(data) -> bool:
    return bool(data["rows"]) and "family" not in data["rows"][0]


def summaries(files: list[tuple[str, dict]]) -> str:
    """Each file's condensed table, then the cross-file lines (see the module docstring);
    ``files``: (name, data) pairs."""
    fields = [(p, d) for p, d in files if not _is_steps(d)]
    out = []
    for path, data in files:
        out += [f"{os.path.basename(path)}:", "",
                steps_table(data) if _is_steps(data) else summary(data), ""]
    for path, data in files:
        if not (_is_steps(data) and fields):
            continue
        seeds = {r["seed"] for r in data["rows"]}
        ref_path, ref = fields[0]
        hats = [r["iterations"] for r in ref["rows"] if r["n"] == 255 and r["seed"] in seeds
                and r["family"] == "channels" and r["method"] == "hats"]
        k = ref.get("k", 8)
        spec = [c["iterations"] for c in ref.get("curve", []) if c["seed"] in seeds
                and c["k"] == k and c["method"] == f"spectral k={k}"]
        out.append(f"On the {len(seeds)} fields of {os.path.basename(path)}, from "
                   f"{os.path.basename(ref_path)}: hats {np.mean(hats):.1f} (mean of "
                   f"{len(hats)}), spectral k={k} {np.mean(spec):.1f} (its curve, mean of "
                   f"{len(spec)})")
    if len(fields) > 1:
        (first_path, first), others = fields[0], fields[1:]
        for path, other in others:
            if not any(r["method"] == f"learned k={first.get('k', 8)}" for r in other["rows"]):
                continue  # a run without the learned space (GAMG only, say)
            out += ["", f"Learned k={first.get('k', 8)}, mean CG iterations on the same fields, "
                    f"{first['model']} ({os.path.basename(first_path)}) / {other['model']} "
                    f"({os.path.basename(path)}):", "", "| n | family | fields | ratio |",
                    "|---|---|---:|---:|"]
            method = f"learned k={first.get('k', 8)}"
            theirs = {(r["n"], r["family"], r["seed"]): r["iterations"] for r in other["rows"]
                      if r["method"] == method}
            groups = {}
            for r in first["rows"]:
                key = (r["n"], r["family"], r["seed"])
                if r["method"] == method and key in theirs:
                    groups.setdefault(key[:2], []).append((r["iterations"], theirs[key]))
            for (n, family), pairs in sorted(groups.items()):
                a, b = zip(*pairs)
                out.append(f"| {size_label(n)} | {family} | {len(pairs)} | {np.mean(a) / np.mean(b):.2f} |")
    return "\n".join(out).rstrip()


def table(data) -> dict:
    """Per (n, family, method): mean/max iterations and mean times over the fields."""
    out = {}
    for r in data["rows"]:
        out.setdefault((r["n"], r["family"], r["method"]), []).append(r)
    summary = {}
    for key, rs in out.items():
        split = lambda k: float(np.mean([r["split"].get(k, 0.0) for r in rs]))  # noqa: E731
        its = [r["iterations"] for r in rs]
        summary[key] = {
            "fields": len(rs), "mean_its": float(np.mean(its)), "max_its": int(max(its)),
            "not_converged": sum(i < 0 for i in its),
            "setup_s": float(np.mean([r["setup_s"] for r in rs])),
            "basis_s": split("basis_s"), "local_s": split("local_s"),
            "coarse_s": split("coarse_s"), "partition_s": split("partition_s"),
            "solve_s": float(np.mean([r["solve_s"] for r in rs])),
            "total_s": float(np.mean([r["total_s"] for r in rs])),
            "n0": int(np.mean([r["n0"] for r in rs]))}
        attention = [r["attention"] for r in rs if r.get("attention")]
        if attention:
            summary[key]["forward_s"] = float(np.mean([m["forward_s"] for m in attention]))
        learned = [r["learned"] for r in rs if r.get("learned")]
        if learned:
            for part in ("factor_s", "forward_s", "refine_s", "check_s", "more_steps",
                         "eigensolves"):
                summary[key][part] = float(np.mean([m.get(part, 0.0) for m in learned]))
        spectral = [r["spectral"] for r in rs if (r.get("spectral") or {}).get("eps_iterations")
                    is not None]
        if spectral:
            summary[key]["eps_iterations"] = float(np.mean([m["eps_iterations"]
                                                            for m in spectral]))
    return summary


def summary(data) -> str:
    """Per size and family: mean (max) CG iterations and mean total seconds per field of every
    method."""
    s = table(data)
    methods_ = list(dict.fromkeys(key[2] for key in s))
    lines = ["| n | family | fields | " + " | ".join(methods_) + " |",
             "|---|---|---:|" + "---|" * len(methods_)]
    for n, family in sorted({(key[0], key[1]) for key in s}):
        cells = [f"{s[n, family, m]['mean_its']:.1f} ({s[n, family, m]['max_its']}) / "
                 f"{s[n, family, m]['total_s']:.2f} s" if (n, family, m) in s else ""
                 for m in methods_]
        lines.append(f"| {size_label(n)} | {family} | {s[n, family, methods_[0]]['fields']} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def ablation(data) -> str:
    """The starts of the same refinement side by side, the served variants against spectral
    (iterations, basis and set-up time, adaptive n_0) and SLEPc warm against cold."""
    s, k = table(data), data["k"]
    groups = sorted({(key[0], key[1]) for key in s})
    starts = [ablation_name(st, k) for st in ABLATION]
    lines = ["Same refinement from each start (a-posteriori check off), mean CG iterations; "
             "'network vs best other' = 1 - network / min(others):", "",
             "| size | family | fields | " + " | ".join(ABLATION) + " | network vs best other |",
             "|---|---|---:|" + "---:|" * (len(ABLATION) + 1)]
    for n, family in groups:
        cells = [s.get((n, family, m), {}).get("mean_its") for m in starts]
        if cells[0] is None:
            continue
        others = [c for c in cells[1:] if c is not None]
        gain = f"{1 - cells[0] / min(others):+.0%}" if others else ""
        lines.append(f"| {size_label(n)} | {family} | {s[n, family, starts[0]]['fields']} | "
                     + " | ".join("" if c is None else f"{c:.1f}" for c in cells)
                     + f" | {gain} |")
    L, S = f"learned k={k}", f"spectral k={k}"
    lines += ["", f"Served ({L}: network start, check on) against {S} (SLEPc, cold), ratios of "
              "the means; adaptive: both with threshold tau = " + f"{TAU:g}:", "",
              "| size | family | its learned / spectral | basis learned / spectral | set-up "
              "learned / spectral | more steps / eigensolves per field | n_0 learned tau / "
              "spectral tau | its learned tau / spectral tau | random start (check on): its, "
              "eigensolves |",
              "|---|---|---:|---:|---:|---|---|---|---|"]
    for n, family in groups:
        a, b = s.get((n, family, L)), s.get((n, family, S))
        if not (a and b):
            continue
        at, bt = s.get((n, family, f"learned tau={TAU}")), s.get((n, family,
                                                                   f"spectral tau={TAU}"))
        rnd = s.get((n, family, f"learned k={k} random start"))
        adaptive = (f"{at['n0']} / {bt['n0']}", f"{at['mean_its'] / bt['mean_its']:.2f}") \
            if at and bt else ("", "")
        lines.append(f"| {size_label(n)} | {family} | {a['mean_its'] / b['mean_its']:.2f} | "
                     f"{a['basis_s'] / b['basis_s']:.2f} | {a['setup_s'] / b['setup_s']:.2f} | "
                     f"{a.get('more_steps', 0):.1f} / {a.get('eigensolves', 0):.1f} | "
                     f"{adaptive[0]} | {adaptive[1]} | "
                     + (f"{rnd['mean_its']:.1f}, {rnd.get('eigensolves', 0):.1f}" if rnd else "")
                     + " |")
    W = f"spectral k={k} warm"
    lines += ["", "SLEPc from the previous field's eigenvectors (warm) against cold, per field "
              "(fields in the run's order: the previous field is another unseen field):", "",
              "| size | family | SLEPc its cold | warm | basis s cold | warm | CG its cold | "
              "warm |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for n, family in groups:
        c, w = s.get((n, family, S)), s.get((n, family, W))
        if c and w and "eps_iterations" in c:
            lines.append(f"| {size_label(n)} | {family} | {c['eps_iterations']:.0f} | "
                         f"{w['eps_iterations']:.0f} | {c['basis_s']:.2f} | {w['basis_s']:.2f} |"
                         f" {c['mean_its']:.1f} | {w['mean_its']:.1f} |")
    return "\n".join(lines)


def attention_table(s: dict, name: str) -> str:
    """The Schwarz-attention coarse space against spectral at the same ``k`` (equal coarse
    dimension) and the hats: ratios of the means over the same fields."""
    k = name.rsplit("=", 1)[1]
    lines = [f"{name} against spectral k={k} (the same coarse dimension) and the hats, ratios of "
             "the means; forward: the network's share of the set-up:", "",
             f"| n | family | fields | its | its / spectral k={k} | its / hats | set-up / "
             "spectral | total / spectral | forward s | set-up s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n, family in sorted({(key[0], key[1]) for key in s if key[2] == name}):
        a, b, h = (s.get((n, family, m)) for m in (name, f"spectral k={k}", "hats"))
        ratio = lambda x, y, key: f"{x[key] / y[key]:.2f}" if x and y else ""  # noqa: E731
        lines.append(f"| {size_label(n)} | {family} | {a['fields']} | {a['mean_its']:.1f} | "
                     f"{ratio(a, b, 'mean_its')} | {ratio(a, h, 'mean_its')} | "
                     f"{ratio(a, b, 'setup_s')} | {ratio(a, b, 'total_s')} | "
                     f"{a.get('forward_s', 0):.2f} | {a['setup_s']:.2f} |")
    return "\n".join(lines)


def report(data) -> str:
    s = table(data)
    k = data["k"]
    learned = any("learned" in key[2] for key in s)
    lines = [f"{data['ranks']} ranks on {data['cores']} cores, contrast {data['contrast']:g}, "
             f"model {data['model'] if learned else 'none run'}", "",
             "| n | family | fields | method | n_0 | CG its mean | max | set-up s | basis s | "
             "local s | coarse s | solve s | total s |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (n, family, method), v in sorted(s.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        lines.append(f"| {size_label(n)} | {family} | {v['fields']} | {method} | {v['n0']} | "
                     f"{v['mean_its']:.1f} | {v['max_its']} | {v['setup_s']:.2f} | "
                     f"{v['basis_s']:.2f} | {v['local_s']:.2f} | {v['coarse_s']:.2f} | "
                     f"{v['solve_s']:.2f} | {v['total_s']:.2f} |")
    attention = sorted({key[2] for key in s if key[2].startswith("schwarz attention")})
    if attention:
        lines += ["", attention_table(s, attention[0])]
    if not any("learned" in key[2] for key in s):
        return "\n".join(lines)  # a run of classical methods or GAMG only
    lines += ["", "Learned against the classical methods (same fields, same run; ratios of the "
              "means; basis = coarse-basis construction only):", "",
              "| n | family | variant | its / hats | its / spectral | max its / spectral max | "
              "basis / spectral basis | set-up / spectral set-up | total / spectral total | "
              "total / hats total | learned basis split (factor+features / forward / refine) |",
              "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for n, family in sorted({(key[0], key[1]) for key in s}):
        for variant in ("", "hats+"):
            L, S = s.get((n, family, f"{variant}learned k={k}")), \
                s.get((n, family, f"{variant}spectral k={k}"))
            H = s.get((n, family, "hats"))
            if not (L and S and H):
                continue
            lines.append(
                f"| {size_label(n)} | {family} | {variant or 'alone'} | {L['mean_its'] / H['mean_its']:.2f} | "
                f"{L['mean_its'] / S['mean_its']:.2f} | {L['max_its'] / S['max_its']:.2f} | "
                f"{L['basis_s'] / S['basis_s']:.2f} | {L['setup_s'] / S['setup_s']:.2f} | "
                f"{L['total_s'] / S['total_s']:.2f} | {L['total_s'] / H['total_s']:.2f} | "
                f"{L.get('factor_s', 0):.2f} / {L.get('forward_s', 0):.2f} / "
                f"{L.get('refine_s', 0):.2f} |")
    lines += ["", ablation(data)]
    t = data["training"]
    once = (t.get("data_s") or 0) + (t.get("train_s") or 0)
    lines += ["", f"One-off training: {once:.0f} s ({t.get('fields')} fields, {t.get('samples')} "
              f"subdomains, {t.get('ranks')} ranks). Fields after which it has paid back against "
              f"spectral (per-field total saved):", ""]
    for n, family in sorted({(key[0], key[1]) for key in s}):
        L, S = s.get((n, family, f"learned k={k}")), s.get((n, family, f"spectral k={k}"))
        if L and S:
            saved = S["total_s"] - L["total_s"]
            lines.append(f"- {size_label(n)} {family}: {saved:+.2f} s per field → " +
                         (f"{once / saved:.0f} fields" if saved > 0 else "never"))
    if data["curve"]:
        lines += ["", "CG iterations against vectors per subdomain (channels 255², mean over "
                  f"{len({c['seed'] for c in data['curve']})} fields):", "",
                  "| k | spectral | learned |", "|---:|---:|---:|"]
        for kk in sorted({c["k"] for c in data["curve"]}):
            cells = [np.mean([c["iterations"] for c in data["curve"] if c["k"] == kk
                              and c["method"].startswith(m)]) for m in ("spectral", "learned")]
            lines.append(f"| {kk} | {cells[0]:.1f} | {cells[1]:.1f} |")
    return "\n".join(lines)


def plot(data, stem: str) -> None:
    s = table(data)
    sizes = sorted({key[0] for key in s})
    methods_ = list(dict.fromkeys(key[2] for key in s))
    fig, axes = plt.subplots(1, len(sizes), figsize=(6 * len(sizes), 3.8), squeeze=False)
    for ax, n in zip(axes[0], sizes):
        families = sorted({key[1] for key in s if key[0] == n})
        width = 0.8 / len(methods_)
        for j, m in enumerate(methods_):
            vals = [s.get((n, f, m), {}).get("mean_its", np.nan) for f in families]
            ax.bar(np.arange(len(families)) + j * width, vals, width, label=m)
        ax.set_xticks(np.arange(len(families)) + 0.4 - width / 2, families)
        ax.set_yscale("log")
        ax.set_ylabel("CG iterations (mean over fields)")
        ax.set_title(f"{size_label(n)}, N = {N_OF[n]}, unseen fields")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][-1].legend(fontsize=7)
    save_figure(fig, stem + ".png")
    if data["curve"]:
        fig, ax = plt.subplots(figsize=(5, 3.6))
        for m in ("spectral", "learned"):
            ks = sorted({c["k"] for c in data["curve"]})
            ax.plot(ks, [np.mean([c["iterations"] for c in data["curve"] if c["k"] == k and
                                  c["method"].startswith(m)]) for k in ks], "o-", label=m)
        ax.set_xlabel("vectors per subdomain k")
        ax.set_ylabel("CG iterations")
        ax.set_title("channels 255², N = 64")
        ax.grid(True, alpha=0.3)
        ax.legend()
        save_figure(fig, stem + "_vectors.png")


if __name__ == "__main__":
    main()
