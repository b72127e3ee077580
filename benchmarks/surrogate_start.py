"""Back into the solver: a trained neural operator's prediction as CG's initial guess.

::

    python benchmarks/surrogate_start.py [--checkpoint FILE] [--samples 20] [--rtol 1e-8]
        [--quick] [--out DIR]
    python benchmarks/surrogate_start.py --report

On Darcy fields the model never saw (seeds after the whole dataset's), the fine problem
(the datasets' fine grid, 167² unknowns) is solved twice by the datasets' solver
(:func:`ddlearn.harness.datasets.solve_sample`: CG with the two-level PC, the same options,
``rtol`` on the unpreconditioned residual :math:`\\|b - Au\\|\\le\\mathrm{rtol}\\,\\|b\\|`): from a
zero guess and from the surrogate's prediction, made at the resolution it was trained on (43²)
and interpolated bilinearly to the fine grid. Per field: iterations, solve seconds, the
prediction's relative L2 error and initial residual, and the seconds of the prediction itself.
The model is the study's Darcy checkpoint (``benchmarks/neural_operator.py --part darcy``);
``--quick`` trains a tiny one on the quick dataset first.
"""
from __future__ import annotations

import sys
import time

import numpy as np
import torch
from scipy.interpolate import RegularGridInterpolator

from ddlearn.harness import bench
from ddlearn.harness.datasets import (ensure_dataset, fine_problem, options, sample_coefficient,
                                      solve_sample, solver_options)
from ddlearn.nn.checkpoint import load as load_checkpoint
from ddlearn.nn.data import grid_coords, load_dataset
from ddlearn.nn.model import NeuralOperator
from ddlearn.nn.train import FitConfig, Normalizer, fit, predict

STUDY = "surrogate_start"
DEFAULT = "benchmarks/results/neural_operator/checkpoints/darcy-schwarz-s0.pt"


def quick_model(args):
    """A tiny Schwarz model trained on the quick Darcy set (tests)."""
    data = load_dataset(ensure_dataset("darcy", 2, 15, args.data, progress=False, fine=29,
                                       train=24, test=8, resolutions=[15]))
    torch.manual_seed(0)
    model = NeuralOperator(width=16, depth=1, heads=2, mixer="schwarz",
                           layout={"subdomains": 4, "overlap": 1})
    model.use_mesh(data.coords)
    out = fit(model, data.train, data.test, data.coords, FitConfig(epochs=3, batch_size=4),
              progress=False)
    return model, Normalizer.from_state(out["normalizer"]), data


def study_model(path: str):
    saved = load_checkpoint(path)
    config = dict(saved["config"])
    model = NeuralOperator(**config)
    model.load_state_dict(saved["state"])
    return model, Normalizer.from_state(saved["extra"]["normalizer"])


def main(argv=None) -> None:
    ap = bench.parser(STUDY, __doc__.split("\n")[0])
    ap.add_argument("--checkpoint", default=DEFAULT)
    ap.add_argument("--resolution", type=int, default=43, help="the model's grid (points/side)")
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--rtol", type=float, default=1e-8)
    ap.add_argument("--data", default=None)
    args = bench.parse(ap, argv)
    if args.report:
        return report(args)
    torch.set_num_threads(1)
    if args.quick:
        model, norm, _ = quick_model(args)
        opts = options("darcy", 2, fine=29, train=24, test=8, resolutions=[15])
        res, samples = 15, 3
    else:
        model, norm = study_model(args.checkpoint)
        opts, res, samples = options("darcy", 2), args.resolution, args.samples
    solver_options({**opts, "rtol": args.rtol})
    coarse_coords = grid_coords((res, res))
    model.use_mesh(coarse_coords)
    fine, step = opts["fine"], (opts["fine"] - 1) // (res - 1)
    t = np.linspace(0, 1, fine)
    first = int(opts["train"]) + int(opts["test"])  # fields after the whole dataset's
    rows = []
    for k in range(first, first + samples):
        a = sample_coefficient(opts, k)
        problem = fine_problem(opts, a)
        t0 = time.perf_counter()
        pred = predict(model, a[::step, ::step][None], coarse_coords, norm)[0].numpy()
        guess = RegularGridInterpolator((t[::step], t[::step]), pred.reshape(res, res))(
            np.stack(np.meshgrid(t[1:-1], t[1:-1], indexing="ij"), -1).reshape(-1, 2))
        t_pred = time.perf_counter() - t0
        t0 = time.perf_counter()
        u, its0, _ = solve_sample(problem)
        t_zero = time.perf_counter() - t0
        t0 = time.perf_counter()
        _, its1, res1 = solve_sample(problem, guess)
        t_start = time.perf_counter() - t0
        ones = np.ones(problem.n)
        rows.append({"sample": k, "iterations_zero": its0, "iterations_surrogate": its1,
                     "seconds_zero": t_zero, "seconds_surrogate": t_start,
                     "seconds_prediction": t_pred,
                     "prediction_error": float(np.linalg.norm(guess - u) / np.linalg.norm(u)),
                     "initial_residual": float(np.linalg.norm(ones - problem.matrix() @ guess)
                                               / np.linalg.norm(ones)),
                     "final_residual": res1})
        bench.show(f"field {k}: {its0} -> {its1} iterations, prediction error "
                   f"{rows[-1]['prediction_error']:.3g}")
    summary = {key: float(np.mean([r[key] for r in rows])) for key in rows[0] if key != "sample"}
    bench.write(args, {"rows": rows, "mean": summary, "model": model.config, "fine": fine,
                       "resolution": res, "rtol": args.rtol,
                       "checkpoint": None if args.quick else args.checkpoint})
    report(args)


def report(args) -> None:
    files = bench.results(args)
    data = files.get(STUDY)
    if data is None:
        return
    m = data["mean"]
    rows = [["zero", f"{m['iterations_zero']:.1f}", f"{m['seconds_zero']:.3f}", "", ""],
            ["surrogate", f"{m['iterations_surrogate']:.1f}", f"{m['seconds_surrogate']:.3f}",
             f"{m['prediction_error']:.4f}", f"{m['seconds_prediction']:.3f}"]]
    saved = 1 - m["iterations_surrogate"] / m["iterations_zero"]
    table = bench.markdown_table(["initial guess", "CG iterations (mean)", "solve s (mean)",
                                  "prediction rel. L2", "prediction s"], rows)
    text = (f"{len(data['rows'])} unseen Darcy fields, fine grid {data['fine']}² points, CG to "
            f"rtol {data['rtol']:g} (unpreconditioned residual) with the two-level PC; the "
            f"model ({data['model']['mixer']}, width {data['model']['width']}, depth "
            f"{data['model']['depth']}) predicts at {data['resolution']}², interpolated "
            f"bilinearly.\n\n{table}\n\nIterations saved: {saved:.1%}. Mean initial residual "
            f"of the prediction: {m['initial_residual']:.3g} (of the zero guess: 1).")
    bench.write_readme(args, "A neural operator's prediction as CG's initial guess",
                       [("zero guess against the surrogate's", text)], files)


if __name__ == "__main__":
    main(sys.argv[1:])
