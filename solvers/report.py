"""Tables and convergence plots of Krylov results."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files, never a screen: ranks run headless
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["format_table", "plot_histories"]


def format_table(results) -> str:
    """Markdown table of :class:`~ddlearn.classical.krylov.KrylovResult` rows."""
    lines = ["| method | iterations | reason | true rel. residual | train s | setup s | solve s |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r.method} | {r.iterations} | {r.reason} | {r.rnorm_true:.2e} | "
                     f"{r.train_s:.1f} | {r.setup_s:.3f} | {r.solve_s:.3f} |")
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
