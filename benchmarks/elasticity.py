r"""Linear elasticity in 2D and 3D (examples/elasticity.py): ddlearn's coarse spaces with the
rigid-body modes and with the client's Neumann matrices, against PETSc's GAMG, ASM and PCMG+GDSW.

    mpiexec -n 2 python benchmarks/elasticity.py [--quick] [--out DIR]
    python benchmarks/elasticity.py --report     (README.md and the plot from the JSON)

P1 vector elements (scikit-fem) on the unit square (100² cells, 20 200 dofs) and cube (14³
cells, 9 450 dofs), clamped at x = 0, gravity, ν = 0.3, E = 1 with random stiff inclusions
(seed 0) of E = 1, 1e3, 1e6; the matrix in the mesh's node numbering with PETSc's default rows
(whole nodes), block size = dimension, rigid-body modes as near-null space. CG to rtol 1e-8 on
the unpreconditioned residual (no divergence test: at contrast 1e6 the residual's 2-norm peaks
at 1e4-1e5 ||b|| on the way), b = gravity load, x0 = 0, at most 2000 iterations; the true
residual is recorded (round-off in ``A x`` bounds it near 1e-5 in 2D at contrast 1e6).

Methods (N = 16 and 64 subdomains for ddlearn's PC, overlap 1):

- ``one-level``: ``-ddlearn_coarse_space none`` on ddlearn's own partition;
- ``nicolaides``, ``gdsw``, ``rgdsw``: ddlearn's coarse spaces built from the near-null space
  (one vector per rigid-body mode per subdomain / interface component; ``gdsw`` with its
  components split where the coefficient jumps, its default);
- ``spectral aux``: ddlearn's spectral (GenEO-type) space on the client's own subdomains (METIS
  on the element dual graph, one layer of elements overlap) with their Neumann matrices
  (``set_subdomains`` / ``set_auxiliary_matrices``), k = 8 vectors per subdomain;
- ``spectral aux tau``: the same with the eigenvectors of lambda < 0.1, at most 32 per subdomain;
- ``one-level aux``: the same client subdomains, no coarse space (the reference for it);
- PETSc: ``gamg`` (near-null space), ``gamg-tuned`` (the same with threshold 0.01), ``asm``
  (one block per rank, basic, exact LU blocks), ``mg-gdsw`` (PCMG two-level additive with
  PETSc's GDSW coarse space, one subdomain per rank, exact LU blocks). These do not depend on
  N and run once per case.

A method that fails (DIVERGED_* or an error) is recorded with its reason or message. Times are
the slowest rank's wall clock (barriers around set-up and solve); one rank per core (more
ranks than cores slow PETSc's collective set-ups many-fold), and times compare methods of one
run, not machines. Writes ``elasticity.json`` after
every run and ``elasticity.png`` (iterations against contrast).
"""
from __future__ import annotations

import os
import sys

import petsc4py

petsc4py.init([sys.argv[0]])
from petsc4py import PETSc  # noqa: E402

from ddlearn.harness import bench, fem  # noqa: E402
from ddlearn.harness.report import plt, save_figure  # noqa: E402
from ddlearn.harness.study import Rows  # noqa: E402
from ddlearn.harness.systems import solve_with_options  # noqa: E402
from ddlearn.harness.methods import METHODS as REGISTRY  # noqa: E402

CONTRASTS = (1.0, 1e3, 1e6)
PC = {"pc_type": "python", "pc_python_type": "ddlearn.pc.TwoLevelSchwarzPC"}
DDLEARN = {
    "one-level": {"ddlearn_coarse_space": "none"},
    "nicolaides": {"ddlearn_coarse_space": "nicolaides"},
    "gdsw": {"ddlearn_coarse_space": "gdsw"},
    "rgdsw": {"ddlearn_coarse_space": "rgdsw"},
}
AUX = {
    "spectral aux": {"ddlearn_coarse_space": "spectral", "ddlearn_spectral_nev": "8"},
    "spectral aux tau": {"ddlearn_coarse_space": "spectral", "ddlearn_spectral_nev": "32",
                         "ddlearn_spectral_threshold": "0.1"},
    "one-level aux": {"ddlearn_coarse_space": "none"},
}
PETSC = {k: REGISTRY[k].options for k in ("asm", "gamg", "gamg-tuned", "gamg-sor", "mg-gdsw")}
METHODS = (*DDLEARN, *AUX, *PETSC)


def run_one(problem, method: str, N: int | None, aux, max_it: int) -> dict:
    """One solve with ``method``'s options on a fresh matrix; failures are recorded."""
    options = {"ksp_type": "cg", "ksp_rtol": "1e-8", "ksp_max_it": str(max_it)}
    if method in PETSC:
        options.update(PETSC[method])
    else:
        options.update(PC, **(DDLEARN.get(method) or AUX[method]))
        if method in DDLEARN:
            options["ddlearn_subdomains"] = str(N)
    A, b, coords = fem.to_petsc(problem)
    if method in AUX:
        fem.attach_auxiliary(A, *aux)
    rec = {"method": method, "N": N, "options": options, **solve_with_options(A, b, options)}
    for o in (A, b, coords):
        o.destroy()
    return rec


def benchmark(args) -> dict:
    comm = PETSc.COMM_WORLD.tompi4py()
    cases = [(d, {2: args.cells2d, 3: args.cells3d}[d]) for d in args.dims]
    data = {"ranks": comm.Get_size(), "cores": os.cpu_count(), "contrasts": args.contrasts,
            "Ns": args.N, "max_it": args.max_it, "quick": args.quick}
    rows = Rows(args, data, lambda r: (r["dim"], r["cells"], r["contrast"], r["method"], r["N"]))
    for dim, cells in cases:
        for contrast in args.contrasts:
            problem = fem.build(dim, cells, contrast=contrast, seed=0)
            case = {"dim": dim, "cells": cells, "dofs": problem.A.shape[0], "contrast": contrast}
            for method in (m for m in PETSC if m in args.methods):
                if not rows.done((dim, cells, contrast, method, None)):
                    _log(rows.add({**case, **run_one(problem, method, None, None, args.max_it)}))
            for N in args.N if set(args.methods) - set(PETSC) else ():
                A, b, coords = fem.to_petsc(problem)
                aux = fem.auxiliary(problem, A, N, "metis") if set(args.methods) & set(AUX) \
                    else None
                for o in (A, b, coords):
                    o.destroy()
                for method in (m for m in (*DDLEARN, *AUX) if m in args.methods):
                    if not rows.done((dim, cells, contrast, method, N)):
                        _log(rows.add({**case, **run_one(problem, method, N, aux, args.max_it)}))
    return data


def _log(rec: dict) -> dict:
    extra = (f"{rec.get('setup_s', 0):.2f} s + {rec.get('solve_s', 0):.2f} s, "
             f"rnorm_true {rec['rnorm_true']:.1e}, n0 {rec.get('n0')}") if "rnorm_true" in rec \
        else rec.get("error", "")[:300]
    PETSc.Sys.Print(f"{rec['dim']}D {rec['dofs']} dofs contrast {rec['contrast']:g} "
                    f"N {rec['N']} {rec['method']}: {bench.outcome(rec)}  {extra}",
                    comm=PETSc.COMM_WORLD)
    return rec


def targets(data: dict) -> list[dict]:
    """Per (dim, N): spectral aux's max/min iterations over the contrasts, and one-level's
    iterations over spectral aux's at the largest contrast."""
    out = []
    hi = max(data["contrasts"])
    for dim in sorted({r["dim"] for r in data["rows"]}):
        for N in data["Ns"]:
            rows = {(r["method"], r["contrast"]): r for r in data["rows"]
                    if r["dim"] == dim and r["N"] == N}
            spec = [rows.get(("spectral aux", c)) for c in data["contrasts"]]
            one = rows.get(("one-level", hi))
            t = {"dim": dim, "N": N}
            if all(s and s.get("converged") for s in spec):
                its = [s["iterations"] for s in spec]
                t["spectral_variation"] = max(its) / min(its)
                if one and one.get("converged"):
                    t["one_level_over_spectral"] = one["iterations"] / spec[-1]["iterations"]
                elif one:
                    t["one_level_over_spectral"] = f">{one.get('iterations', data['max_it'])}/" \
                                                   f"{spec[-1]['iterations']}"
            out.append(t)
    return out


def summary(data: dict) -> str:
    cs = data["contrasts"]
    lines = [f"{data['ranks']} ranks, CG rtol 1e-8 (unpreconditioned residual), at most "
             f"{data['max_it']} iterations; iterations (a failure: its reason), n_0 = coarse "
             f"size, times at contrast {max(cs):g} (set-up + solve, slowest rank)", "",
             "| dim | dofs | N | method | n_0 | " + " | ".join(f"its E={c:g}" for c in cs)
             + " | set-up s | solve s | true res. |",
             "|---|---:|---:|---|---:|" + "---:|" * len(cs) + "---:|---:|---:|"]
    rows = data["rows"]
    for dim in sorted({r["dim"] for r in rows}):
        dofs = next(r["dofs"] for r in rows if r["dim"] == dim)
        for N in [None, *data["Ns"]]:
            for method in METHODS:
                got = {r["contrast"]: r for r in rows
                       if r["dim"] == dim and r["N"] == N and r["method"] == method}
                if not got:
                    continue
                last = got.get(max(cs), {})
                n0 = next((r.get("n0") for r in got.values() if r.get("n0")), None)
                times = (f"{last['setup_s']:.2f} | {last['solve_s']:.2f} | "
                         f"{last['rnorm_true']:.1e}") if "solve_s" in last else "– | – | –"
                lines.append(f"| {dim}D | {dofs} | {N if N else 'ranks'} | {method} | "
                             f"{n0 if n0 else '–'} | "
                             + " | ".join(bench.outcome(got[c]) if c in got else "–" for c in cs)
                             + f" | {times} |")
    lines += ["", "Targets (spectral aux: max/min iterations over the contrasts ≤ 1.5; "
              "one-level / spectral aux at the largest contrast ≥ 4):", ""]
    for t in targets(data):
        v, r = t.get("spectral_variation"), t.get("one_level_over_spectral")
        lines.append(f"- {t['dim']}D, N = {t['N']}: variation "
                     f"{f'{v:.2f}' if v is not None else 'n/a (spectral aux failed)'}, "
                     f"one-level / spectral aux {f'{r:.1f}' if isinstance(r, float) else r}")
    errors = [r for r in rows if r.get("error")]
    if errors:
        lines += ["", "Errors:", ""]
        seen = set()
        for r in errors:
            key = (r["method"], r["error"][:200])
            if key in seen:
                continue
            seen.add(key)
            lines.append(f"- {r['method']} ({r['dim']}D, contrast {r['contrast']:g}, N "
                         f"{r['N']}): {r['error'][:400]}")
    return "\n".join(lines)


def plot(data: dict, path: str) -> None:
    dims = sorted({r["dim"] for r in data["rows"]})
    fig, axes = plt.subplots(len(dims), len(data["Ns"]), figsize=(5.2 * len(data["Ns"]),
                             3.8 * len(dims)), squeeze=False)
    for i, dim in enumerate(dims):
        for j, N in enumerate(data["Ns"]):
            ax = axes[i, j]
            for method in METHODS:
                pts = sorted((r["contrast"], r["iterations"]) for r in data["rows"]
                             if r["dim"] == dim and r["method"] == method
                             and r["N"] in ((None,) if method in PETSC else (N,))
                             and r.get("converged"))
                if pts:
                    ax.plot(*zip(*pts), "o-" if method not in PETSC else "s--", label=method)
            ax.set(xscale="log", yscale="log", xlabel="contrast (E in the inclusions)",
                   ylabel="CG iterations", title=f"{dim}D, N = {N} (PETSc: one block per rank)")
            ax.grid(True, which="both", alpha=0.3)
    axes[0, -1].legend(fontsize=7, loc="upper left")
    save_figure(fig, path)


def main(argv=None):
    ap = bench.parser("elasticity", __doc__, "tiny meshes (tests)")
    ap.add_argument("--cells2d", type=int, default=None)
    ap.add_argument("--cells3d", type=int, default=None)
    ap.add_argument("--N", type=int, nargs="+", default=None)
    ap.add_argument("--contrasts", type=float, nargs="+", default=None)
    ap.add_argument("--max-it", type=int, default=2000)
    ap.add_argument("--dims", type=int, nargs="+", default=[2, 3], choices=[2, 3])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    args = bench.parse(ap, argv)
    comm = PETSc.COMM_WORLD.tompi4py()
    if args.report:
        files = bench.results(args)
        data = files["elasticity"]
        if comm.Get_rank() == 0:
            plot(data, os.path.join(args.out, "elasticity.png"))
        bench.write_readme(args, "Linear elasticity in 2D and 3D",
                           [("Table", summary(data)),
                            ("Plot", "![iterations against contrast](elasticity.png)")], files)
        return data
    q = args.quick
    args.cells2d = args.cells2d or (8 if q else 100)
    args.cells3d = args.cells3d or (3 if q else 14)
    args.N = args.N or ([4] if q else [16, 64])
    args.contrasts = args.contrasts or ([1.0, 1e6] if q else list(CONTRASTS))
    data = benchmark(args)
    path = bench.write(args, data)
    if comm.Get_rank() == 0:
        plot(data, os.path.splitext(path)[0] + ".png")
    bench.show(summary(data))
    return data


if __name__ == "__main__":
    main()
