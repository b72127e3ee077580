r"""Classical coarse spaces against contrast and N.

    mpiexec -n 2 python benchmarks/coarse_spaces.py [--quick] [--out DIR] [--pencils]
    python benchmarks/coarse_spaces.py --report     (tables, plot and README.md from the JSON)

2D 255² diffusion, five vertical ``channels`` and seeded ``random_inclusions`` (seed 0), contrast
1, 1e2, 1e4, 1e6, 1e8; N = 16, 64, 256 subdomains, overlap 1, in the natural ordering with PETSc's
default rows and the grid coordinates attached. Methods, all ``ddlearn.pc.TwoLevelSchwarzPC``
on box subdomains but GAMG's: one-level (``asm``), Q1 ``hats``, ``nicolaides``, ``gdsw`` (ours,
per subdomain), ``spectral`` with k = 8 vectors per subdomain alone and with the hats, the hats
with the spectral vectors below :math:`\tau = 0.5` (at most 16; the median subdomain spectrum
at 255², N = 64 puts :math:`\lambda_9` near 0.6), and PETSc's GAMG with its defaults
(``gamg``) and tuned (``gamg-tuned``: threshold 0.01, ``METHODS["gamg-tuned"]`` of
:mod:`ddlearn.harness.methods`). CG to rtol 1e-8 on
the unpreconditioned residual from three right-hand sides (random uniform, point source,
smooth); set-up split from the PC (partition, coarse basis incl. eigensolves, local
factorisations, coarse matrix). Writes ``coarse_spaces.json`` and ``coarse_spaces.png``
(iterations against contrast); ``--pencils`` instead runs spectral k = 8 with each
``-ddlearn_spectral_pencil`` at contrast 1e6, N = 64 (``coarse_spaces_pencils.json``). Times
are the slowest rank's; one rank per core (more ranks than cores slow PETSc's collective
set-ups, GAMG's above all, many-fold), and times compare methods of one run, not machines.
"""
from __future__ import annotations

import os

import numpy as np
import petsc4py

petsc4py.init([])
from mpi4py import MPI  # noqa: E402
from petsc4py import PETSc  # noqa: E402

from ddlearn.classical.coarse.hats import Hats  # noqa: E402
from ddlearn.classical.coarse.spectral import Spectral  # noqa: E402
from ddlearn.decomposition.problems import make_problem  # noqa: E402
from ddlearn.harness import bench  # noqa: E402
from ddlearn.harness.report import plt, save_figure  # noqa: E402
from ddlearn.harness.systems import natural_matrix, pc_solves  # noqa: E402

COMM = MPI.COMM_WORLD
CONTRASTS = (1.0, 1e2, 1e4, 1e6, 1e8)


def right_hand_sides(n: int):
    x, y = np.meshgrid(np.arange(1, n + 1) / (n + 1), np.arange(1, n + 1) / (n + 1))
    point = np.zeros(n * n)
    point[(n // 3) * n + n // 3] = 1.0
    return {"random": np.random.default_rng(0).uniform(-1, 1, n * n), "point": point,
            "smooth": (np.sin(np.pi * x) * np.sin(2 * np.pi * y)).ravel()}


METHODS = {
    "asm": dict(coarse_space="none"),
    "hats": dict(coarse_space="hats"),
    "nicolaides": dict(coarse_space="nicolaides"),
    "gdsw": dict(coarse_space="gdsw"),
    "spectral k=8": dict(coarse_space=Spectral(8)),
    "hats+spectral k=8": dict(coarse_space=Hats() + Spectral(8)),
    "hats+spectral tau=0.5": dict(coarse_space=Hats() + Spectral(16, 0.5)),
    "gamg": "gamg",
    "gamg-tuned": "gamg-tuned",
}
#: PETSc's preconditioners among the methods (by their name in :data:`ddlearn.harness.methods.METHODS`): they do not depend
#: on N and run once per case, at the smallest N
REFERENCE = tuple(m for m, config in METHODS.items() if isinstance(config, str))


def main(argv: list[str] | None = None):
    ap = bench.parser("coarse_spaces", __doc__, "63², N = 16, two contrasts")
    ap.add_argument("--pencils", action="store_true",
                    help="only: spectral k=8 with each -ddlearn_spectral_pencil at contrast "
                         "1e6, N = 64 (coarse_spaces_pencils.json)")
    args = bench.parse(ap, argv)
    if args.report:
        return readme(args)
    if args.pencils:
        return pencils(args, 63 if args.quick else 255, 16 if args.quick else 64)
    n, Ns, contrasts = (63, (16,), (1.0, 1e6)) if args.quick else (255, (16, 64, 256), CONTRASTS)
    rows = []
    for family in ("channels", "random_inclusions"):
        for contrast in contrasts:
            problem = make_problem(family, n, contrast=contrast)
            A = natural_matrix(problem)
            lo, hi = A.getOwnershipRange()
            b = []
            for f in right_hand_sides(n).values():
                v = A.createVecLeft()
                v.setArray(f[lo:hi])
                b.append(v)
            for N in Ns:
                for method in METHODS:
                    if method in REFERENCE and N != Ns[0]:
                        continue  # GAMG does not depend on N
                    r = pc_solves(A, b, N, METHODS[method])
                    rows.append({"family": family, "contrast": contrast, "N": N,
                                 "method": method, **r})
                    PETSc.Sys.Print(f"{family} {contrast:g} N={N} {method}: its {r['iterations']}"
                                    f" n0 {r['n0']} setup {r['setup_s']:.2f} s {r['split']}")
            for o in (A, *b):
                o.destroy()
    data = {"n": n * n, "ranks": COMM.Get_size(), "cores": os.cpu_count(), "rows": rows}
    path = bench.write(args, data)
    bench.show(report(data))
    if COMM.Get_rank() == 0:
        plot(data, path[:-len(".json")] + ".png")
    bench.show(f"wrote {path}")
    return data


def pencils(args, n: int, N: int) -> dict:
    """Spectral k = 8 with the Neumann and the Dirichlet pencil on the same matrices,
    right-hand sides and subdomains as the main table (contrast 1e6); mean iterations."""
    rows = []
    for family in ("channels", "random_inclusions"):
        problem = make_problem(family, n, contrast=1e6)
        A = natural_matrix(problem)
        lo, hi = A.getOwnershipRange()
        b = []
        for f in right_hand_sides(n).values():
            b.append(A.createVecLeft())
            b[-1].setArray(f[lo:hi])
        for pencil in ("neumann", "dirichlet"):
            r = pc_solves(A, b, N, dict(coarse_space=Spectral(8, pencil=pencil)))
            rows.append({"family": family, "pencil": pencil, "N": N, **r})
            PETSc.Sys.Print(f"{family} {pencil}: its {r['iterations']} "
                            f"(mean {np.mean(r['iterations']):.1f})")
        for o in (A, *b):
            o.destroy()
    data = {"n": n * n, "ranks": COMM.Get_size(), "cores": os.cpu_count(), "rows": rows}
    bench.write(args, data, "coarse_spaces_pencils")
    bench.show(pencils_table(data))
    return data


def pencils_table(data) -> str:
    """Spectral k = 8 with each pencil: CG iterations per right-hand side and their mean."""
    return bench.markdown_table(
        ["family", "pencil", "N", "n_0", "CG its (random/point/smooth)", "mean its", "setup s"],
        [[r["family"], r["pencil"], r["N"], r["n0"], "/".join(map(str, r["iterations"])),
          f"{np.mean(r['iterations']):.1f}", f"{r['setup_s']:.2f}"] for r in data["rows"]],
        "llrrrrr")


def readme(args) -> dict:
    """README.md (and the plot) from the JSON in the results folder."""
    files = bench.results(args)
    sections = []
    if "coarse_spaces" in files:
        data = files["coarse_spaces"]
        sections += [("Condensed", summary(data)), ("Every run", report(data))]
        if COMM.Get_rank() == 0:
            plot(data, os.path.join(args.out, "coarse_spaces.png"))
        sections.append(("Plot", "![iterations against contrast](coarse_spaces.png)"))
    if "coarse_spaces_pencils" in files:
        sections.append(("Spectral pencils (contrast 1e6)",
                         pencils_table(files["coarse_spaces_pencils"])))
    bench.write_readme(args, "Classical coarse spaces against contrast and N", sections, files)
    return files


def report(data) -> str:
    out = [f"n = {data['n']}, {data['ranks']} ranks on {data['cores']} cores", "",
           "| family | contrast | N | method | n_0 | CG its (random/point/smooth) | setup s | "
           "partition | basis (eigensolves) | local | coarse | solve s | "
           "true rel. residual (worst b) |",
           "|---|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in data["rows"]:
        s = r["split"]
        cells = " | ".join(f"{s[k]:.2f}" if k in s else "" for k in
                           ("partition_s", "basis_s", "local_s", "coarse_s"))
        out.append(f"| {r['family']} | {r['contrast']:g} | {r['N']} | {r['method']} | {r['n0']} | "
                   f"{'/'.join(map(str, r['iterations']))} | {r['setup_s']:.2f} | {cells} | "
                   f"{r['solve_s']:.2f} | {r['rnorm_true_max']:.1e} |")
    return "\n".join(out)


def summary(data) -> str:
    """Mean CG iterations (3 right-hand sides) per method at N = 64 against contrast, and how
    much each method's iterations vary over contrast and N (max / min of the means)."""
    rows = data["rows"]
    methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
    # a solve that did not converge within the cap counts as "n.c." and is left out of ratios
    mean = {(r["family"], r["contrast"], r["N"], r["method"]):
            float(np.mean(r["iterations"])) if min(r["iterations"]) > 0 else np.nan for r in rows}
    Ns = sorted({r["N"] for r in rows})
    N = 64 if 64 in Ns else Ns[0]
    out = [f"Mean CG iterations at N = {N} (GAMG, defaults and tuned: independent of N):", "",
           "| family | contrast | " + " | ".join(methods) + " |",
           "|---|---:|" + "---:|" * len(methods)]
    for family in sorted({r["family"] for r in rows}):
        for c in sorted({r["contrast"] for r in rows}):
            cells = []
            for m in methods:
                key = (family, c, Ns[0] if m in REFERENCE else N, m)
                cells.append("" if key not in mean else "n.c." if np.isnan(mean[key])
                             else f"{mean[key]:.1f}")
            out.append(f"| {family} | {c:g} | " + " | ".join(cells) + " |")
    out += ["", _spread(rows, N)]
    out += ["", "Variation over contrast 1 … 1e8 and N (max/min of the mean iterations; "
            "worst mean; n.c.: some solve not converged in 3000 iterations, left out):", "", "| family | method | max/min over contrast (per N) | "
            "max/min over N (per contrast) | worst mean |", "|---|---|---|---|---:|"]
    for family in sorted({r["family"] for r in rows}):
        for m in methods:
            if m in REFERENCE:
                continue
            by_n = [np.nanmax(v) / np.nanmin(v) for v in
                    ([mean[family, c, n, m] for c in sorted({r["contrast"] for r in rows})]
                     for n in Ns)]
            by_c = [np.nanmax(v) / np.nanmin(v) for v in
                    ([mean[family, c, n, m] for n in Ns]
                     for c in sorted({r["contrast"] for r in rows}))]
            worst = np.nanmax([mean[family, c, n, m] for c in sorted({r["contrast"] for r in rows})
                               for n in Ns])
            failed = sum(np.isnan(mean[family, c, n, m]) for c in
                         sorted({r["contrast"] for r in rows}) for n in Ns)
            out.append(f"| {family} | {m} | {'/'.join(f'{v:.2f}' for v in by_n)} | "
                       f"{'/'.join(f'{v:.2f}' for v in by_c)} | {worst:.1f}"
                       + (f" ({failed} n.c.)" if failed else "") + " |")
    return "\n".join(out)


def _spread(rows, N: int) -> str:
    """How evenly the run had the cores: one-level ASM does the same work per CG iteration at
    one N whatever the coefficient, so the spread of its solve seconds per iteration over the
    cases is the spread the machine's load put on every time of the run."""
    per_it = [r["solve_s"] / np.mean(r["iterations"]) * 1e3 for r in rows
              if r["method"] == "asm" and r["N"] == N and min(r["iterations"]) > 0]
    if not per_it:
        return ""
    return (f"Seconds: asm's solve time per CG iteration at N = {N} ranges "
            f"{min(per_it):.1f}–{max(per_it):.1f} ms over the {len(per_it)} cases (the same "
            f"work each): where that spread is wide, the cores were shared unevenly during "
            f"the run, and seconds compare methods within one case at most; the iterations "
            f"do not depend on it.")


def plot(data, path):
    families = sorted({r["family"] for r in data["rows"]})
    Ns = sorted({r["N"] for r in data["rows"]})
    fig, axes = plt.subplots(len(families), len(Ns), figsize=(4 * len(Ns), 3.4 * len(families)),
                             squeeze=False, sharey=True)
    for a, family in enumerate(families):
        for c, N in enumerate(Ns):
            ax = axes[a][c]
            for method in METHODS:
                # a solve not converged within the cap leaves a gap in its line
                pts = sorted((r["contrast"], np.mean(r["iterations"])
                              if min(r["iterations"]) > 0 else np.nan) for r in data["rows"]
                             if r["family"] == family and r["method"] == method
                             and (r["N"] == N or method in REFERENCE))
                if pts:
                    ax.loglog(*zip(*pts), "o-", label=method)
            ax.set_title(f"{family}, N = {N}")
            ax.set_xlabel("contrast")
            ax.grid(True, alpha=0.3)
        axes[a][0].set_ylabel("CG iterations (mean of 3 b)")
        axes[a][0].set_ylim(8, 2000)
    axes[0][-1].legend(fontsize=8)
    save_figure(fig, path)


if __name__ == "__main__":
    main()
