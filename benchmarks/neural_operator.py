r"""Token mixers against their authors' baselines on Darcy flow: trained until the curves flatten,
every model's learning rate swept until its best lies inside the grid, three seeds, compared at
equal parameters, at equal time per epoch, and the authors' own networks beside them.

::

    python benchmarks/neural_operator.py [--workers 2] [--data DIR] [--out DIR] [--quick]
                                         [--models M ...] [--device cuda] [--long]
                                         [--set darcy|mesh|channels3d]
    python benchmarks/neural_operator.py --report [--out DIR] [--set ...]

``--models`` restricts a command to some models (two machines can share the study: a GPU's
command takes the authors' networks, say); ``--device`` trains there (each run records its
device; the timing step and the equal-time widths stay the CPU's); ``--long`` runs only the
longer check, seed 0 at ``long`` x the epochs at each model's best rate and the rate below it.
``--set`` chooses the data (:data:`SETS`): the grid (default), an unstructured mesh, or the 3D
high-contrast channels; a set other than the grid keeps its runs and report in its own folder
inside ``--out``.

One configuration for every model (:data:`CONFIG`, stated in every run's JSON): FNO's Darcy
flow (:mod:`ddlearn.harness.datasets`, 169² solves sub-sampled to 85², 43², 22²), trained at
22² (484 tokens) on the first 1000 training samples, the learning rate chosen on the last 100,
reported on the 200 test samples; AdamW, one-cycle schedule, relative L2 loss, batch 8, the
same epochs (:func:`ddlearn.nn.train.fit`).

The models (:data:`MODELS`):

- the mixers of :data:`ddlearn.nn.MIXERS` in one backbone (:class:`ddlearn.nn.model.NeuralOperator`,
  the same width, depth, heads and MLPs; only the mixer differs), each mixer as its authors
  build it (FLARE and FLARE++ with 64 latents, Transolver's physics attention in its
  structured-grid form with 64 slices, Galerkin as Cao's; their docstrings list the settings);
- ``fno``: the ``neuraloperator`` package's FNO (:class:`ddlearn.harness.fno.GridFNO`);
- ``flare-net``, ``transolver-net``: FLARE's and Transolver's networks in their authors' own
  configuration (:data:`ddlearn.nn.registry.NETWORKS`: their blocks, feed-forwards, norms and
  initialisation), both at half their authors' Darcy width and depth.

The steps, run by every worker in this order as far as what they need is done:

1. ``timing``: median seconds per training step (forward, backward, AdamW; batch 8, one
   thread, nothing else running) and peak memory of every model at every width of ``widths``;
   the *equal-time* width of a model is the one whose step time is nearest the Schwarz model's
   at the budget width. The *equal-parameter* width is the budget width where the model is
   within 10 % of the Schwarz model's parameter count, else the width nearest that count
   (FNO: :func:`~ddlearn.harness.fno.fno_matching`).
2. ``sweep``: seed 0 at every rate of ``lrs`` with the full schedule, at the equal-parameter
   width; a model whose best validation error is at an edge of its rates gets the next rate
   beyond it (x 3), up to ``widen`` more per side, so that its best lies strictly inside.
3. ``seeds``: the other seeds at each model's best rate; where a seed diverges there
   (:data:`DIVERGED`), every seed one swept rate lower, and so on (:func:`seeds_rate`).
4. ``pilot``: the Schwarz model and FLARE at twice the epochs (seed 0, their best rates): the
   curve has flattened when twice the budget changes the test error by little (the report says
   by how much).
5. ``time``: every seed at the equal-time width (where it is not the equal-parameter width),
   at the model's best rate, lowered the same way where a seed diverges.
6. ``transfer``: every seed's equal-parameter model evaluated on the 43² and 85² test sets
   without retraining.
7. ``layouts`` (the grid's set): the Schwarz model on other layouts (:func:`layout_variants`),
   seed 0 at its best rate; the report puts their errors beside the cost of the same layouts at
   64k tokens (``mixer_scaling.py --layouts``).

Each run writes ``runs/<run>.json`` (stamped; history of training loss and validation error
per epoch) and its checkpoint every epoch (``checkpoints/``, not committed); a run that exists
is never redone, an interrupted one resumes from its checkpoint: the same command continues
the study where it stopped, now or in a later session. ``--workers N`` runs N processes that
share the work (a run is claimed by a lock file holding its process id; a claim whose process
is gone is taken over). ``--report`` writes ``README.md`` and the plots from the JSON.
"""
from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from ddlearn.harness import bench
from ddlearn.harness.datasets import ensure_dataset
from ddlearn.harness.report import plt, save_figure
from ddlearn.nn import MIXERS
from ddlearn.nn.checkpoint import load as load_checkpoint
from ddlearn.nn.data import Split, load_dataset
from ddlearn.nn.model import NeuralOperator
from ddlearn.nn.registry import build_network
from ddlearn.nn.train import FIT, Normalizer, fit, parameter_count, predict, training_device
from ddlearn.nn.trainer import relative_error

STUDY = "neural_operator"
NETWORK_MODELS = ("flare-net", "transolver-net")
MODELS = (*MIXERS, "fno", *NETWORK_MODELS)
#: one configuration for every model (a 2-core CPU's budget)
CONFIG = {
    "data": {"family": "darcy", "dim": 2, "fine": 169, "grid": 22, "transfer": [43, 85],
             "train": 1000, "validation": 100, "test": 200},
    "backbone": {"width": 32, "depth": 3, "heads": 4, "mlp_ratio": 2},
    "mixers": {"flare": {"latents": 64}, "flare++": {"latents": 64},
               "physics": {"slices": 64, "form": "grid"},
               "schwarz": {"attention": "softmax", "levels": "both", "combine": "split",
                           "prolongation": "phi"}},
    "layout": {"subdomains": 16, "overlap": 1, "partitioner": "boxes", "coarse": "nicolaides"},
    # the authors' Darcy networks at half their width and depth: FLARE 64 x 8 blocks, 16 heads,
    # 256 latents; Transolver 128 x 8 blocks, 8 heads, 64 slices, structured-mesh form
    "networks": {"flare-net": {"network": "flare", "width": 32, "depth": 4, "heads": 16,
                               "latents": 256},
                 "transolver-net": {"network": "transolver", "width": 64, "depth": 4,
                                    "heads": 8, "slices": 64, "form": "grid"}},
    "batch_size": 8, "weight_decay": 1e-4, "epochs": 40, "lrs": [3e-4, 1e-3, 3e-3], "widen": 4,
    "seeds": [0, 1, 2], "pilot": ["schwarz", "flare"], "long": 4,
    # the layouts that meet or nearly meet the 64k cost target get every seed (the others seed 0)
    "layout_seeds": ["schwarz-n4-o1", "schwarz-n4-o1-ras"],
    "widths": [16, 24, 32, 48, 64, 96], "timing_steps": 12,
}
#: the sets beyond the grid, each one configuration for every model (CONFIG's budget, backbone
#: and sweep): ``mesh``, Darcy on an unstructured P1 mesh of an L-shape with a hole
#: (:mod:`ddlearn.harness.mesh_darcy`, spacing 1/24: 471 nodes, near the grid's 484 tokens), the
#: Schwarz partition by ``rcb`` on the nodes, Transolver in its point-cloud form, no FNO (it
#: needs a grid); ``channels3d``, the high-contrast channels (contrast 1e4) on the unit cube
#: (17³ solves sub-sampled to 9³ = 729 tokens for training, 17³ for the transfer).
def _on_mesh(base: dict, data: dict) -> dict:
    """``base`` on the mesh of ``data``: the Schwarz partition by ``rcb``, physics attention
    and Transolver's network in their point-cloud form."""
    net = base["networks"]["transolver-net"]
    return {**base, "data": data,
            "mixers": {**base["mixers"], "physics": {**base["mixers"]["physics"], "form": "points"}},
            "layout": {**base["layout"], "partitioner": "rcb"},
            "networks": {**base["networks"], "transolver-net": {**net, "form": "points"}}}


SETS = {
    "darcy": CONFIG,
    "mesh": _on_mesh(CONFIG, {"family": "darcy-mesh", "dim": 2, "h": 1 / 24, "jitter": 0.3,
                              "transfer": [], "train": 1000, "validation": 100, "test": 200}),
    "channels3d": {**CONFIG,
                   "data": {"family": "channels", "dim": 3, "fine": 17, "grid": 9,
                            "transfer": [17], "contrast": 1e4, "train": 1000,
                            "validation": 100, "test": 200},
                   "layout": {**CONFIG["layout"], "subdomains": 27}},
}
QUICK = {**CONFIG,
         "data": {"family": "darcy", "dim": 2, "fine": 29, "grid": 8, "transfer": [15, 29],
                  "train": 12, "validation": 4, "test": 8},
         "backbone": {**CONFIG["backbone"], "width": 16, "depth": 1},
         "mixers": {**CONFIG["mixers"], "flare": {"latents": 8}, "flare++": {"latents": 8},
                    "physics": {"slices": 8, "form": "grid"}},
         "layout": {**CONFIG["layout"], "subdomains": 4},
         "networks": {"flare-net": {**CONFIG["networks"]["flare-net"], "width": 16, "depth": 1,
                                    "heads": 4, "latents": 8},
                      "transolver-net": {**CONFIG["networks"]["transolver-net"], "width": 16,
                                         "depth": 1, "heads": 4, "slices": 8}},
         "batch_size": 4, "epochs": 2, "lrs": [1e-3, 3e-3], "widen": 1, "seeds": [0, 1],
         "layout_seeds": ["schwarz-n4-o1-ras"],
         "widths": [8, 16], "timing_steps": 2}
QUICK_SETS = {
    "darcy": QUICK,
    "mesh": _on_mesh(QUICK, {**SETS["mesh"]["data"], "h": 0.1, "train": 12, "validation": 4,
                             "test": 8}),
    "channels3d": {**QUICK,
                   "data": {**SETS["channels3d"]["data"], "fine": 9, "grid": 5, "transfer": [9],
                            "train": 12, "validation": 4, "test": 8},
                   "layout": {**QUICK["layout"], "subdomains": 8}},
}


def layout_variants(cfg: dict) -> dict:
    """The Schwarz model on other layouts (seed 0 at its best rate, the grid's set only): the
    default's subdomain count ``N`` divided by 1, 2, 4, 8 (at least 2), each with and without
    overlap, the default left out, and each with overlap also in the restricted form;
    ``schwarz-n<N>-o<overlap>[-ras]`` -> (layout changes, mixer option changes). At 22² the
    full study's boxes hold about 484 / N = 30, 60, 121, 242 tokens: the sizes that
    ``mixer_scaling.py --layouts`` times at 64k tokens (32 ... 256)."""
    n0, o0 = cfg["layout"]["subdomains"], cfg["layout"]["overlap"]
    out = {}
    for n in dict.fromkeys(n0 // k for k in (1, 2, 4, 8) if n0 // k >= 2):
        for o in (0, 1):
            if (n, o) != (n0, o0):
                out[f"schwarz-n{n}-o{o}"] = ({"subdomains": n, "overlap": o}, {})
            if o:
                out[f"schwarz-n{n}-o{o}-ras"] = ({"subdomains": n, "overlap": o},
                                                 {"restricted": True})
    return out


TITLES = {"darcy": "Darcy", "mesh": "Darcy on an unstructured mesh",
          "channels3d": "3D high-contrast channels"}


def _power(cfg: dict) -> str:
    """The superscript that names a grid of the set (22², 9³)."""
    return "²" if cfg["data"]["dim"] == 2 else "³"


def config_of(args) -> dict:
    """The configuration of the set ``args.set`` (its quick form with ``--quick``)."""
    return (QUICK_SETS if args.quick else SETS)[args.set]


def models_of(cfg: dict) -> tuple:
    """The models a set trains: FNO needs a grid."""
    return tuple(m for m in MODELS if m != "fno" or cfg["data"]["family"] != "darcy-mesh")


# -- models -----------------------------------------------------------------------------------

def build(model: str, cfg: dict, width: int | None = None) -> torch.nn.Module:
    """A model of the study by name at ``width`` (default: its equal-parameter width)."""
    if model in NETWORK_MODELS:
        return build_network({**cfg["networks"][model], "dim": cfg["data"]["dim"]})
    variant = layout_variants(cfg).get(model)
    if variant is not None:
        return _backbone("schwarz", cfg, width or matched_width("schwarz", cfg),
                         {**cfg["layout"], **variant[0]}, variant[1])
    if width is None:
        width = matched_width(model, cfg)
    if model == "fno":
        from ddlearn.harness.fno import GridFNO  # neuraloperator: only where FNO runs

        m = fno_match(cfg)
        return GridFNO(cfg["data"]["dim"], width, m["modes"], m["layers"])
    return _backbone(model, cfg, width, cfg["layout"] if model == "schwarz" else None)


def _backbone(mixer: str, cfg: dict, width: int, layout: dict | None,
              options: dict | None = None) -> NeuralOperator:
    b = cfg["backbone"]
    return NeuralOperator(dim=cfg["data"]["dim"], width=width, depth=b["depth"],
                          heads=b["heads"], mixer=mixer,
                          mixer_options={**cfg["mixers"].get(mixer, {}), **(options or {})},
                          layout=layout, mlp_ratio=b["mlp_ratio"])


def fno_match(cfg: dict) -> dict:
    """FNO's ``hidden``, ``modes``, ``layers`` at the Schwarz model's parameter count."""
    from ddlearn.harness.fno import fno_matching

    return fno_matching(parameter_count(build("schwarz", cfg, cfg["backbone"]["width"])),
                        cfg["data"]["dim"])


_WIDTHS: dict = {}


def matched_width(model: str, cfg: dict, tolerance: float = 0.1) -> int:
    """:func:`_matched_width`, remembered per model and configuration."""
    key = (model, json.dumps(cfg, sort_keys=True), tolerance)
    if key not in _WIDTHS:
        _WIDTHS[key] = _matched_width(model, cfg, tolerance)
    return _WIDTHS[key]


def _matched_width(model: str, cfg: dict, tolerance: float) -> int:
    """The budget width where ``model`` has the Schwarz model's parameter count there within
    ``tolerance``; otherwise the multiple of the heads (up to 4 x the width) nearest it (FNO:
    the matching's ``hidden``). The authors' networks keep their own width."""
    if model in NETWORK_MODELS:
        return cfg["networks"][model]["width"]
    if model == "fno":
        return fno_match(cfg)["hidden"]
    width, heads = cfg["backbone"]["width"], cfg["backbone"]["heads"]
    count = lambda w: parameter_count(build(model, cfg, w))
    target = parameter_count(build("schwarz", cfg, width))
    if model == "schwarz" or abs(count(width) - target) <= tolerance * target:
        return width
    return min(range(heads, 4 * width + 1, heads), key=lambda w: abs(count(w) - target))


# -- data -------------------------------------------------------------------------------------

def dataset(cfg: dict, args, grid: int | None = None):
    """The set's data at ``grid`` points per side (default: the training grid; every grid of
    the study is made in one pass), or on its mesh."""
    d = cfg["data"]
    if d["family"] == "darcy-mesh":
        from ddlearn.harness import mesh_darcy  # scikit-fem: only where the mesh set runs

        opts = mesh_darcy.options(h=d["h"], jitter=d["jitter"],
                                  train=d["train"] + d["validation"], test=d["test"])
        return load_dataset(mesh_darcy.ensure(opts, args.data, progress=not args.quick))
    extra = {"contrast": d["contrast"]} if "contrast" in d else {}
    path = ensure_dataset(d["family"], d["dim"], grid or d["grid"], args.data,
                          progress=not args.quick, fine=d["fine"],
                          resolutions=[d["grid"], *d["transfer"]],
                          train=d["train"] + d["validation"], test=d["test"], **extra)
    return load_dataset(path)


def splits(data, cfg: dict):
    """The first ``train`` training samples, the last ``validation`` ones, the test set."""
    tr, n, v = data.train, cfg["data"]["train"], cfg["data"]["validation"]
    return (Split(tr.coefficient[:n], tr.solution[:n]),
            Split(tr.coefficient[-v:], tr.solution[-v:]), data.test)


def error(model, split, coords, norm, batch_size: int = 4) -> float:
    """Mean relative L2 error of ``model`` on ``split``, physical units."""
    pred = predict(model, split.coefficient, coords, norm, batch_size)
    return float(relative_error(pred, torch.as_tensor(
        split.solution.reshape(len(split.solution), -1))).mean())


# -- one run ----------------------------------------------------------------------------------

def run_name(model: str, width: int, lr: float, seed: int, epochs: int) -> str:
    return f"{model}-w{width}-lr{lr:g}-s{seed}-e{epochs}"


def _paths(args, name: str) -> tuple[Path, Path]:
    out = Path(args.out)
    return out / "runs" / f"{name}.json", out / "checkpoints" / f"{name}.pt"


def _loadavg() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def _device_record(device: torch.device) -> dict:
    """Where a run trained: ``device``, and the GPU's name and peak allocated memory there."""
    if device.type != "cuda":
        return {"device": str(device)}
    return {"device": str(device), "gpu": torch.cuda.get_device_name(device),
            "gpu_peak_mb": torch.cuda.max_memory_allocated(device) / 2 ** 20}


def run_one(args, cfg: dict, model_name: str, width: int, lr: float, seed: int,
            epochs: int | None = None, callback=None, rerun: bool = False,
            write: bool = True) -> dict:
    """Train one model on ``args.device`` (resuming its checkpoint), score it on the
    validation and test sets, write its JSON (unless not ``write``: a checkpoint made again
    for a later step); an existing JSON is returned as it is unless ``rerun``.
    ``callback(entry)`` after every epoch (an exception there interrupts the run, leaving its
    checkpoint)."""
    epochs = epochs or cfg["epochs"]
    name = run_name(model_name, width, lr, seed, epochs)
    path, ckpt = _paths(args, name)
    if path.exists() and not rerun:
        return bench.read(str(path))
    data = dataset(cfg, args)
    train, val, test = splits(data, cfg)
    torch.manual_seed(seed)
    model = build(model_name, cfg, width).to(args.device)  # initialised on the CPU, then moved
    model.use_mesh(data.coords)
    config = replace(FIT, epochs=epochs, batch_size=cfg["batch_size"], lr=lr,
                     weight_decay=cfg["weight_decay"], seed=seed)
    bench.peak_reset()
    base_mb, load_before = bench.memory_mb("VmRSS"), _loadavg()
    # the curve is the validation error (the model selection's set); the test set is read once
    out = fit(model, train, val, data.coords, config, checkpoint=str(ckpt),
              progress=not args.quick, log_input=True, eval_every=1, callback=callback,
              describe={"dataset": data.record.get("sha256"), "train": len(train.solution)})
    norm = Normalizer.from_state(out["normalizer"])
    result = {"run": name, "model": model_name, "width": width, "lr": lr, "seed": seed,
              "epochs": epochs, "parameters": parameter_count(model),
              "validation_error": out["test_error"],
              "test_error": error(model, test, data.coords, norm),
              "seconds_per_epoch": out["seconds_per_epoch"], "peak_mb": bench.peak_mb(),
              "peak_above_start_mb": bench.peak_mb() - (base_mb or 0.0),
              "history": [{"epoch": h["epoch"], "loss": h["loss"], "seconds": h["seconds"],
                           "validation_error": h.get("test_error")} for h in out["history"]],
              "model_config": model.config, "config": cfg,
              "dataset": {k: data.record.get(k) for k in ("family", "grid", "sha256")},
              "threads": torch.get_num_threads(), "loadavg": [load_before, _loadavg()],
              **_device_record(args.device)}
    if write:
        bench.write(args, result, f"runs/{name}")
    bench.show(f"{name}: validation {result['validation_error']:.4g}, test "
               f"{result['test_error']:.4g}, {result['seconds_per_epoch']:.3g} s/epoch, "
               f"{result['parameters']} parameters")
    return result


def transfer_layouts(cfg: dict, grid: int) -> dict:
    """How a Schwarz model's layout follows the finer ``grid`` (no retraining: no weight
    depends on the layout), rule -> layout changes. ``count``: the trained layout, ``N``
    subdomains and the overlap in tokens, so each subdomain holds more tokens and the overlap
    is thinner in space; ``overlap``: ``N`` kept, the overlap scaled with the resolution
    ``h0 / h`` so that its width in space stays; ``size``: the tokens per subdomain kept
    (``N`` grows with the tokens, each subdomain is smaller in space) and the overlap in
    tokens."""
    lay, g0, dim = cfg["layout"], cfg["data"]["grid"], cfg["data"]["dim"]
    return {"count": {},
            "overlap": {"overlap": round(lay["overlap"] * (grid - 1) / (g0 - 1))},
            "size": {"subdomains": None, "subdomain_size": g0 ** dim / lay["subdomains"]}}


def transfer_done(record: dict | None, model) -> bool:
    """Whether the transfer ``record`` of ``model`` is complete: a model with a layout also
    has every rule's errors (a record from before the rules is done again)."""
    return record is not None and ("layouts" in record
                                   or not getattr(model, "needs_layout", False))


def transfer(args, cfg: dict, source: dict) -> dict:
    """The trained model of run ``source`` on the test sets of the finer grids (no
    retraining), a model with a layout under every rule of :func:`transfer_layouts`; where
    this machine no longer has the run's checkpoint it is trained again here, its JSON kept
    and the retrained model's own error at the training grid recorded."""
    name = f"transfer-{source['run']}"
    path, _ = _paths(args, name)
    model = build(source["model"], cfg, source["width"])
    ruled = getattr(model, "needs_layout", False)  # (FNO and the networks have no layout)
    done = bench.read(str(path)) if path.exists() else None
    if transfer_done(done, model):
        return done
    _, ckpt = _paths(args, source["run"])
    base = source
    if not ckpt.exists():  # the run's JSON came from another machine: train it again here
        base = run_one(args, cfg, source["model"], source["width"], source["lr"],
                       source["seed"], source["epochs"], rerun=True, write=False)
    saved = load_checkpoint(str(ckpt))
    model.load_state_dict(saved["state"])
    model.to(args.device)
    norm = Normalizer.from_state(saved["extra"]["normalizer"])
    g0 = str(cfg["data"]["grid"])
    rules = list(transfer_layouts(cfg, cfg["data"]["grid"])) if ruled else ["count"]
    errors = {rule: {g0: base["test_error"]} for rule in rules}
    grids = {rule: {} for rule in rules}  # per rule and grid: its layout changes and N
    for grid in cfg["data"]["transfer"]:
        fine = dataset(cfg, args, grid)
        for rule, changes in (transfer_layouts(cfg, grid).items() if ruled else [("count", {})]):
            if ruled:
                mesh = model.use_mesh(fine.coords, changes)
                grids[rule][str(grid)] = {"changes": changes, "subdomains": len(mesh.sizes)}
            else:  # (FNO's and the networks' use_mesh take no layout)
                model.use_mesh(fine.coords)
            errors[rule][str(grid)] = error(model, fine.test, fine.coords, norm, batch_size=1)
    result = {"run": name, "source": source["run"], "model": source["model"],
              "seed": source["seed"], "width": source["width"], "test_error": errors["count"],
              "source_test_error": source["test_error"], "retrained": base is not source,
              "config": cfg, "device": str(args.device)}
    if ruled:
        result["layouts"] = {rule: {"test_error": errors[rule], "grids": grids[rule]}
                             for rule in rules}
    bench.write(args, result, f"runs/{name}")
    sup = _power(cfg)
    for rule in rules:
        bench.show(f"{name} ({rule}): " + ", ".join(f"{g}{sup}: {e:.4g}"
                                                   for g, e in errors[rule].items()))
    return result


# -- timing -----------------------------------------------------------------------------------

def step_seconds(model, data, cfg: dict, steps: int) -> float:
    """Median seconds of one training step (forward, backward, AdamW) on a batch."""
    coords = torch.as_tensor(data.coords, dtype=torch.float32)
    b = cfg["batch_size"]
    a = torch.as_tensor(np.log(data.train.coefficient[:b]).reshape(b, -1, 1), dtype=torch.float32)
    u = torch.as_tensor(data.train.solution[:b].reshape(b, -1, 1), dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times = []
    for k in range(steps + 2):  # two warm-up steps
        t = time.perf_counter()
        opt.zero_grad()
        relative_error(model(a, coords), u).mean().backward()
        opt.step()
        times.append(time.perf_counter() - t)
    return float(np.median(times[2:]))


def widths_of(model: str, cfg: dict) -> list[int]:
    """The widths a model is timed at: ``widths`` (its equal-parameter width among them)."""
    return sorted({*cfg["widths"], matched_width(model, cfg)})


def timing(args, cfg: dict) -> dict:
    """Step time, parameters and peak memory of every model at every width; the equal-time
    widths."""
    path, _ = _paths(args, "timing")
    if path.exists():
        return bench.read(str(path))
    data = dataset(cfg, args)
    rows, load_before = [], _loadavg()
    for model_name in models_of(cfg):
        for w in ([None] if model_name in NETWORK_MODELS else widths_of(model_name, cfg)):
            torch.manual_seed(0)
            model = build(model_name, cfg, w)
            model.use_mesh(data.coords)
            bench.peak_reset()
            base = bench.memory_mb("VmRSS") or 0.0
            s = step_seconds(model, data, cfg, cfg["timing_steps"])
            rows.append({"model": model_name, "width": w or matched_width(model_name, cfg),
                         "parameters": parameter_count(model), "step_s": s,
                         "epoch_s": s * math.ceil(cfg["data"]["train"] / cfg["batch_size"]),
                         "peak_above_start_mb": bench.peak_mb() - base})
            bench.show(f"timing {model_name} width {rows[-1]['width']}: {s * 1e3:.1f} ms/step, "
                       f"{rows[-1]['parameters']} parameters")
    target = next(r["step_s"] for r in rows if r["model"] == "schwarz"
                  and r["width"] == cfg["backbone"]["width"])
    equal_time = {m: min((r for r in rows if r["model"] == m),
                         key=lambda r: abs(math.log(r["step_s"] / target)))["width"]
                  for m in models_of(cfg) if m not in NETWORK_MODELS}
    result = {"rows": rows, "equal_time_width": equal_time, "target_step_s": target,
              "threads": torch.get_num_threads(), "loadavg": [load_before, _loadavg()],
              "config": cfg}
    bench.write(args, result, "runs/timing")
    return result


# -- the plan ---------------------------------------------------------------------------------

def rates_to_run(done: dict, lrs: list, widen: int) -> list:
    """The sweep's rates so far, given ``done`` (rate -> validation error): ``lrs`` and, while
    the best rate is at an edge, the next rate beyond it (x 3), at most ``widen`` per side."""
    rates = sorted(lrs)
    for _ in range(2 * widen + 1):
        if not all(r in done for r in rates):
            break
        best = min(rates, key=lambda r: done[r])
        low, high = sorted(lrs)[0], sorted(lrs)[-1]
        if best == rates[0] and rates[0] > low / 3 ** widen * 1.01:
            rates.insert(0, _round(rates[0] / 3))
        elif best == rates[-1] and rates[-1] < high * 3 ** widen / 1.01:
            rates.append(_round(rates[-1] * 3))
        else:
            break
    return rates


def _round(lr: float) -> float:
    return float(f"{lr:.3g}")


def best_rate(done: dict, lrs: list, widen: int) -> float | None:
    """The sweep's best rate once it needs no more runs, else None."""
    rates = rates_to_run(done, lrs, widen)
    if not all(r in done for r in rates):
        return None
    return min(rates, key=lambda r: done[r])


def _done(args) -> dict:
    return {p.stem: bench.read(str(p)) for p in sorted((Path(args.out) / "runs").glob("*.json"))}


def _lower_rate(sweep: dict, lr: float) -> float | None:
    """The largest swept rate below ``lr``, or None."""
    return max((r for r in sweep if r < lr), default=None)


#: a seed has diverged when its validation error is more than this many times the best of its
#: group (its seeds and the sweep's seed 0 at the same rate): a diverged run predicts about the
#: mean (validation 0.68 against a trained model's 0.02-0.03), while seeds spread by percents
DIVERGED = 2.0


def seeds_rate(runs: dict, cfg: dict, model: str, width: int, sweep: dict,
               lr: float) -> tuple[float, list, bool]:
    """The rate at which the seeds of ``model`` at ``width`` are reported: the sweep's best
    ``lr``, lowered one swept rate at a time while a seed diverges there (:data:`DIVERGED`).
    Returns that rate, the diverged runs at the rates above it, and whether every seed at the
    rate is done (if not, the rate may still be lowered)."""
    diverged = []
    while True:
        got = [runs.get(run_name(model, width, lr, s, cfg["epochs"])) for s in cfg["seeds"]]
        if None in got:
            return lr, diverged, False
        ref = DIVERGED * min([r["validation_error"] for r in got] + [sweep[lr]])
        bad = [r for r in got if r["validation_error"] > ref]
        lower = _lower_rate(sweep, lr)
        if not bad or lower is None:
            return lr, diverged, True
        diverged += bad
        lr = lower


def plan(args, cfg: dict) -> tuple[list, bool]:
    """The runs of ``args.models`` that can start now, as ``(name, thunk)`` in priority order,
    and whether the study has more to do after them. With ``args.long``: only the longer
    check, seed 0 at ``long`` x the epochs, at each model's best rate so far and the swept
    rate below it (a one-cycle peak that trains stably over the budget may not over a longer
    schedule)."""
    runs = _done(args)
    if "timing" not in runs:
        return [("timing", lambda: timing(args, cfg))], True
    equal_time = runs["timing"]["equal_time_width"]
    todo, waiting = [], False

    def add(model, width, lr, seed, epochs=None):
        name = run_name(model, width, lr, seed, epochs or cfg["epochs"])
        if name not in runs:
            todo.append((name, lambda: run_one(args, cfg, model, width, lr, seed, epochs)))

    for model in args.models:
        w = matched_width(model, cfg)
        sweep = {r["lr"]: r["validation_error"] for r in runs.values()
                 if r.get("model") == model and r.get("width") == w and r.get("seed") == 0
                 and r.get("epochs") == cfg["epochs"] and "lr" in r}
        if args.long:
            if sweep:
                best = min(sweep, key=sweep.get)
                for lr in (best, _lower_rate(sweep, best)):
                    if lr is not None:
                        add(model, w, lr, 0, cfg["long"] * cfg["epochs"])
            continue
        for lr in rates_to_run(sweep, cfg["lrs"], cfg["widen"]):
            add(model, w, lr, 0)
        lr = best_rate(sweep, cfg["lrs"], cfg["widen"])
        if lr is None:
            waiting = True
            continue
        seeds_lr, _, settled = seeds_rate(runs, cfg, model, w, sweep, lr)
        for seed in cfg["seeds"]:
            add(model, w, seeds_lr, seed)
        if model in cfg["pilot"]:
            add(model, w, lr, 0, 2 * cfg["epochs"])
            pilot = runs.get(run_name(model, w, lr, 0, 2 * cfg["epochs"]))
            lower = _lower_rate(sweep, lr)
            if pilot and lower and pilot["validation_error"] > sweep[lr]:
                add(model, w, lower, 0, 2 * cfg["epochs"])  # unstable there: one rate lower
        if model == "schwarz" and args.set == "darcy":
            for variant in layout_variants(cfg):
                for seed in cfg["seeds"] if variant in cfg["layout_seeds"] else [0]:
                    add(variant, w, lr, seed)
        if model in equal_time and equal_time[model] != w:
            time_lr = seeds_rate(runs, cfg, model, equal_time[model], sweep, lr)[0]
            for seed in cfg["seeds"]:
                add(model, equal_time[model], time_lr, seed)
        for seed in cfg["seeds"] if cfg["data"]["transfer"] else []:
            source = runs.get(run_name(model, w, seeds_lr, seed, cfg["epochs"]))
            if source is None or not settled:
                waiting = True
            elif not transfer_done(runs.get(f"transfer-{source['run']}"), build(model, cfg, w)):
                todo.append((f"transfer-{source['run']}",
                             lambda s=source: transfer(args, cfg, s)))
    return todo, bool(todo) or waiting


# -- workers ----------------------------------------------------------------------------------

def _claim(args, name: str) -> bool:
    """Take the lock of run ``name`` (a file with this process's host and id); a lock whose
    process is gone is taken over."""
    lock = Path(args.out) / "checkpoints" / f"{name}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    me = f"{socket.gethostname()} {os.getpid()}"
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            host, _, pid = lock.read_text().partition(" ")
            try:
                alive = host != socket.gethostname() or (os.kill(int(pid), 0) is None)
            except (ProcessLookupError, ValueError):
                alive = False
            if alive:
                return False
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(me)
        return True
    return False


def _release(args, name: str) -> None:
    (Path(args.out) / "checkpoints" / f"{name}.lock").unlink(missing_ok=True)


def work(args, cfg: dict) -> None:
    """Run what the plan offers until the study is done, taking only unclaimed runs."""
    while True:
        todo, more = plan(args, cfg)
        for name, thunk in todo:
            if _claim(args, name):
                try:
                    thunk()
                finally:
                    _release(args, name)
                break
        else:
            if not more:
                return
            time.sleep(0.2 if args.quick else 20)  # the others' runs unlock the next ones


# -- the report -------------------------------------------------------------------------------

def _stat(values) -> str:
    v = np.asarray(values, dtype=float)
    return f"{v.mean():.4f} ± {v.std():.4f}" if len(v) > 1 else f"{v.mean():.4f}"


def summary(runs: dict, cfg: dict) -> dict:
    """Per model: its sweep, best rate, and the seeds' runs at equal parameters and at equal
    time; the transfer."""
    timing_ = runs.get("timing", {})
    equal_time = timing_.get("equal_time_width", {})
    out = {}
    for model in models_of(cfg):
        mine = [r for r in runs.values() if r.get("model") == model and "lr" in r]
        if not mine:  # (and no width to match: FNO's needs neuraloperator)
            out[model] = {"width": None, "sweep": {}, "lr": None, "param": [], "time": [],
                          "time_width": None, "diverged": {}, "transfer": []}
            continue
        w = matched_width(model, cfg)
        sweep = {r["lr"]: r["validation_error"] for r in mine
                 if r["width"] == w and r["seed"] == 0 and r["epochs"] == cfg["epochs"]}
        lr = best_rate(sweep, cfg["lrs"], cfg["widen"]) if sweep else None
        diverged = {}

        def pick(width):
            if lr is None:
                return []
            rate, diverged[width], _ = seeds_rate(runs, cfg, model, width, sweep, lr)
            return [r for r in mine if r["width"] == width and r["lr"] == rate
                    and r["epochs"] == cfg["epochs"]]
        out[model] = {"width": w, "sweep": sweep, "lr": lr, "param": pick(w),
                      "time_width": equal_time.get(model, w),
                      "time": pick(equal_time.get(model, w)), "diverged": diverged,
                      "transfer": [r for r in runs.values() if r.get("model") == model
                                   and r["run"].startswith("transfer-")
                                   and r.get("width") == w]}
    return out


def _epoch_s(runs: dict, model: str, width: int) -> float | None:
    rows = runs.get("timing", {}).get("rows", [])
    return next((r["epoch_s"] for r in rows if r["model"] == model and r["width"] == width), None)


def tables(runs: dict, cfg: dict) -> list[tuple[str, str]]:
    s = summary(runs, cfg)
    sections = []
    ref = lambda key: np.mean([r["test_error"] for r in s["schwarz"][key]]) \
        if s["schwarz"][key] else None

    def table(key, models, width_key):
        rows = []
        base = ref(key)
        for m in models:
            rs = s[m][key]
            if not rs:
                continue
            mean = np.mean([r["test_error"] for r in rs])
            e = _epoch_s(runs, m, s[m][width_key])
            rows.append([m, s[m][width_key], rs[0]["parameters"], f"{rs[0]['lr']:g}", len(rs),
                         _stat([r["test_error"] for r in rs]),
                         f"{base / mean:.2f}" if base else "",
                         f"{e:.3g}" if e else "",
                         f"{np.median([r['seconds_per_epoch'] for r in rs]):.3g}"
                         + (" (GPU)" if any(r.get("device", "cpu") != "cpu" for r in rs) else ""),
                         f"{max(r['peak_above_start_mb'] for r in rs):.0f}"])
        lowered = [f"{m} at width {s[m][width_key]}: "
                   + ", ".join(f"seed {r['seed']} at {r['lr']:g} (validation "
                               f"{r['validation_error']:.3f})"
                               for r in s[m]["diverged"][s[m][width_key]])
                   + f"; its seeds at {s[m][key][0]['lr']:g}" for m in models
                   if s[m][key] and s[m]["diverged"].get(s[m][width_key])]
        note = ("\n\nThe rate is the sweep's best unless a seed diverged there (validation "
                f"error above {DIVERGED:g}x its group's best); then one swept rate lower, for "
                "every seed. Diverged: " + "; ".join(lowered) + ".") if lowered else ""
        return bench.markdown_table(["model", "width", "parameters", "lr", "seeds",
                                     "test rel. L2", "Schwarz / model", "s / epoch (timing)",
                                     "s / epoch (run)", "peak MB"], rows) + note

    mixers = [m for m in s if m not in NETWORK_MODELS]
    sections.append(("Equal parameters (the Schwarz model's count within 10 %)",
                     table("param", mixers, "width")))
    sections.append(("Equal time per epoch (each width's step time nearest the Schwarz model's)",
                     table("time", mixers, "time_width")))
    sections.append(("The authors' own networks (half their Darcy width and depth)",
                     table("param", ["schwarz", *NETWORK_MODELS], "width")))
    sweep_rows = [[m, ", ".join(f"{lr:g}: {v:.4f}" for lr, v in sorted(s[m]["sweep"].items())),
                   f"{s[m]['lr']:g}" if s[m]["lr"] else "(running)"] for m in s
                  if s[m]["sweep"]]
    sections.append(("Learning-rate sweep (seed 0, full schedule; validation rel. L2)",
                     bench.markdown_table(["model", "rate: validation", "best"], sweep_rows)))
    sections.append(flattening(runs, cfg))
    grids = [str(cfg["data"].get("grid")), *map(str, cfg["data"]["transfer"])]
    sup = _power(cfg)
    tr = []
    ruled = False
    for m in s if cfg["data"]["transfer"] else []:
        rs = s[m]["transfer"]
        rows = {m: [r["test_error"] for r in rs]}
        if rs and all("layouts" in r for r in rs):
            ruled = True
            rows.update({f"{m} ({RULES[rule]})": [r["layouts"][rule]["test_error"] for r in rs]
                         for rule in rs[0]["layouts"] if rule != "count"})
        for label, errors in rows.items() if rs else ():
            means = [np.mean([e[g] for e in errors]) for g in grids]
            tr.append([label, len(rs), *(f"{v:.4f}" for v in means),
                       *(f"{v / means[0]:.2f}" for v in means[1:])])
    if tr:
        sections.append((f"Resolution transfer (trained on {grids[0]}{sup}, no retraining)",
                         bench.markdown_table(["model", "seeds",
                                               *(f"{g}{sup} test" for g in grids),
                                               *(f"{g}{sup} / {grids[0]}{sup}"
                                                 for g in grids[1:])], tr)
                         + (TRANSFER_RULES + _retrained(s) if ruled else "")
                         + (FNO_ODD_GRIDS if any(r[0] == "fno" for r in tr) else "")))
    return sections


#: the transfer table's names of :func:`transfer_layouts`' rules
RULES = {"count": "trained layout", "overlap": "overlap scaled", "size": "subdomain size kept"}
TRANSFER_RULES = (
    "\n\nThe Schwarz model's plain row keeps its trained layout on the finer grid: the same "
    "subdomains, so each holds more tokens, and an overlap of the same token count, so it is "
    "thinner in space. *Overlap scaled* keeps the subdomains and scales the overlap with the "
    "resolution (its width in space stays); *subdomain size kept* keeps the tokens per "
    "subdomain (more, smaller subdomains) and the overlap in tokens. No weight depends on the "
    "layout, so all three are the same trained model.")


def _retrained(s: dict) -> str:
    """The transfer note's word on the runs trained again for it (their JSON came from another
    machine): how far the retrained models' training-grid errors lie from their JSONs'."""
    again = [r for m in s for r in s[m]["transfer"] if r.get("retrained")]
    if not again:
        return ""
    g = lambda r: r["test_error"][str(r["config"]["data"]["grid"])]
    worst = max(abs(g(r) / r["source_test_error"] - 1) for r in again)
    return (f" {len(again)} of these runs were trained again here (their checkpoints were not "
            f"on this machine); their training-grid errors "
            + ("equal their runs' JSON exactly." if worst == 0 else
               f"differ from their runs' JSON by at most {100 * worst:.2g} %."))


#: why FNO's transfer to grids of odd size is not FNO's (measured on neuraloperator 1.0.2)
FNO_ODD_GRIDS = (
    "\n\nFNO's row is not a measurement of FNO: `neuraloperator` 1.0.2 (and 2.0.0) undoes its "
    "spectral layer's `fftshift` with `fftshift`, not `ifftshift` (fixed upstream in "
    "neuraloperator pull request 688, in no release yet), which is the identity only on "
    "even sizes. On an odd grid the kept modes come back one frequency off: one spectral layer "
    "of a random FNO, fed cos(2πx) at 22 and 43 points, differs by 123 % on the shared points "
    "(11 % between 21 and 41; `benchmarks/results/fno_odd_grids/`). The training grid 22 is even, so FNO's runs at 22 are sound; 43 "
    "and 85 are odd.")


def flattening(runs: dict, cfg: dict) -> tuple[str, str]:
    """Seed 0 at one rate trained for the budget, twice it (the pilot) and ``long`` x it (the
    longer check): test errors side by side, per model and rate."""
    e = cfg["epochs"]
    spans = [e, 2 * e, cfg["long"] * e]
    at = {(r["model"], r["width"], r["lr"], r["epochs"]): r for r in runs.values()
          if "lr" in r and r["seed"] == 0}
    rows = []
    for m in sorted({k[0] for k in at if k[3] > e}, key=MODELS.index):
        w = matched_width(m, cfg)
        for lr in sorted({k[2] for k in at if k[0] == m and k[1] == w and k[3] > e}):
            got = [at.get((m, w, lr, n)) for n in spans]
            where = sorted({r.get("device", "cpu").split(":")[0] for r in got if r})
            rows.append([m, f"{lr:g}", *(f"{r['test_error']:.4f}" if r else "" for r in got),
                         ", ".join(where)])
    return (f"Flattening: seed 0 trained for {', '.join(map(str, spans))} epochs (test rel. L2)",
            bench.markdown_table(["model", "lr", *(f"{n} epochs" for n in spans), "trained on"],
                                 rows))


def plot(runs: dict, cfg: dict, out: str) -> list[str]:
    """Training curves (seed 0 at the best rate) and the sweep."""
    s = summary(runs, cfg)
    made = []
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for i, m in enumerate(MODELS):  # one colour per model in every set
        if m not in s:
            continue
        r = next((r for r in s[m]["param"] if r["seed"] == 0), None)
        if r is None:
            continue
        h = r["history"]
        axes[0].plot([e["epoch"] for e in h], [e["loss"] for e in h], color=f"C{i % 10}",
                     label=m)
        axes[1].plot([e["epoch"] for e in h], [e["validation_error"] for e in h],
                     color=f"C{i % 10}", label=m)
    if axes[0].lines:
        axes[0].set(xlabel="epoch", ylabel="training loss (rel. L2)", yscale="log")
        axes[1].set(xlabel="epoch", ylabel="validation rel. L2", yscale="log")
        axes[1].legend(fontsize=7)
        made.append(save_figure(fig, os.path.join(out, "curves.png"), 120))
    else:
        plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, m in enumerate(MODELS):
        if m in s and s[m]["sweep"]:
            lrs = sorted(s[m]["sweep"])
            ax.plot(lrs, [s[m]["sweep"][lr] for lr in lrs], marker="o", color=f"C{i % 10}",
                    label=m)
    if ax.lines:
        ax.set(xscale="log", yscale="log", xlabel="peak learning rate",
               ylabel="validation rel. L2 (seed 0)")
        ax.legend(fontsize=7)
        made.append(save_figure(fig, os.path.join(out, "sweep.png"), 120))
    else:
        plt.close(fig)
    return made


#: the mixers' cost at 64k tokens by layout (``mixer_scaling.py --layouts``)
LAYOUT_COSTS = bench.RESULTS / "mixer_scaling" / "mixer_scaling_layouts.json"


def layouts(runs: dict, cfg: dict, out: str, costs: Path = LAYOUT_COSTS):
    """The Schwarz model's layouts (:func:`layout_variants`, seed 0 at its best rate): Darcy test error
    against the 2D cost, at 64k tokens, of the layout with the same subdomain size and overlap
    (``costs``, where measured); the section and the plot's path (None before any run)."""
    s = summary(runs, cfg)["schwarz"]
    ref = next((r for r in s["param"] if r["seed"] == 0), None)
    variants = layout_variants(cfg)
    mine = {v: runs.get(run_name(v, s["width"], s["lr"], 0, cfg["epochs"])) for v in variants}
    if ref is None or not any(mine.values()):
        return None, None
    cost = {2: {}, 3: {}}  # dim -> (size, overlap, restricted) -> time / FLARE's
    if costs.exists():
        points = [p for p in bench.read(str(costs))["points"] if p["status"] == "ok"]
        for dim in cost:
            flare = next((p for p in points if p["dim"] == dim and p["mixer"] == "flare"), None)
            for p in points:
                if p["dim"] == dim and p["mixer"] == "schwarz" and flare:
                    key = (p["subdomain_size"], p["overlap"],
                           p["options"].get("restricted", False))
                    cost[dim][key] = p["time_s"] / flare["time_s"]
    tokens = cfg["data"]["grid"] ** cfg["data"]["dim"]
    default = np.mean([r["test_error"] for r in s["param"]])
    rows, curve = [], {}
    for name, r, lay, ras in [("schwarz", ref, cfg["layout"], False),
                              *((v, mine[v], {**cfg["layout"], **variants[v][0]},
                                 variants[v][1].get("restricted", False)) for v in variants)]:
        if r is None:
            continue
        size = tokens / lay["subdomains"]
        match = min((k for k in cost[2] if k[1:] == (lay["overlap"], ras)),
                    key=lambda k: abs(math.log(k[0] / size)), default=None)
        c, c3 = cost[2].get(match), cost[3].get(match)
        seeds = [x["test_error"] for x in (s["param"] if name == "schwarz" else
                 (runs.get(run_name(name, s["width"], s["lr"], k, cfg["epochs"]))
                  for k in cfg["seeds"])) if x]
        rows.append([name, lay["subdomains"], lay["overlap"], "yes" if ras else "",
                     f"{size:.0f}", f"{r['test_error']:.4f}",
                     f"{r['test_error'] / ref['test_error']:.3f}",
                     f"{_stat(seeds)} ({len(seeds)}), {np.mean(seeds) / default:.3f}"
                     if len(seeds) > 1 else "",
                     f"{match[0]}" if c else "", f"{c:.2f}" if c else "",
                     f"{c3:.2f}" if c3 else ""])
        if c:
            curve.setdefault((lay["overlap"], ras), []).append((c, r["test_error"],
                                                                lay["subdomains"]))
    text = ("Seed 0 at the Schwarz model's best rate on other layouts, trained and tested on the "
            "grid (restricted: queries from each subdomain's own part only); beside it the "
            "forward + backward time in 2D and in 3D, over FLARE's at equal width, of the layout "
            f"with the same subdomain size, overlap and form near 64k tokens "
            f"(`python benchmarks/mixer_scaling.py --layouts`, "
            f"[its report](../mixer_scaling/README.md)). The study's default is the first row; "
            f"the layouts nearest the cost target also have every seed (mean ± spread (seeds), "
            f"over the default's seed mean).\n\n"
            + bench.markdown_table(["model", "subdomains", "overlap", "restricted",
                                    "tokens per subdomain", "test rel. L2", "/ default",
                                    "all seeds, / default",
                                    "64k layout (size)", "64k time / FLARE, 2D",
                                    "3D"], rows))
    path = None
    if curve:
        fig, ax = plt.subplots(figsize=(6, 4))
        for (o, ras), pts in sorted(curve.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-",
                    label=f"overlap {o}" + (", restricted" if ras else ""))
            for x, y, n in pts:
                ax.annotate(f"N={n}", (x, y), fontsize=7, xytext=(3, 3),
                            textcoords="offset points")
        ax.axvline(1.0, color="k", lw=0.8, ls=":", label="FLARE's time")
        ax.axhline(1.05 * ref["test_error"], color="gray", lw=0.8, ls="--",
                   label="default + 5 %")
        ax.set(xlabel="2D time at 64k tokens / FLARE's", ylabel="Darcy test rel. L2 (seed 0)")
        ax.legend(fontsize=7)
        path = save_figure(fig, os.path.join(out, "layouts.png"), 120)
    return ("Schwarz layouts: Darcy error against the cost at 64k tokens", text), path


def report(args) -> None:
    cfg = config_of(args)
    runs = _done(args)
    sections = tables(runs, cfg)
    pngs = plot(runs, cfg, args.out)
    if args.set == "darcy":
        section, png = layouts(runs, cfg, args.out)
        sections += [section] if section else []
        pngs += [png] if png else []
    for path in pngs:
        name = os.path.basename(path)
        sections.append((name.removesuffix(".png"), f"![{name}]({name})"))
    stamps = {}
    for k, r in runs.items():  # one line per distinct command and commit
        p = r.get("provenance", {})
        stamps.setdefault((p.get("command"), p.get("commit"), p.get("dirty")), []).append(k)
    made = [f"- `{c}` at commit {h}{' (with uncommitted changes)' if d else ''}: {len(ks)} runs"
            for (c, h, d), ks in stamps.items()]
    proc = next(iter(runs.values()), {}).get("provenance", {})
    todo, more = plan(args, cfg)
    state = (f"{len(runs)} runs done; the study goes on with the same command (it resumes "
             f"where it stopped: {len(todo)} run{'s' * (len(todo) != 1)} can start now)." if more
             else f"All {len(runs)} runs done.")
    machine = (f"One thread per run, on {proc['cores']} cores ({proc['processor']}). "
               if proc else "")
    if args.set == "darcy":
        others = [f"[{t}]({k}/README.md)" for k, t in TITLES.items()
                  if k != "darcy" and (Path(args.out) / k / "README.md").exists()]
        where = ("the earlier, smaller study is in [HISTORY.md](HISTORY.md)"
                 + (f"; the other sets: {', '.join(others)}" if others else ""))
    else:
        where = "the grid's study is in [the folder above](../README.md)"
    intro = (f"{state} {machine}Each run's JSON in `runs/` holds its stamp and its curves; "
             f"{where}. The configuration, the same for every model:\n\n```json\n{json.dumps(cfg, indent=1)}\n```\n\n"
             f"Made by:\n\n" + ("\n".join(made) or "- (no runs yet)"))
    bench.write_readme(args, f"Token mixers against their authors' baselines "
                       f"({TITLES[args.set]})", sections, {}, intro=intro,
                       options="" if args.set == "darcy" else f" --set {args.set}",
                       out_option=args.base_out)


def _without_workers(argv: list) -> list:
    """``argv`` without its ``--workers`` option (a worker runs alone)."""
    out, skip = [], False
    for a in argv:
        if skip or a.startswith("--workers="):
            skip = False
            continue
        if a == "--workers":
            skip = True
            continue
        out.append(a)
    return out


def parse_args(argv=None):
    """The study's options (the harness's and ``--workers``, ``--data``, ``--models``,
    ``--device``, ``--long``)."""
    ap = bench.parser(STUDY, __doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=1,
                    help="processes sharing the work (one thread each; 2 on a 2-core machine)")
    ap.add_argument("--data", default=None, help="dataset cache folder (default: "
                    "$DDLEARN_DATA or ~/.cache/ddlearn/datasets)")
    ap.add_argument("--models", nargs="+", default=None, choices=MODELS, metavar="M",
                    help=f"the models whose runs this command does (default: all of "
                         f"{', '.join(MODELS)})")
    ap.add_argument("--device", default="cpu",
                    help="where the runs train: cpu, cuda or cuda:N (the timing step and the "
                         "equal-time widths are the CPU's; each run records its device)")
    ap.add_argument("--set", default="darcy", choices=list(SETS),
                    help="the data: darcy (the grid), mesh (an unstructured mesh), channels3d "
                         "(3D high contrast); a set other than darcy has its folder in --out")
    ap.add_argument("--long", action="store_true",
                    help="run only the longer check: seed 0 at 'long' x the epochs, at each "
                         "model's best rate so far and the rate below it")
    args = bench.parse(ap, argv)
    if args.workers < 1:
        ap.error(f"--workers must be at least 1, got {args.workers}")
    args.base_out = args.out  # what --out names; a set's own folder lies in it
    if args.set != "darcy":
        args.out = os.path.join(args.out, args.set)
    models = models_of(config_of(args))
    other = sorted(set(args.models or ()) - set(models))
    if other:
        ap.error(f"--models {' '.join(other)}: not a model of --set {args.set} (FNO needs a "
                 f"grid); choose from {', '.join(models)}")
    args.models = args.models or list(models)
    try:
        args.device = training_device(args.device)
    except ValueError as e:
        ap.error(str(e))
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.report:
        return report(args)
    torch.set_num_threads(1)  # the workers share the cores; one thread is also the fair timing
    # float32 means float32 on a GPU too: no TF32 in matrix products or convolutions
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    cfg = config_of(args)
    dataset(cfg, args)  # made once, before any worker starts
    others = [subprocess.Popen([sys.executable, os.path.abspath(__file__),
                                *_without_workers(sys.argv[1:] if argv is None else argv)])
              for _ in range(args.workers - 1)]
    work(args, cfg)
    if any(p.wait() for p in others):
        raise SystemExit("a worker failed: rerun the same command to resume")
    report(args)


if __name__ == "__main__":
    main(sys.argv[1:])
