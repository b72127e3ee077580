"""Tables and convergence plots of Krylov results.

    python -m ddlearn.harness.report FILE [FILE ...]
    python -m ddlearn.harness.report --report [--out DIR]

reprints the tables of the main job (``examples/poisson.py``) from the JSON it wrote, e.g.
``python -m ddlearn.harness.report benchmarks/results/main_job/main_job_*.json``; with
``--report``, writes ``DIR/README.md`` (default ``benchmarks/results/main_job/``) from every
``main_job*.json`` in DIR.
"""
from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")  # files, never a screen: ranks run headless
import matplotlib.pyplot as plt  # noqa: E402

from . import bench  # noqa: E402

__all__ = ["format_table", "format_report", "plot_histories"]


def format_table(results, label: str = "method") -> str:
    """Markdown table of :class:`~ddlearn.classical.krylov.KrylovResult` rows (or of their
    ``record()`` dictionaries, as stored in the JSON); ``label`` heads the first column."""
    rows = [r if isinstance(r, dict) else r.record() for r in results]
    return bench.markdown_table(
        [label, "iterations", "reason", "true rel. residual", "train s", "setup s", "solve s"],
        [[r["method"], r["iterations"], r["reason"], f"{r['rnorm_true']:.2e}",
          f"{r['train_s']:.1f}", f"{r['setup_s']:.3f}", f"{r['solve_s']:.3f}"] for r in rows],
        "lrlrrrr")


def _label(problem: dict) -> str:
    """First-column heading: the problem, its grid and, for coefficient fields, contrast and
    seed."""
    grid = "×".join(str(g) for g in problem.get("grid", [problem.get("n")]))
    extra = [f"contrast {problem['contrast']:g}"] if "contrast" in problem else []
    extra += [f"seed {problem['seed']}"] if "seed" in problem else []
    return f"method ({', '.join([problem['name'] + ' ' + grid] + extra)})"


def format_report(report: dict) -> str:
    """One problem's table of the main job from its JSON ``report``, with the run's settings
    and wall time underneath."""
    p = report["problem"]
    lines = [format_table(report["results"], _label(p)), ""]
    wall = f", {report['wall_s']:.1f} s wall time" if "wall_s" in report else ""
    lines.append(f"N = {report['subdomains']}, overlap {p.get('overlap')}, "
                 f"n_0 = {p.get('n0')} ({p.get('coarse_space')}), {report['ranks']} ranks on "
                 f"{report['cores']} cores, {report['ksp_type']} to rtol {report['rtol']:g}"
                 f"{wall}")
    return "\n".join(lines)


def plot_histories(results, path: str, title: str = "") -> None:
    """Semilog plot of relative residual norm against iteration, one line per method."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        if r.history:
            ax.semilogy(r.history, label=f"{r.method} ({r.iterations})")
    ax.set_xlabel("iteration")
    ax.set_ylabel(r"$\|r_k\| / \|r_0\|$")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = bench.parser("main_job", __doc__, "(no effect here)", "-m ddlearn.harness.report")
    ap.add_argument("files", nargs="*", metavar="FILE", help="JSON written by examples/poisson.py")
    args = bench.parse(ap, argv)
    if args.report:
        files = bench.results(args)
        reports = list(files.values())
        bench.write_readme(args, "The main job", [
            (f"{name}.json", format_report(r)) for name, r in files.items()], files,
            intro="Written by `examples/poisson.py` (`scripts/main` runs it on 8 ranks); "
                  "each file is one problem's table.")
    else:
        reports = []
        for path in args.files:
            with open(path) as f:
                reports.append(json.load(f))
    bench.show("\n\n".join(format_report(r) for r in reports))
    walls = [r["wall_s"] for r in reports if "wall_s" in r]
    if len(walls) > 1:
        bench.show(f"\n{len(walls)} tables, {sum(walls):.1f} s wall time together")
    return reports


if __name__ == "__main__":
    main()
