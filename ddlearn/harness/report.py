"""Tables and convergence plots of Krylov results.

    python -m ddlearn.harness.report FILE [FILE ...]
    python -m ddlearn.harness.report --report [--out DIR]
    python -m ddlearn.harness.report --headline

reprints the tables of the main job (``examples/poisson.py``) from the JSON it wrote, e.g.
``python -m ddlearn.harness.report benchmarks/results/main_job/main_job_*.json``; with
``--report``, writes ``DIR/README.md`` (default ``benchmarks/results/main_job/``) from every
``main_job*.json`` in DIR; with ``--headline``, rewrites the README's headline table (between
its ``<!-- headline -->`` markers) from the default run's two JSONs (:data:`HEADLINE`).
"""
from __future__ import annotations

import json
import re
import textwrap

import matplotlib

matplotlib.use("Agg")  # files, never a screen: ranks run headless
import matplotlib.pyplot as plt  # noqa: E402

from . import bench  # noqa: E402

__all__ = ["format_table", "format_report", "headline", "plot_histories", "save_figure",
           "plt", "HEADLINE"]

#: the default main job's tables, in the README's headline: (JSON in results/main_job, column)
HEADLINE = (("main_job_poisson2d.json", "Poisson"),
            ("main_job_random_channels.json", "random channels, contrast 1e6"))
_MARKERS = re.compile(r"(<!-- headline -->\n).*?(<!-- /headline -->)", re.S)


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


def _oversubscribed(report: dict) -> str:
    """`` (oversubscribed)`` when the run had more ranks than cores: its times, collective
    set-ups (GAMG's above all) most, are inflated and compare methods of that run only."""
    return " (oversubscribed)" if report["ranks"] > report["cores"] else ""


def format_report(report: dict) -> str:
    """One problem's table of the main job from its JSON ``report``, with the run's settings
    and wall time underneath."""
    p = report["problem"]
    lines = [format_table(report["results"], _label(p)), ""]
    wall = f", {report['wall_s']:.1f} s wall time" if "wall_s" in report else ""
    lines.append(f"N = {report['subdomains']}, overlap {p.get('overlap')}, "
                 f"n_0 = {p.get('n0')} ({p.get('coarse_space')}), {report['ranks']} ranks on "
                 f"{report['cores']} cores{_oversubscribed(report)}, {report['ksp_type']} to rtol {report['rtol']:g}"
                 f"{wall}")
    return "\n".join(lines)


def headline(reports: list[dict], names: list[str]) -> str:
    """The README's headline: per method, iterations and set-up + solve seconds (slowest rank)
    of each report (a column per problem, ``names``), the runs' settings and provenance under
    it."""
    cols = [{r["method"]: r for r in rep["results"]} for rep in reports]
    methods = list(dict.fromkeys(m for c in cols for m in c))
    cell = [lambda r: f"{r['iterations']}" + ("" if r["reason"].startswith("CONVERGED")
                                               else f" ({r['reason']})"),
            lambda r: f"{r['setup_s'] + r['solve_s']:.1f}"]
    head = ["method"] + [f"{n}: {w}" for n in names for w in ("iterations", "set-up + solve s")]
    rows = [[m] + [f(c[m]) if m in c else "–" for c in cols for f in cell] for m in methods]
    p, stamp = reports[0]["problem"], reports[0].get("provenance", {})
    grid = "×".join(str(g) for g in p["grid"])
    return "\n".join([
        bench.markdown_table(head, rows, "l" + "rr" * len(cols)), "", *textwrap.wrap(
        f"{grid} unknowns, N = {reports[0]['subdomains']} subdomains, overlap {p['overlap']}, "
        f"{reports[0]['ksp_type']} to rtol {reports[0]['rtol']:g} from a random right-hand side; "
        f"{reports[0]['ranks']} ranks on {reports[0]['cores']} cores ({stamp.get('processor')}, "
        f"oversubscribed); times are the slowest rank's, `attention`'s training excluded. "
        f"Measured by `{stamp.get('command')}` at commit {str(stamp.get('commit'))[:10]}; "
        f"regenerated from `benchmarks/results/main_job/` by "
        f"`python -m ddlearn.harness.report --headline`.", 96)])


def save_figure(fig, path: str, dpi: int = 110) -> str:
    """Write ``fig`` to ``path`` (tight layout) and free it: every study's plots end here."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


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
    save_figure(fig, path, 120)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = bench.parser("main_job", __doc__, "(no effect here)", "-m ddlearn.harness.report")
    ap.add_argument("files", nargs="*", metavar="FILE", help="JSON written by examples/poisson.py")
    ap.add_argument("--headline", action="store_true",
                    help="rewrite the headline table of README.md from DIR's default-run JSON")
    args = bench.parse(ap, argv)
    if args.headline:
        reports = [bench.read(f"{args.out}/{name}") for name, _ in HEADLINE]
        table = headline(reports, [label for _, label in HEADLINE])
        readme = bench.ROOT / "README.md"
        text = _MARKERS.sub(lambda m: f"{m[1]}{table}\n{m[2]}", readme.read_text(), count=1)
        if bench.COMM.Get_rank() == 0:
            bench.atomic_write(str(readme), lambda f: f.write(text.encode()))
    elif args.report:
        files = bench.results(args)
        reports = list(files.values())
        bench.write_readme(args, "The main job", [
            (f"{name}.json", format_report(r)) for name, r in files.items()], files,
            intro="Written by `examples/poisson.py` (`scripts/main` runs it on 8 ranks); "
                  "each file is one problem's table. A run with more ranks than cores is "
                  "marked oversubscribed: its times, the collective set-ups (GAMG's above "
                  "all) most, are inflated and compare the methods of that run only.")
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
