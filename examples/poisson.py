"""The main job: per problem, one decomposition, every preconditioner side by side.

    mpiexec -n 8 python examples/poisson.py [options]

Solves ``A x = b`` (random ``b``, zero initial guess) with a Krylov method for each
preconditioner and prints iterations, converged reason, true relative residual
``||b - A x|| / ||b||``, set-up and solve seconds (slowest rank); writes JSON and a convergence
plot per problem. By default two tables: 2D Poisson, then a high-contrast random channels field
that neither training nor validation of the pretrained learned coarse space saw. All options
are PETSc options:

  -problem LIST        comma list of poisson1d,poisson2d,channels,random_channels,
                       random_inclusions,random_lognormal and, in 3D on the unit cube,
                       poisson3d,random_channels3d,random_inclusions3d,random_lognormal3d
                       (default poisson2d,random_channels; random_*: seeded coefficient
                       families)
  -n N                 interior points per direction (default 4095 in 1D, 255 in 2D, 32 in 3D:
                       32^3 = 32 768 unknowns)
  -subdomains N        total number of subdomains (default 64)
  -overlap n_delta     overlap in indices / grid layers (default 2 in 1D, 1 in 2D and 3D)
  -coarse_space {hats,nicolaides}            (default hats)
  -contrast C          coefficient contrast for channels and random_* (default 1e6)
  -field_seed S        seed of a random_* coefficient field (default 200000, the first test
                       seed: never used to train the shipped model)
  -methods LIST        comma list of none,jacobi,asm,twolevel,nicolaides,gdsw,mg-gdsw,
                       spectral,gamg,gamg-tuned,gamg-sor,attention,attention-coarse,learned,
                       schwarz_attention,learned_insitu (default: none,jacobi,asm,twolevel,
                       spectral,gamg,gamg-tuned,mg-gdsw,attention,attention-coarse,learned,
                       schwarz_attention on Poisson; asm,twolevel,spectral,learned,
                       schwarz_attention,gamg,gamg-tuned,mg-gdsw on the coefficient
                       fields); method M's KSP has the options prefix M_ (hyphens as
                       underscores: -gamg_tuned_ksp_monitor)
                       gamg: PETSc's GAMG with its defaults; gamg-tuned: threshold 0.01;
                       gamg-sor: tuned with SOR smoothing (ddlearn.harness.methods.METHODS[
                       name].options)
                       twolevel: classical two-level Schwarz with the -coarse_space below;
                       nicolaides, gdsw, spectral, learned: ddlearn.pc.TwoLevelSchwarzPC with
                       that coarse space on the same N and overlap (learned: the pretrained
                       learned coarse space, no training); schwarz_attention: the pretrained
                       Schwarz-attention coarse space (one forward pass, no eigensolve, no
                       training; attention is the paper's operator trained for this very
                       matrix, which cannot precondition alone); mg-gdsw: PETSc's PCMG + GDSW (one
                       coarse subdomain per rank, the same ASM blocks as twolevel)
  -spectral_nev K -spectral_threshold TAU -spectral_with_hats -spectral_eigensolver {slepc,scipy}
                       the spectral coarse space (defaults 8, 0 = keep all K, off, slepc)
  -ksp_type T -rtol R  Krylov method and relative tolerance (default cg, 1e-8)
  -out DIR             folder for each problem's JSON and convergence plot,
                       main_job_<problem>.json and main_job_<problem>.png (default
                       runs/main_job under the working directory, not tracked by git; "" to
                       write nothing). The committed tables are refreshed only when asked:
                       -out benchmarks/results/main_job. The JSON records the command,
                       commit, ranks, cores, date and options; ``python -m
                       ddlearn.harness.report --report --out DIR`` writes the folder's
                       README.md from its JSON
  -plot BOOL           write the convergence plot beside the JSON (default true)
  -quick               the quick form (CI runs it before the tests): defaults -n 1023 / 127 /
                       16 by dimension and -subdomains 16 (the full job's subdomain size in
                       1D and 2D, which the shipped learned model needs), -attention_steps
                       10; every method and problem as in the full job
  -seed S              right-hand side seed (default 0)

``learned_insitu`` and ``attention`` train on this very problem and decomposition, or load the
checkpoint cached for it (``train_s`` is 0 then):

  -cache DIR           checkpoint cache (default .ddlearn-cache)
  -learned_insitu_steps S -learned_insitu_lr LR -learned_insitu_lr_smoothing LR
  -learned_insitu_rank R -learned_insitu_batch B -learned_insitu_cg_steps K
  -learned_insitu_eval_every E -learned_insitu_eval_rhs M -learned_insitu_seed S
  -learned_insitu_objective {error,condition}
                       the in-situ learned preconditioner (ddlearn.learned.coarse.basis), trained inside
                       CG on the one matrix it serves
  -attention_steps S -attention_rank R -attention_samples M
                       the paper-form operator alone, trained on Fourier data

Every method's solver takes further options under its own prefix, e.g. ``-gamg_ksp_monitor``.
"""
from __future__ import annotations

import os
import sys
import time

import petsc4py

petsc4py.init(sys.argv)
from mpi4py import MPI  # noqa: E402
from petsc4py import PETSc  # noqa: E402

from ddlearn.classical.coarse.hats import Hats  # noqa: E402
from ddlearn.classical.coarse.spectral import Spectral  # noqa: E402
from ddlearn.decomposition.problems import PROBLEMS, make_problem, problem_dim  # noqa: E402
from ddlearn.learned.coarse.local_training import SEEDS  # noqa: E402
from ddlearn.decomposition.atomic import atomic_write_json  # noqa: E402
from ddlearn.harness import bench  # noqa: E402
from ddlearn.harness.learned import LearnedSettings  # noqa: E402
from ddlearn.harness.methods import (Case, default_methods, parse_methods,  # noqa: E402
                                     run_methods)
from ddlearn.harness.report import format_table, plot_histories  # noqa: E402

#: -n and -overlap when not given, by the problem's dimension (``QUICK_N`` with -quick)
DEFAULT_N = {1: 4095, 2: 255, 3: 32}
QUICK_N = {1: 1023, 2: 127, 3: 16}
DEFAULT_OVERLAP = {1: 2, 2: 1, 3: 1}

#: A user's run writes under the working directory, never into the committed results: those
#: are refreshed only by an explicit ``-out benchmarks/results/main_job``.
DEFAULT_OUT = os.path.join("runs", "main_job")


def spectral_space(opts):
    """The spectral method's coarse space from the ``-spectral_*`` options (with the hats
    added by ``-spectral_with_hats``)."""
    space = Spectral(opts.getInt("spectral_nev", 8), opts.getReal("spectral_threshold", 0.0),
                     opts.getString("spectral_eigensolver", "slepc"))
    return Hats() + space if opts.getBool("spectral_with_hats", False) else space


def read_options(opts: PETSc.Options) -> dict:
    """The example's settings from the options database (defaults as documented above)."""
    problems = [p.strip() for p in opts.getString("problem", "poisson2d,random_channels")
                .split(",") if p.strip()]
    unknown = [p for p in problems if p not in PROBLEMS]
    if unknown or not problems:
        raise ValueError(f"unknown -problem {unknown or problems}; choose from "
                         f"{', '.join(sorted(PROBLEMS))}")
    methods = opts.getString("methods", "")
    quick = opts.getBool("quick", False)
    learned = LearnedSettings.from_options(opts)
    if quick and not opts.hasName("attention_steps"):
        learned.attention_steps = 10
    # None = not given: each problem gets its dimension's default
    return {
        "problems": problems,
        "n": opts.getInt("n") if opts.hasName("n") else None,
        "subdomains": opts.getInt("subdomains", 16 if quick else 64),
        "overlap": opts.getInt("overlap") if opts.hasName("overlap") else None,
        "coarse_space": opts.getString("coarse_space", "hats"),
        "contrast": opts.getReal("contrast", 1e6),
        "field_seed": opts.getInt("field_seed", SEEDS["test"]),
        "methods": parse_methods(methods) if methods else None,
        "learned": learned,
        "spectral": spectral_space(opts),
        "ksp_type": opts.getString("ksp_type", "cg"),
        "rtol": opts.getReal("rtol", 1e-8),
        "out": opts.getString("out", DEFAULT_OUT),
        "plot": opts.getBool("plot", True),
        "quick": quick,
        "seed": opts.getInt("seed", 0),
    }


def main(argv: list[str] | None = None) -> list[dict]:
    """Run the comparison on every problem of ``-problem`` and return their reports. ``argv``
    holds extra ``-option value`` pairs for this call only (for tests and scripts)."""
    opts = PETSc.Options()
    given = dict(zip(argv[::2], argv[1::2])) if argv else {}
    for key, value in given.items():
        opts.setValue(key, value)
    try:
        cfg = read_options(opts)
    finally:
        for key in given:  # options passed in argv apply to this call only
            opts.delValue(key)
    cfg["argv"] = sys.argv[1:] if argv is None else [str(a) for a in argv]
    return [compare(cfg, name) for name in cfg["problems"]]


def compare(cfg: dict, name: str) -> dict:
    """One problem's table: every method on the same matrix, decomposition and ``b``."""
    comm = PETSc.COMM_WORLD
    rank0 = comm.getRank() == 0
    start = time.perf_counter()
    kwargs = {}
    if name == "channels" or name.startswith("random_"):
        kwargs["contrast"] = cfg["contrast"]
    if name.startswith("random_"):
        kwargs["seed"] = cfg["field_seed"]
    dim = problem_dim(name)
    sizes = QUICK_N if cfg["quick"] else DEFAULT_N
    problem = make_problem(name, sizes[dim] if cfg["n"] is None else cfg["n"], **kwargs)
    methods = cfg["methods"] or default_methods(name, dim)
    overlap = DEFAULT_OVERLAP[dim] if cfg["overlap"] is None else cfg["overlap"]
    case = Case.build(problem, cfg["subdomains"], overlap, cfg["coarse_space"], comm)
    case.spectral = cfg["spectral"]
    PETSc.Sys.Print(f"{problem.name}{' ' + str(kwargs) if kwargs else ''}: n = {problem.n} "
                    f"unknowns, N = {case.dec.N} subdomains {case.dec.boxes}, overlap "
                    f"{case.dec.overlap}, n_0 = {case.Phi.shape[1]} ({cfg['coarse_space']}), "
                    f"{comm.getSize()} ranks on {os.cpu_count()} cores, {cfg['ksp_type']} to "
                    f"rtol {cfg['rtol']:g}")
    b = case.rhs(cfg["seed"])
    results = []
    for m in methods:
        PETSc.Sys.Print(f"  solving with {m} ...")
        results += run_methods(case, [m], b, cfg["ksp_type"], cfg["rtol"],
                               settings=cfg["learned"])
    b.destroy()
    report = {"problem": case.describe(), "ranks": comm.getSize(), "cores": os.cpu_count(),
              "subdomains": case.dec.N, "ksp_type": cfg["ksp_type"], "rtol": cfg["rtol"],
              "results": [r.record() for r in results]}
    case.destroy()
    report["wall_s"] = comm.tompi4py().allreduce(time.perf_counter() - start, op=MPI.MAX)
    stamp = bench.provenance("examples/poisson.py", cfg["argv"],
                             {k: v for k, v in cfg.items() if k != "argv"}, comm.tompi4py())
    if rank0:
        print(format_table(results), flush=True)
        if cfg["out"]:
            os.makedirs(cfg["out"], exist_ok=True)
            path = os.path.join(cfg["out"], f"main_job_{name}.json")
            atomic_write_json(path, {"provenance": stamp, **report})
            print(f"wrote {os.path.relpath(path)}")
            if cfg["plot"]:
                path = os.path.join(cfg["out"], f"main_job_{name}.png")
                plot_histories(results, path, title=f"{problem.name}, n = {problem.n}, "
                               f"N = {case.dec.N}, {comm.getSize()} ranks")
                print(f"wrote {os.path.relpath(path)}")
    return report


if __name__ == "__main__":
    main()
