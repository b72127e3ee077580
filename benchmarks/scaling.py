r"""Weak scaling at a fixed subdomain size: how iterations, set-up, apply and memory of
ddlearn's two-level methods grow with the number of subdomains N, beside PETSc's own.

    mpiexec -n 4 python benchmarks/scaling.py [--quick] [--out DIR] [--name STEM] [--resume]
             [--dims 2 3] [--cases poisson channels inclusions elasticity] [--methods ...]
             [--sizes K ...]
    python benchmarks/scaling.py --model      (the projected cost at P = N ranks from
                                               scaling.json: scaling_model.json)
    python benchmarks/scaling.py --memory-model   (memory per rank and set-up at 1e8 unknowns
                                               on 1000 ranks from scaling_memory_p*.json)
    python benchmarks/scaling.py --report     (README.md: tables, projection and plots)

Series (box subdomains of ``sub^d`` unknowns, ``N = k^d`` of them, grid ``(k sub)^d``):

- 3D: 16³ unknowns per subdomain, N = 8, 64, 512 (grids 32³, 64³, 128³ = 2.1 M unknowns);
- 2D: 32² per subdomain, N = 16, 256, 4 096 (grids 128², 512², 2048² = 4.2 M unknowns);

on the 7-point (3D) / 5-point (2D) diffusion operator with harmonic-mean faces
(:mod:`ddlearn.decomposition.problems`), cases ``poisson`` (contrast 1), ``channels`` and
``inclusions`` (seeded families, contrast 1e6). The matrix is a user's: natural ordering,
PETSc's default rows, coordinates attached, b = 1, CG to rtol 1e-8 on the unpreconditioned
residual, no divergence test, at most ``--max-it`` iterations (and ``--max-solve-s``
seconds).

Case ``elasticity`` (3D only, not in the default ``--cases``): linear elasticity of
examples/elasticity.py, Q1 hexahedra (block size 3, node-wise dofs) on the unit cube clamped at
x = 0, gravity, ν = 0.3, E = 1 with its 20 random stiff balls (seed 0) of E = 1e6, sampled at
the 2 x 2 x 2 Gauss points (``intorder`` 3); 9³ cells per subdomain, N = 8, 64, 512 (18³, 36³,
72³ cells: 19 494, 147 852, 1 151 064 unknowns); the rigid-body modes as near-null space, the
coordinates attached, b = the load. Each rank assembles only the elements touching its own rows
(examples/elasticity.py ``assemble_rows``). Its methods (default ``gdsw``, ``spectral-aux``,
``gamg-tuned``, ``gamg-sor``, ``gamg``): ``spectral-aux`` is the spectral space on the client's own
subdomains (the N boxes of 9³ cells by recursive coordinate bisection plus one layer of
elements) with their Neumann matrices (``set_subdomains`` / ``set_auxiliary_matrices``,
examples/elasticity.py ``auxiliary``), the eigenvectors of λ < 0.1, at most 32 per subdomain
(with 8 per subdomain the elasticity study's 3D inclusions needed 389-758 iterations); each
rank assembles the Neumann matrices of its own subdomains, recorded as ``aux_s`` beside the
matrix's ``assemble_s``, neither in the set-up.

Methods (ddlearn's PC from the options database, ``-ddlearn_subdomains N``, overlap 1, boxes):
``one-level``, ``hats``, ``nicolaides``, ``gdsw``, ``harmonic``, ``spectral`` (8 vectors per
subdomain),
``learned`` (the shipped model); each two-level one also as ``<name>/dist`` (the coarse problem
on all ranks, ``-ddlearn_coarse_ranks``) and ``<name>/3level`` (the coarse problem solved by
ddlearn's two-level PC on groups of coarse functions, Nicolaides on the third level). PETSc:
``asm`` (one block per rank), ``gamg`` (defaults), ``gamg-tuned`` (threshold 0.01),
``gamg-sor`` (threshold 0.01, SSOR smoothing), ``mg-gdsw``,
``cholesky`` (nested dissection on one rank, up to ``--direct-max`` unknowns).

Recorded per run: iterations, set-up and solve time (slowest rank, barriers around each), the
PC's own split (partition, basis, local factorisations, coarse set-up; apply time in the local
and the coarse part), n_0, and the peak resident memory of every rank in each phase
(``peak_mb``: assembly, set-up, solve; ``VmHWM`` reset as each phase starts) and over the run.
Every run oversubscribes the machine's cores when ranks > cores: the JSON says how many of
each; compare methods of one run, not runs. Writes ``<STEM>.json`` (default ``scaling``; the
committed ``scaling_3level_overlap1`` is a run with ``--coarse-overlap 1``) and its plots
``<STEM>_iterations.png``, ``<STEM>_apply.png``.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np
import petsc4py

petsc4py.init([sys.argv[0]])
from mpi4py import MPI  # noqa: E402
from petsc4py import PETSc  # noqa: E402

from ddlearn.decomposition.petsc_rows import distributed_aij  # noqa: E402
from ddlearn.decomposition.problems import family_problem_name, make_problem  # noqa: E402
from ddlearn.harness import bench, fem  # noqa: E402
from ddlearn.harness.report import plt, save_figure  # noqa: E402
from ddlearn.harness.study import Rows  # noqa: E402
from ddlearn.classical.krylov import solve_once  # noqa: E402
from ddlearn.harness.methods import METHODS as REGISTRY  # noqa: E402
from ddlearn.pc import set_coordinates  # noqa: E402

COMM = MPI.COMM_WORLD
#: dimension -> (unknowns per subdomain per direction, subdomains per direction of the series)
SERIES = {3: (16, (2, 4, 8)), 2: (32, (4, 16, 64))}
QUICK = {3: (4, (2, 3)), 2: (8, (2, 4))}
CASES = {"poisson": 1.0, "channels": 1e6, "inclusions": 1e6, "elasticity": 1e6}
#: the cases of the default run
SCALAR = ["poisson", "channels", "inclusions"]
#: elasticity (3D): cells per subdomain per direction, subdomains per direction of the series
ELASTICITY = {"series": (9, (2, 4, 8)), "quick": (2, (2, 3))}
#: the elasticity problem of examples/elasticity.py at every size
ELASTICITY_PROBLEM = {"dim": 3, "element": "q1", "contrast": CASES["elasticity"], "seed": 0,
                      "intorder": 3}
ELASTICITY_METHODS = ["gdsw", "spectral-aux", "gamg-tuned", "gamg-sor", "gamg"]
#: spectral space on the client's subdomains with their Neumann matrices: lambda < 0.1
AUX = {"spectral-aux": {"ddlearn_coarse_space": "spectral", "ddlearn_spectral_nev": "32",
                        "ddlearn_spectral_threshold": "0.1"}}
PC = {"pc_type": "python", "pc_python_type": "ddlearn.pc.TwoLevelSchwarzPC"}
COARSE = {"one-level": "none", "hats": "hats", "nicolaides": "nicolaides", "gdsw": "gdsw",
          "harmonic": "harmonic", "spectral": "spectral", "learned": "learned"}
#: how the coarse problem is solved: on one rank (exact), on all ranks, or by a third level
COARSE_SOLVE = {
    "": {},
    "/dist": {"ddlearn_coarse_ranks": "{size}"},
    "/3level": {"ddlearn_coarse_ranks": "{size}", "ddlearn_coarse_ksp_type": "preonly",
                "ddlearn_coarse_pc_type": "python",
                "ddlearn_coarse_pc_python_type": "ddlearn.pc.TwoLevelSchwarzPC",
                "ddlearn_coarse_ddlearn_subdomains": "{coarse_N}",
                "ddlearn_coarse_ddlearn_overlap": "{coarse_overlap}",
                "ddlearn_coarse_ddlearn_coarse_space": "nicolaides"},
}
#: default overlap of the coarse level's subdomains (groups of whole fine subdomains'
#: functions): one layer of A_0's graph adds every neighbouring fine subdomain, which in 3D
#: turns a 2 x 2 x 2 group into the whole 4 x 4 x 4 coarse domain
COARSE_OVERLAP = 0
DDLEARN = [name + solve for name in COARSE for solve in COARSE_SOLVE
           if not (name == "one-level" and solve)]
PETSC = ["asm", "gamg", "gamg-tuned", "gamg-sor", "mg-gdsw", "cholesky"]
METHODS = DDLEARN + list(AUX) + PETSC
DEFAULT_METHODS = ["one-level", "hats", "nicolaides", "spectral", "spectral/dist",
                   "spectral/3level", "learned", "asm", "gamg", "gamg-tuned", "gamg-sor",
                   "cholesky"]


def build(case: str, dim: int, n: int, comm=PETSc.COMM_WORLD):
    """The user's matrix: natural ordering, PETSc's default rows, coordinates attached;
    ``b = 1``. Each rank assembles its own rows only."""
    kwargs = {} if case == "poisson" else {"contrast": CASES[case], "seed": 0}
    problem = make_problem(family_problem_name(case, dim), n, **kwargs)
    N = problem.n
    P, r = comm.getSize(), comm.getRank()
    counts = np.full(P, N // P) + (np.arange(P) < N % P)
    ranges = np.concatenate([[0], np.cumsum(counts)])
    lo, hi = int(ranges[r]), int(ranges[r + 1])
    A = distributed_aij(problem.rows(np.arange(lo, hi)), N, ranges, comm)
    A.setOption(PETSc.Mat.Option.SPD, True)
    set_coordinates(A, problem.coordinates(np.arange(lo, hi)))
    b = A.createVecLeft()
    b.set(1.0)
    return problem, A, b


def series(case: str, dim: int, quick: bool) -> tuple[int, tuple[int, ...]] | None:
    """``(sub, ks)`` of the case's series in ``dim`` (None: the case has none there)."""
    if case == "elasticity":
        return ELASTICITY["quick" if quick else "series"] if dim == 3 else None
    return (QUICK if quick else SERIES)[dim]


def unknowns(case: str, dim: int, n: int) -> int:
    """Unknowns of the grid ``n`` (elasticity: ``n`` cells per side, 3 dofs per node, the
    nodes at x = 0 clamped)."""
    return 3 * n * (n + 1) ** 2 if case == "elasticity" else n ** dim


def build_elasticity(n: int, comm=PETSc.COMM_WORLD, aux_parts: int | None = None):
    """examples/elasticity.py's problem on ``n^3`` Q1 cells, each rank assembling its own rows:
    ``(problem, A, b, coordinates, aux_s)``; with ``aux_parts`` the client's ``aux_parts``
    subdomains (recursive coordinate bisection) and their Neumann matrices attached to ``A``,
    ``aux_s`` the slowest rank's seconds for them."""
    problem = fem.build(cells=n, assemble=False, **ELASTICITY_PROBLEM)
    A, b, coords = fem.to_petsc(problem, comm)
    aux_s = None
    if aux_parts:
        t = time.perf_counter()
        fem.attach_auxiliary(A, *fem.auxiliary(problem, A, aux_parts, "rcb"))
        aux_s = bench.slowest(time.perf_counter() - t, comm.tompi4py())
    return problem, A, b, coords, aux_s


def options_for(method: str, N: int, size: int, coarse_overlap: int = COARSE_OVERLAP) -> dict:
    if method in PETSC:
        return dict(REGISTRY[method].options)
    if method in AUX:  # the subdomains come with the matrix
        return {**PC, **AUX[method]}
    name, _, solve = method.partition("/")
    opts = {**PC, "ddlearn_subdomains": str(N), "ddlearn_coarse_space": COARSE[name]}
    if name == "spectral":
        opts["ddlearn_spectral_nev"] = "8"
    # third level: about 8 fine subdomains per coarse subdomain, at least one per rank
    coarse_N = max(size, N // 8)
    for k, v in COARSE_SOLVE["/" + solve if solve else ""].items():
        opts[k] = v.format(size=size, coarse_N=coarse_N, coarse_overlap=coarse_overlap)
    return opts


def run_one(case: str, dim: int, sub: int, k: int, method: str, max_it: int,
            max_solve_s: float | None = None, coarse_overlap: int = COARSE_OVERLAP) -> dict:
    """One solve of ``method`` on a freshly assembled matrix; a failure is a result."""
    size = COMM.Get_size()
    N, n = k ** dim, sub * k
    rec = {"dim": dim, "case": case, "contrast": CASES[case], "sub": sub, "N": N, "grid": n,
           "unknowns": unknowns(case, dim, n), "method": method, "ranks": size}
    if case == "elasticity":
        rec["problem"] = {**ELASTICITY_PROBLEM, "inclusions": 20, "block_size": 3}
    direct = method == "cholesky"
    comm = PETSc.COMM_SELF if direct else PETSc.COMM_WORLD
    options = options_for(method, N, size, coarse_overlap)
    opts = PETSc.Options()
    bench.peak_reset()
    COMM.Barrier()
    objs = []
    try:
        if not direct or COMM.Get_rank() == 0:  # the direct solver factors on rank 0 alone
            rec.update(_solve(case, dim, n, comm, options, max_it, max_solve_s, objs, opts,
                              N if method in AUX else None))
    except Exception as e:  # noqa: BLE001 - a failing method is a result
        rec.update(error=bench.failure(e), converged=False)
    finally:
        for o in objs:
            o.destroy()
        for key in options:
            opts.delValue(key)
    if direct:
        # the others wait asleep: a rank busy-polling in a collective takes a core's share from
        # the one factoring on an oversubscribed machine
        done = COMM.Ibarrier()
        while not done.Test():
            time.sleep(0.02)
        rec = COMM.bcast(rec if COMM.Get_rank() == 0 else None, root=0)
    # each rank's peak over the whole run: the largest of its phases' peaks
    phases = rec.pop("peak_mb", None)
    last = bench.peak_mb_ranks()
    peaks = [max([last[r]] + [p[r] for p in (phases or {}).values() if r < len(p)])
             for r in range(len(last))]
    if phases:
        rec["peak_mb"] = phases
    rec["peak_rss_mb_max"] = max(peaks)
    rec["peak_rss_mb_sum"] = sum(peaks) if not direct else peaks[0]
    rec["options"] = options
    return rec


def _solve(case, dim, n, comm, options, max_it, max_solve_s, objs, opts,
           aux_parts=None) -> dict:
    mpi = comm.tompi4py()
    peak = {}

    def phase_done(name):
        # every rank's peak resident memory in the phase just ended; the next starts afresh
        peak[name] = bench.peak_mb_ranks(mpi)
        bench.peak_reset()

    for k, v in options.items():
        opts.setValue(k, v)
    t = time.perf_counter()
    aux_s = None
    if case == "elasticity":
        problem, A, b, coords, aux_s = build_elasticity(n, comm, aux_parts)
        objs += [A, b, coords]
    else:
        problem, A, b = build(case, dim, n, comm)
        objs += [A, b]
    assemble_s = bench.slowest(time.perf_counter() - t, comm.tompi4py()) - (aux_s or 0.0)
    ksp = PETSc.KSP().create(comm=comm)
    objs.append(ksp)
    ksp.setOperators(A)
    ksp.setType("cg")
    # no divergence test: at contrast 1e6 the residual of a weak coarse space peaks far above
    # PETSc's default 1e5 ||b|| on its way down
    ksp.setTolerances(rtol=1e-8, divtol=1e30, max_it=max_it)
    ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
    ksp.setFromOptions()
    x = b.duplicate()
    objs.append(x)
    phase_done("assemble")
    clock = {"start": time.perf_counter(), "stopped": False}
    if max_solve_s:
        def budget(ksp, its, rnorm):
            # all ranks must agree to stop: one reduction per iteration
            over = mpi.allreduce(time.perf_counter() - clock["start"] > max_solve_s, op=MPI.LOR)
            clock["stopped"] |= over
            return PETSc.KSP.ConvergedReason.DIVERGED_USER if over else 0
        ksp.addConvergenceTest(budget, prepend=True)
    # PCASM and PCFactor leave factorisations to the first solve: count them as set-up
    setup_s = bench.wall(lambda: (ksp.setUp(), ksp.setUpOnBlocks()), mpi)
    phase_done("setup")
    clock["start"] = time.perf_counter()
    out = {"assemble_s": assemble_s, "setup_s": setup_s, **solve_once(ksp, A, b, x)}
    phase_done("solve")
    out["peak_mb"] = peak
    pc = ksp.getPC()
    out.update({"apply_s": out["solve_s"] / max(out["iterations"] + 1, 1),
                "time_limited": clock["stopped"],
                "block_size": A.getBlockSize(), "size": A.getSize()[0]})
    if aux_s is not None:
        out["aux_s"] = aux_s
    if pc.getType() == "python":
        ctx = pc.getPythonContext()
        out["split"] = {k: v for k, v in ctx.timing.items() if isinstance(v, (int, float))}
        out["n0"] = int(ctx.meta.get("n0", 0))
        out["meta"] = {k: v for k, v in ctx.meta.items() if isinstance(v, (int, float, str))}
    if options.get("pc_type") == "cholesky":
        F = pc.getFactorMatrix()
        out["factor_nnz"] = int(F.getInfo()["nz_used"])
    return out


def _key(rec: dict) -> tuple:
    return rec["dim"], rec["case"], rec["N"], rec["method"]


def label(rec: dict) -> str:
    if rec.get("error"):
        return "error"
    if rec.get("skipped"):
        return "–"
    if rec.get("converged"):
        return str(rec["iterations"])
    if rec.get("reason") == PETSc.KSP.ConvergedReason.DIVERGED_INDEFINITE_PC:
        return f"indefinite PC ({rec['iterations']})"
    return f">{rec['iterations']}" + (" (time)" if rec.get("time_limited") else "")


def benchmark(args) -> dict:
    data = {"ranks": COMM.Get_size(), "cores": os.cpu_count(), "max_it": args.max_it,
            "max_solve_s": args.max_solve_s, "coarse_overlap": args.coarse_overlap,
            "quick": args.quick, "series": {str(d): list(s) for d, s in args.series.items()}}
    if "elasticity" in args.cases:
        data["elasticity_series"] = list(series("elasticity", 3, args.quick))
    rows = Rows(args, data, _key, args.name)
    for dim in args.dims:
        for case in args.cases:
            if series(case, dim, args.quick) is None:
                continue
            sub, ks = series(case, dim, args.quick)
            for k in args.sizes or ks:
                for method in methods_for(case, args.methods):
                    key = (dim, case, k ** dim, method)
                    if rows.done(key):
                        continue
                    if method == "cholesky" and \
                            unknowns(case, dim, sub * k) > args.direct_max:
                        continue
                    _log(rows.add(run_one(case, dim, sub, k, method, args.max_it,
                                          args.max_solve_s, args.coarse_overlap)))
    return data


def methods_for(case: str, methods: list[str] | None) -> list[str]:
    """The methods run on ``case``: ``methods``, or the case's default."""
    if methods:
        return methods
    return ELASTICITY_METHODS if case == "elasticity" else DEFAULT_METHODS


def _log(rec: dict) -> None:
    if rec.get("error"):
        extra = rec["error"][:300]
    else:
        s = rec.get("split", {})
        extra = (f"assembly {rec['assemble_s']:.2f} s "
                 + (f"aux {rec['aux_s']:.2f} s " if "aux_s" in rec else "")
                 + f"set-up {rec['setup_s']:.2f} s solve {rec['solve_s']:.2f} s "
                 f"n0 {rec.get('n0', '-')} peak {rec['peak_rss_mb_max']:.0f} MB/rank "
                 + " ".join(f"{k} {v:.2f}" for k, v in s.items() if k.endswith("_s")))
    PETSc.Sys.Print(f"{rec['dim']}D {rec['case']:10s} N {rec['N']:5d} n {rec['unknowns']:8d} "
                    f"{rec['method']:18s} {label(rec):>6s}  {extra}", comm=PETSc.COMM_WORLD)


# -- reports ------------------------------------------------------------------------------

def _rows(data, dim, case):
    return [r for r in data["rows"] if r["dim"] == dim and r["case"] == case]


def coarse_share(rec: dict) -> float | None:
    """Share of the coarse part in the PC's apply time."""
    s = rec.get("split", {})
    loc, crs = s.get("apply_local_s"), s.get("apply_coarse_s")
    if loc is None or crs is None or loc + crs <= 0:
        return None
    return crs / (loc + crs)


def growth(data: dict) -> list[dict]:
    """Per series and method: iterations at the largest N over those at the smallest."""
    out = []
    for dim in sorted({r["dim"] for r in data["rows"]}):
        for case in CASES:
            rows = _rows(data, dim, case)
            for method in METHODS:
                got = sorted((r["N"], r) for r in rows if r["method"] == method
                             and r.get("converged"))
                if len(got) >= 2:
                    out.append({"dim": dim, "case": case, "method": method,
                                "N": [got[0][0], got[-1][0]],
                                "growth": got[-1][1]["iterations"] / got[0][1]["iterations"]})
    return out


def against_tuned_gamg(rows: list[dict], N: int) -> list[str]:
    """At ``N``: each converged method's set-up + solve seconds over tuned GAMG's (when tuned
    GAMG was run there; its failure said), and the client's assembly."""
    at = {r["method"]: r for r in rows if r["N"] == N and "setup_s" in r}
    ref = at.get("gamg-tuned")
    if not ref:
        return []
    total = {m: r["setup_s"] + r["solve_s"] for m, r in at.items()}
    done = [m for m in METHODS if m in at and m != "gamg-tuned" and at[m].get("converged")]
    if ref.get("converged"):
        lines = [f"Set-up + solve at N = {N}, over tuned GAMG's {total['gamg-tuned']:.1f} s: "
                 + ", ".join(f"{m} {total[m]:.1f} s ({total[m] / total['gamg-tuned']:.2f})"
                             for m in done) + "."]
    else:
        lines = [f"At N = {N} tuned GAMG did not converge ({label(ref)}, "
                 f"{total['gamg-tuned']:.1f} s); set-up + solve of the converged methods: "
                 + (", ".join(f"{m} {total[m]:.1f} s" for m in done) or "none") + "."]
    if any("aux_s" in r for r in at.values()):
        lines += ["", "The client's assembly (not in the set-up), slowest rank: matrix "
                  + ", ".join(f"{m} {r['assemble_s']:.1f} s" for m, r in at.items())
                  + "; Neumann matrices " + ", ".join(f"{m} {r['aux_s']:.1f} s"
                                                      for m, r in at.items() if "aux_s" in r)
                  + "."]
    return lines + [""]


def memory_lines(rows: list[dict]) -> list[str]:
    """Per run with a phase record: each phase's peak resident memory on the largest rank and
    its ratio to the median rank's (the files that record the phases)."""
    have = [r for r in rows if r.get("peak_mb")]
    if not have:
        return []
    phases = list(have[0]["peak_mb"])
    out = ["Peak resident memory per phase, largest rank MB (largest / median rank):", "",
           "| method | N | " + " | ".join(phases) + " |", "|---|---:|" + "---:|" * len(phases)]
    for r in have:
        cells = []
        for p in phases:
            mb = r["peak_mb"].get(p) or [0.0]
            cells.append(f"{max(mb):.0f} ({max(mb) / float(np.median(mb)):.2f})")
        out.append(f"| {r['method']} | {r['N']} | " + " | ".join(cells) + " |")
    return out + [""]


def summary(data: dict) -> str:
    lines = [f"{data['ranks']} ranks on {data['cores']} cores, CG rtol 1e-8, at most "
             f"{data['max_it']} iterations. Per series: iterations (> : not converged), and at "
             f"the largest N set-up + solve seconds, coarse share of the apply, n_0 and peak "
             f"memory per rank.", ""]
    for dim in sorted({r["dim"] for r in data["rows"]}):
        for case in CASES:
            rows = _rows(data, dim, case)
            if not rows:
                continue
            Ns = sorted({r["N"] for r in rows})
            big = max(Ns)
            lines += [f"**{dim}D {case}** (contrast {CASES[case]:g}; unknowns "
                      + ", ".join(f"{next(r['unknowns'] for r in rows if r['N'] == N):,}"
                                  for N in Ns) + ")", "",
                      "| method | " + " | ".join(f"N = {N}" for N in Ns)
                      + f" | set-up s (N={big}) | solve s | coarse share | n_0 | MB/rank |",
                      "|---|" + "---:|" * (len(Ns) + 5)]
            for method in METHODS:
                got = {r["N"]: r for r in rows if r["method"] == method}
                if not got:
                    continue
                last = got.get(big, {})
                share = coarse_share(last)
                tail = (f"{last['setup_s']:.2f} | {last['solve_s']:.2f} | "
                        f"{f'{share:.0%}' if share is not None else '–'} | "
                        f"{last.get('n0', '–')} | {last['peak_rss_mb_max']:.0f}") \
                    if "setup_s" in last else "– | – | – | – | –"
                lines.append(f"| {method} | " + " | ".join(label(got[N]) if N in got else "–"
                                                          for N in Ns) + f" | {tail} |")
            lines.append("")
            lines += memory_lines(rows)
            stopped = [r for r in rows if r.get("time_limited")]
            if stopped:
                lines += [f"Stopped by the solve-time limit (--max-solve-s "
                          f"{data['max_solve_s']:g} s; not converged then): "
                          + ", ".join(f"{r['method']} at N = {r['N']} after {r['iterations']} "
                                      f"iterations" for r in sorted(
                                          stopped, key=lambda r: (METHODS.index(r["method"]),
                                                                  r["N"]))) + ".", ""]
            lines += against_tuned_gamg(rows, big)
    lines += ["Iteration growth, largest N over smallest:", ""]
    for g in growth(data):
        lines.append(f"- {g['dim']}D {g['case']} {g['method']}: {g['growth']:.2f} "
                     f"(N = {g['N'][0]} → {g['N'][1]})")
    errors = {(r["method"], r["error"][:160]) for r in data["rows"] if r.get("error")}
    if errors:
        lines += ["", "Errors:", ""] + [f"- {m}: {e}" for m, e in sorted(errors)]
    return "\n".join(lines)


def plot(data: dict, stem: str) -> None:
    series = [(d, c) for d in sorted({r["dim"] for r in data["rows"]}) for c in CASES
              if _rows(data, d, c)]
    if not series:
        return
    cols = min(3, len(series))
    rows_ = -(-len(series) // cols)
    fig, axes = plt.subplots(rows_, cols, figsize=(5.0 * cols, 3.9 * rows_), squeeze=False)
    for ax in axes.flat[len(series):]:
        ax.set_visible(False)
    for ax, (dim, case) in zip(axes.flat, series):
        rows = _rows(data, dim, case)
        for method in METHODS:
            pts = sorted((r["N"], r["iterations"]) for r in rows
                         if r["method"] == method and r.get("converged"))
            if pts:  # one colour per method in every panel
                ax.plot(*zip(*pts), "s--" if method in PETSC else "o-", label=method,
                        color=plt.cm.tab20(METHODS.index(method) % 20))
        ax.set(xscale="log", yscale="log", xlabel="subdomains N (fixed size)",
               ylabel="CG iterations", title=f"{dim}D {case}")
        ax.grid(True, which="both", alpha=0.3)
    handles = {h.get_label(): h for ax in axes.flat for h in ax.get_lines()}
    fig.legend(list(handles.values()), list(handles), fontsize=7, loc="lower right",
               ncol=2)
    save_figure(fig, stem + "_iterations.png")
    # time per apply, split into the local (one-level) and the coarse part
    bars = [r for r in data["rows"] if coarse_share(r) is not None]
    if not bars:
        return
    fig, axes = plt.subplots(1, len(series), figsize=(4.6 * len(series), 3.8), squeeze=False)
    for ax, (dim, case) in zip(axes[0], series):
        rows = [r for r in bars if r["dim"] == dim and r["case"] == case]
        labels, loc, crs = [], [], []
        for r in sorted(rows, key=lambda r: (METHODS.index(r["method"]), r["N"])):
            applies = max(r["iterations"] + 1, 1)
            labels.append(f"{r['method']}\nN={r['N']}")
            loc.append(1e3 * r["split"]["apply_local_s"] / applies)
            crs.append(1e3 * r["split"]["apply_coarse_s"] / applies)
        x = np.arange(len(labels))
        ax.bar(x, loc, label="local")
        ax.bar(x, crs, bottom=loc, label="coarse")
        ax.set_xticks(x, labels, rotation=90, fontsize=6)
        ax.set(ylabel="ms per apply (slowest rank)", title=f"{dim}D {case}")
    axes[0, -1].legend(fontsize=7)
    save_figure(fig, stem + "_apply.png")


# -- the scaling model on paper -----------------------------------------------------------

#: network assumed by the model: latency (s) and bandwidth (bytes/s) of one link, an
#: InfiniBand-class cluster (100 Gb/s, 2 microseconds)
ALPHA, BETA = 2e-6, 12.5e9
#: sparse Cholesky of a coarse matrix whose graph is a d-dimensional mesh of subdomains
#: (nested dissection): factorisation ~ n^(3(d-1)/d), solve ~ nnz(L) ~ n^(2(d-1)/d) (2D: n log n,
#: taken as n)
THEORY = {2: {"factor": 1.5, "solve": 1.0}, 3: {"factor": 2.0, "solve": 4.0 / 3.0}}
#: fine subdomains per coarse subdomain of the three-level method, and its third-level size
GROUP = 8


def _fit(points) -> float | None:
    """Least-squares exponent of ``t ~ n^p`` over ``(n, t)`` points (None for fewer than 2)."""
    pts = [(n, t) for n, t in points if n > 0 and t > 0]
    if len(pts) < 2:
        return None
    x, y = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return float(np.polyfit(x, y, 1)[0])


def _cost(points, p: float) -> tuple[float, float]:
    """``(c, a)`` of ``t = c + a n^p`` fitted to ``(n, t)`` points, both non-negative: ``c``
    is what does not grow with the coarse size (the product with Phi, latency, the Python
    layer), ``a n^p`` the coarse factorisation or solve."""
    n = np.array([q[0] for q in points], dtype=float)
    t = np.array([q[1] for q in points], dtype=float)
    if len(n) >= 2:
        (c, a), *_ = np.linalg.lstsq(np.stack([np.ones_like(n), n ** p], axis=1), t,
                                     rcond=None)
        if c >= 0 and a > 0:
            return float(c), float(a)
    big = int(np.argmax(n))
    return 0.0, float(t[big] / n[big] ** p)


def model(data: dict, method: str = "spectral", Ns=(100, 1_000, 10_000)) -> list[dict]:
    r"""Projected time per apply and set-up at :math:`P = N` ranks (one subdomain per rank),
    two-level against three-level, from the measured per-subdomain and coarse costs of
    ``method`` (exact one-rank coarse solve) in each dimension's series of ``data``.

    Per subdomain (CPU seconds, the measured wall times times the cores in use over N):
    :math:`t_f` local factorisation, :math:`t_b` coarse basis, :math:`t_a` local solve per
    apply. Coarse: :math:`t_{c,f}(n) = a_f n^{p_f}`, :math:`t_{c,s}(n) = a_s n^{p_s}` with the
    nested-dissection exponents (:data:`THEORY`) and constants from the largest measured
    :math:`n_0`. Network: latency :data:`ALPHA`, bandwidth :data:`BETA`, halo exchange with
    the :math:`3^d - 1` neighbours, coarse gather/scatter as a tree
    (:math:`2(\alpha\log_2 P + 8 n/\beta)`). Two-level: coarse size :math:`n_0 = kN` on one
    rank. Three-level: :data:`GROUP` fine subdomains per coarse subdomain (a coarse local
    solve of :math:`2\,\mathrm{GROUP}\,k` rows, overlap included) and a third-level problem of
    :math:`N/\mathrm{GROUP}` rows (one Nicolaides vector per coarse subdomain).
    """
    out = []
    for dim in sorted({r["dim"] for r in data["rows"]}):
        rows = [r for r in data["rows"] if r["dim"] == dim and r["method"] == method
                and r.get("converged") and r.get("split", {}).get("apply_coarse_s")]
        if not rows:
            continue
        big = max(rows, key=lambda r: r["N"])
        cores = min(big["ranks"], data["cores"] or 1)
        applies = big["iterations"] + 1
        s, N_m = big["split"], big["N"]
        k = big["n0"] / N_m
        t_f = s["local_s"] * cores / N_m
        t_b = s["basis_s"] * cores / N_m
        t_a = s["apply_local_s"] * cores / N_m / applies
        p = THEORY[dim]
        factor = [(r["n0"], r["split"]["coarse_setup_s"]) for r in rows]
        solve = [(r["n0"], r["split"]["apply_coarse_s"] / (r["iterations"] + 1)) for r in rows]
        c_f, a_f = _cost(factor, p["factor"])
        c_s, a_s = _cost(solve, p["solve"])
        # what does not grow with n_0 is mostly the products with Phi over the rank's rows:
        # measured with N/ranks subdomains per rank, scaled to one
        c_f, c_s = c_f * cores / N_m, c_s * cores / N_m
        measured = {"factor": _fit(factor), "solve": _fit(solve)}
        sub = big["sub"]
        halo = (3 ** dim - 1) * ALPHA + 2 * dim * sub ** (dim - 1) * 8 / BETA
        for N in Ns:
            n0 = k * N
            tree = np.log2(N)
            coarse2 = c_s + a_s * n0 ** p["solve"] + 2 * (ALPHA * tree + 8 * n0 / BETA)
            m = 2 * GROUP * k
            n00 = N / GROUP
            coarse3 = c_s + a_s * (m ** p["solve"] + n00 ** p["solve"]) + 2 * (
                ALPHA * tree + 8 * GROUP * k / BETA) + 2 * (ALPHA * np.log2(n00) + 8 * n00 / BETA)
            nnz0 = n0 * k * 3 ** dim
            setup2 = t_f + t_b + c_f + a_f * n0 ** p["factor"] + 12 * nnz0 / BETA
            setup3 = t_f + t_b + c_f + a_f * (m ** p["factor"] + n00 ** p["factor"]) + \
                12 * nnz0 / BETA / N * GROUP
            out.append({"dim": dim, "method": method, "N": N, "n0": int(n0), "k": k,
                        "apply_local_s": t_a + halo,
                        "apply_coarse_two_level_s": coarse2,
                        "apply_coarse_three_level_s": coarse3,
                        "setup_two_level_s": setup2, "setup_three_level_s": setup3,
                        "from": {"N": N_m, "n0": big["n0"], "ranks": big["ranks"],
                                 "cores": cores, "t_f": t_f, "t_b": t_b, "t_a": t_a,
                                 "c_f": c_f, "a_f": a_f, "c_s": c_s, "a_s": a_s,
                                 "exponents_theory": p,
                                 "exponents_measured": measured}})
    return out


def _fmt(x) -> str:
    return "–" if x is None else f"{x:.2f}"


def model_table(rows: list[dict]) -> str:
    lines = [f"Projected at P = N ranks, one subdomain per rank (latency {ALPHA * 1e6:g} µs, "
             f"bandwidth {BETA / 1e9:g} GB/s); ms per apply (local + coarse) and set-up s:", "",
             "| dim | N | n_0 | local ms | coarse ms, 2-level | coarse ms, 3-level | "
             "coarse share 2-level / 3-level | set-up s 2-level | set-up s 3-level |",
             "|---|---:|---:|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        loc, c2, c3 = (1e3 * r[k] for k in ("apply_local_s", "apply_coarse_two_level_s",
                                            "apply_coarse_three_level_s"))
        lines.append(f"| {r['dim']}D | {r['N']:,} | {r['n0']:,} | {loc:.2f} | {c2:.2f} | "
                     f"{c3:.2f} | {c2 / (loc + c2):.0%} / {c3 / (loc + c3):.0%} | "
                     f"{r['setup_two_level_s']:.2f} | {r['setup_three_level_s']:.2f} |")
    for r in {r["dim"]: r for r in rows}.values():
        f = r["from"]
        lines.append(f"\n{r['dim']}D constants from {r['method']} at N = {f['N']} "
                     f"(n_0 = {f['n0']}, {f['ranks']} ranks on {f['cores']} cores): t_f "
                     f"{f['t_f'] * 1e3:.1f} ms, t_b {f['t_b'] * 1e3:.1f} ms, t_a "
                     f"{f['t_a'] * 1e3:.2f} ms per subdomain; coarse c_s {f['c_s'] * 1e3:.2f} ms, "
                     f"exponents measured factor {_fmt(f['exponents_measured']['factor'])}, "
                     f"solve {_fmt(f['exponents_measured']['solve'])} (theory "
                     f"{f['exponents_theory']['factor']:.2f}, {f['exponents_theory']['solve']:.2f})")
    return "\n".join(lines)


MODEL = "scaling_model"
MEMORY = "scaling_memory_model"
#: the projection of the memory model: unknowns, ranks, subdomains per rank (the PC's default)
TARGET_N, TARGET_P, PER_RANK = 10 ** 8, 1000, 4


def memory_model(runs: dict) -> list[dict]:
    r"""Peak resident memory per rank and set-up time projected to :data:`TARGET_P` ranks and
    :data:`TARGET_N` unknowns, per method, from one problem run on several rank counts
    (``runs``: file stem to data, each with every rank's set-up peak ``peak_mb["setup"]``).

    Assumptions (a strong-scaling fit, then weak scaling to the target):

    - the median rank holds its rows' share: :math:`M_{med}(P) = M_0 + m\,n/P` (least squares
      over the measured :math:`P`; :math:`M_0` the process and library, :math:`m` MB per
      unknown: matrix rows, subdomain blocks and factors, coarse basis rows);
    - the coarse rank holds, above the median, the coarse matrix and its Cholesky factor:
      at most :math:`E = M_{max} - M_{med}` at the largest measured :math:`P` (with every rank
      holding its share of the subdomains, the largest rank need not be the coarse rank, and
      the spread of the subdomains' own set-up memory is in :math:`E`), grown with the factor of
      a 3D mesh-like coarse graph, :math:`\mathrm{nnz}(L) \sim n_0^{4/3}`, to
      :math:`n_0 = (n_0/N)\,\cdot` :data:`PER_RANK` :math:`P`;
    - set-up: the median rank's share of the measured set-up minus the coarse factorisation,
      scaled with its rows, plus the coarse factorisation grown as :math:`n_0^2` (nested
      dissection of a 3D graph), with one rank's halo exchange per phase unchanged (neighbour
      counts do not grow with :math:`P`); the network is not otherwise modelled;
    - set-up work per rank is the measured wall time times the cores in use over the ranks
      (the runs oversubscribe 2 cores from 4 ranks on)."""
    by_method: dict[str, list] = {}
    for name, data in runs.items():
        for r in data["rows"]:
            if r.get("peak_mb", {}).get("setup") and not r.get("error"):
                by_method.setdefault(r["method"], []).append((data["cores"], r))
    out = []
    for method, got in by_method.items():
        got.sort(key=lambda t: t[1]["ranks"])
        P = np.array([r["ranks"] for _, r in got], dtype=float)
        n = float(got[0][1]["unknowns"])
        med = np.array([float(np.median(r["peak_mb"]["setup"])) for _, r in got])
        top = np.array([max(r["peak_mb"]["setup"]) for _, r in got])
        (M0, slope), *_ = np.linalg.lstsq(np.stack([np.ones_like(P), n / P], axis=1), med,
                                          rcond=None)
        cores, big = got[-1]
        n0, N = big.get("n0") or 0, big["N"]
        grow = ((n0 / N * PER_RANK * TARGET_P) / n0) if n0 else 1.0
        excess = float(top[-1] - med[-1])
        split = big.get("split", {})
        work = big["setup_s"] * min(big["ranks"], cores) / big["ranks"]
        coarse = split.get("coarse_setup_s", 0.0)
        per_unknown = max(work - coarse, 0.0) / (n / big["ranks"])
        local = TARGET_N / TARGET_P
        out.append({
            "method": method, "unknowns": int(n), "N": N, "n0": n0,
            "measured": [{"ranks": int(p), "median_mb": float(m), "max_mb": float(t),
                          "max_over_median": float(t / m)} for p, m, t in zip(P, med, top)],
            "M0_mb": float(M0), "mb_per_unknown": float(slope),
            "target": {"unknowns": TARGET_N, "ranks": TARGET_P, "N": PER_RANK * TARGET_P,
                       "n0": int(round(n0 / N * PER_RANK * TARGET_P)) if n0 else None,
                       "median_mb": float(M0 + slope * local),
                       "coarse_rank_mb": float(M0 + slope * local + excess * grow ** (4 / 3)),
                       "setup_s": float(per_unknown * local + coarse * grow ** 2)}})
    return out


def memory_table(rows: list[dict]) -> str:
    lines = ["Measured: the set-up's peak resident memory, median and largest rank (MB):", "",
             "| method | unknowns | ranks | median MB | largest MB | largest / median |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        for m in r["measured"]:
            lines.append(f"| {r['method']} | {r['unknowns']:,} | {m['ranks']} | "
                         f"{m['median_mb']:.0f} | {m['max_mb']:.0f} | "
                         f"{m['max_over_median']:.2f} |")
    lines += ["", f"Projected to {TARGET_N:.0e} unknowns on {TARGET_P} ranks, {PER_RANK} "
              f"subdomains per rank (assumptions: `memory_model` in benchmarks/scaling.py):", "",
              "| method | M_0 MB | kB per unknown | n_0 | median rank MB | coarse rank MB | "
              "set-up s |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        t = r["target"]
        lines.append(f"| {r['method']} | {r['M0_mb']:.0f} | {r['mb_per_unknown'] * 1e3:.2f} "
                     f"| {t['n0'] or '–'} | {t['median_mb']:.0f} | {t['coarse_rank_mb']:.0f} | "
                     f"{t['setup_s']:.0f} |")
    return "\n".join(lines)


def main(argv=None):
    ap = bench.parser("scaling", __doc__, "tiny series (tests)")
    ap.add_argument("--name", default="scaling", help="file stem of the JSON and plots")
    ap.add_argument("--model", action="store_true", help="the projected cost at P = N from "
                    "DIR/scaling.json; writes DIR/scaling_model.json")
    ap.add_argument("--memory-model", action="store_true", help="peak memory per rank and "
                    "set-up projected to 1e8 unknowns on 1000 ranks from DIR/scaling_memory_p*"
                    ".json; writes DIR/scaling_memory_model.json")
    ap.add_argument("--dims", type=int, nargs="+", default=[3, 2], choices=[2, 3])
    ap.add_argument("--cases", nargs="+", default=SCALAR, choices=list(CASES),
                    help="elasticity: 3D only, not in the default run")
    ap.add_argument("--methods", nargs="+", default=None, choices=METHODS)
    ap.add_argument("--sizes", type=int, nargs="+", default=None,
                    help="subdomains per direction to run, in the series or not (3: 48^3 in "
                    "3D); default: the whole series")
    ap.add_argument("--max-it", type=int, default=1000)
    ap.add_argument("--max-solve-s", type=float, default=None,
                    help="stop a solve after this many seconds (recorded as time-limited)")
    ap.add_argument("--coarse-overlap", type=int, default=COARSE_OVERLAP,
                    help="overlap of the three-level method's coarse subdomains")
    ap.add_argument("--direct-max", type=int, default=300_000,
                    help="largest problem given to the one-rank Cholesky")
    args = bench.parse(ap, argv)
    if args.report:
        return readme(args)
    if args.model:
        rows = model(bench.read(os.path.join(args.out, "scaling.json")))
        bench.write(args, {"model": rows, "alpha_s": ALPHA, "beta_bytes_per_s": BETA,
                           "group": GROUP}, MODEL)
        bench.show(model_table(rows))
        return rows
    if args.memory_model:
        runs = {k: v for k, v in bench.results(args).items()
                if k.startswith("scaling_memory_p")}
        rows = memory_model(runs)
        bench.write(args, {"memory_model": rows, "from": sorted(runs)}, MEMORY)
        bench.show(memory_table(rows))
        return rows
    if args.methods and set(args.methods) & set(AUX) and set(args.cases) - {"elasticity"}:
        ap.error(f"{', '.join(AUX)}: the elasticity case only (its client's Neumann matrices)")
    args.series = QUICK if args.quick else SERIES
    data = benchmark(args)
    if COMM.Get_rank() == 0:
        plot(data, os.path.join(args.out, args.name))
    bench.show(summary(data))
    return data


def readme(args) -> dict:
    """README.md and the plots from every JSON of the study in the results folder."""
    files = bench.results(args)
    sections = []
    for name, data in files.items():
        if name == MODEL:
            sections.append(("Projected at P = N ranks (scaling_model.json)",
                             model_table(data["model"])))
            continue
        if name == MEMORY:
            sections.append(("Memory per rank, projected (scaling_memory_model.json)",
                             memory_table(data["memory_model"])))
            continue
        if COMM.Get_rank() == 0:
            plot(data, os.path.join(args.out, name))
        sections.append((f"{name}.json", summary(data) + f"\n\n![iterations]"
                         f"({name}_iterations.png)\n\n![time per apply]({name}_apply.png)"))
    bench.write_readme(args, "Weak scaling at a fixed subdomain size", sections, files)
    return files


if __name__ == "__main__":
    main()
