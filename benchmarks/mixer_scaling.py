r"""The token mixers against the number of tokens: forward + backward time and peak memory of
every mixer of :data:`ddlearn.nn.MIXERS` from 1k to 256k tokens on 2D and 3D grids.

    python benchmarks/mixer_scaling.py [--mixers ...] [--dims 2 3] [--note TEXT] [--out DIR]
    python benchmarks/mixer_scaling.py --report     (README.md: tables and plot from the JSON)

Tokens: the points of a tensor grid, 32² ... 512² (2D) and 10³ ... 64³ (3D), x fastest, sides
chosen so that Schwarz attention's boxes are near cubes (20³ would ask for 31 subdomains, 31
boxes along one axis). Every mixer at equal width: ``channels`` 64, 4 heads, batch 1, float32,
one thread (``torch.set_num_threads(1)``: the mixers compare on one core); FLARE and FLARE++ with
64 latents, physics attention with 64 slices; Schwarz attention (softmax inside the subdomains,
and ``schwarz-galerkin``) on ``TokenLayout.build(coords, subdomain_size=256, overlap=1)``
(boxes, pou coarse level): a fixed subdomain size, so more subdomains on a finer grid.

Each point (mixer, grid) runs in its own process, forked from this one after the imports and a
warm-up of every mixer on a tiny grid (so neither an interpreter start-up nor torch's first-call
set-up per point; the warm-up grid is in no sweep, so no measured layout is cached). The child
builds the layout (timed: the token graph alone, then the whole
:meth:`~ddlearn.nn.TokenLayout.build`), the mixer, warms it up once more on the tiny grid, makes
the input ``x`` and an upstream gradient ``g`` and runs ``mixer(x).backward(g)``. Memory: the
peak resident memory of that first forward + backward above the resident memory just before it
(``VmHWM`` reset by ``/proc/self/clear_refs`` minus ``VmRSS``, Linux): what the step allocates
(activations kept for backward, temporaries, gradients), not the parameters, input or layout.
Time: the process's CPU seconds (``time.process_time``, one thread) of one forward + backward,
the median of up to 3 repeats after the first (as many as fit in 10 s; the first run's when it
took longer), and its wall seconds too: CPU seconds do not count the time spent waiting for a
core on a shared machine. The parent watches every child: a child over the memory cap (RSS) or
the wall-clock limit, or leaving the machine less than 2 GiB available, is killed; once a mixer's point took more than the time budget (CPU
seconds) or the memory cap, its larger grids of that dimension are recorded as
``skipped: over budget``.

Series ``schwarz-size/4`` and ``schwarz-size/4-o0``: the same Schwarz attention on subdomains
of a quarter of that size, with and without overlap: what the cost at scale comes down to
(each token attends to its subdomain and the coarse tokens, so the fine work per token follows
the subdomain size with its overlap layer; 64 tokens split evenly into boxes at 256², 40³ and
80³, not on every grid).

``--device cuda``: the same sweep on a GPU, to about a million tokens (:data:`GPU_SIDES`), in
this process (CUDA does not survive a fork): time is the wall time of one forward + backward
until the GPU is done (median of up to 10 repeats), memory the peak allocated device memory
above what was allocated before; float32 without TF32. Results go to
``mixer_scaling_gpu.json`` and ``mixer_scaling_gpu.png``; the report shows both sweeps.

Fitted exponents: least squares of log time and log memory against log tokens over the points
with at least 16k tokens, per mixer and dimension; time ratios to Schwarz attention at the grid
nearest 64k tokens. Writes ``mixer_scaling.json`` (rewritten every minute during the sweep) and
``mixer_scaling.png``.
"""
from __future__ import annotations

import gc
import inspect
import json
import math
import os
import signal
import statistics
import time

import numpy as np  # noqa: E402
import torch  # noqa: E402

from ddlearn.harness import bench  # noqa: E402
from ddlearn.harness.report import plt, save_figure  # noqa: E402
from ddlearn.nn import MIXERS, TokenLayout, make_mixer, mixer_class  # noqa: E402
from ddlearn.nn.layout import token_graph  # noqa: E402
from ddlearn.nn.train import training_device  # noqa: E402

STUDY = "mixer_scaling"
# grids whose subdomain count round(T / 256) has a box grid of boxes with aspect ratio <= 2
# (20³ would ask for 31 subdomains, 31 boxes along one axis of 20 points)
SIDES = {2: [32, 45, 64, 91, 128, 181, 256, 362, 512], 3: [10, 16, 19, 24, 32, 40, 48, 56, 64]}
QUICK_SIDES = {2: [8, 12, 16], 3: [4, 5, 8]}
#: a GPU's sweep goes on to about a million tokens (1024² = 16384 boxes of 64, 80³ = 20³ of 64)
GPU_SIDES = {2: [*SIDES[2], 724, 1024], 3: [*SIDES[3], 80]}
WARM_SIDE = {2: 6, 3: 3}  # the warm-up grid, in no sweep
#: extra series: a registered mixer with other options than its defaults, and (Schwarz) other
#: layouts: ``size`` scales ``--subdomain-size``, ``overlap`` replaces ``--overlap``
VARIANTS = {"schwarz-galerkin": ("schwarz", {"attention": "galerkin"}, {}),
            "schwarz-size/4": ("schwarz", {}, {"size": 0.25}),
            "schwarz-size/4-o0": ("schwarz", {}, {"size": 0.25, "overlap": 0})}
#: ``--layouts``: Schwarz attention's subdomain sizes and overlaps at the grid nearest
#: ``--ratio-tokens``, beside :data:`LAYOUT_AGAINST` (quick: sizes for 16² and 8³)
LAYOUT_SIZES, QUICK_LAYOUT_SIZES, LAYOUT_OVERLAPS = (32, 64, 128, 256), (4, 8, 16), (0, 1)
LAYOUT_AGAINST = "flare"
REPEAT_S = 10.0  # timed repeats after the first run: as many as fit (at most 3)


def series() -> dict[str, tuple[str, dict, dict]]:
    """Every registered mixer with its default options, then :data:`VARIANTS`: name ->
    (mixer, options, layout changes)."""
    return {**{name: (name, {}, {}) for name in MIXERS}, **VARIANTS}


def grid(side: int, dim: int) -> np.ndarray:
    """The ``side^dim`` points of the integer grid, x fastest."""
    axes = np.meshgrid(*[np.arange(side, dtype=np.float64)] * dim, indexing="ij")
    return np.stack([a.ravel(order="F") for a in axes], axis=1)


def mixer_options(mixer: str, options: dict, latents: int) -> dict:
    """``options`` plus ``latents`` / ``slices`` where the mixer's constructor takes them."""
    params = inspect.signature(mixer_class(mixer).__init__).parameters
    return {**{k: latents for k in ("latents", "slices") if k in params}, **options}


# -- one point, in a child process ----------------------------------------------------------------

def _fwd_bwd(m, x, g) -> tuple[float, float]:
    """CPU and wall seconds of ``m(x).backward(g)``, gradients cleared first (on a GPU: the
    wall seconds until its work is done, twice)."""
    m.zero_grad(set_to_none=True)
    x.grad = None
    cuda = x.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(x.device)
    c, t = time.process_time(), time.perf_counter()
    m(x).backward(g)
    if cuda:
        torch.cuda.synchronize(x.device)
        t = time.perf_counter() - t
        return t, t
    return time.process_time() - c, time.perf_counter() - t


def measure(p: dict) -> dict:
    """Layout, mixer, one forward + backward for peak memory, timed repeats (module
    docstring); runs in the child."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dtype, device = getattr(torch, p["dtype"]), torch.device(p["device"])
    coords = grid(p["side"], p["dim"])
    T = len(coords)
    out = {"threads": torch.get_num_threads()}
    layout = None
    if mixer_class(p["mixer"]).needs_layout:
        t = time.perf_counter()
        token_graph(coords)
        out["graph_s"] = time.perf_counter() - t
        t = time.perf_counter()
        layout = TokenLayout.build(coords, subdomain_size=p["subdomain_size"],
                                   overlap=p["overlap"])
        out["layout_s"] = time.perf_counter() - t
        out["layout"] = {k: v for k, v in layout.describe().items() if k != "fingerprint"}
        layout.tensors(device, dtype)  # set-up, as the parameters
    m = make_mixer(p["mixer"], p["channels"], p["heads"], layout=layout, dim=p["dim"],
                   **p["options"]).to(device, dtype)
    # warm-up on a small grid: the first call of each kernel pages in library code and
    # initialises, which is no part of the step's memory
    small = grid(p["warm_side"], p["dim"])
    if layout is not None:
        m.set_layout(TokenLayout.build(small, subdomain_size=p["subdomain_size"],
                                       overlap=p["overlap"]))
    m.set_points(small)
    _fwd_bwd(m, torch.randn(p["batch"], len(small), p["channels"], dtype=dtype,
                            requires_grad=True, device=device),
             torch.randn(p["batch"], len(small), p["channels"], dtype=dtype, device=device))
    m.set_layout(layout)
    m.set_points(coords)
    x = torch.randn(p["batch"], T, p["channels"], dtype=dtype, requires_grad=True, device=device)
    g = torch.randn(p["batch"], T, p["channels"], dtype=dtype, device=device)
    gc.collect()
    cuda = device.type == "cuda"
    if cuda:  # a GPU point: allocated device memory, and the first call's kernels compiled
        _fwd_bwd(m, x, g)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device) / 2 ** 20
    else:
        bench.peak_reset()
        base = bench.memory_mb("VmRSS")
    first_cpu, first_wall = _fwd_bwd(m, x, g)
    peak = (torch.cuda.max_memory_allocated(device) / 2 ** 20 if cuda else bench.peak_mb()) - base
    repeats = min(10 if cuda else 3, int(REPEAT_S // max(first_cpu, 1e-9)))
    runs = [_fwd_bwd(m, x, g) for _ in range(repeats)]
    cpu, wall = ([statistics.median(r) for r in zip(*runs)] if runs
                 else (first_cpu, first_wall))
    return {**out, "time_s": cpu, "wall_s": wall, "first_time_s": first_cpu,
            "first_wall_s": first_wall, "repeats": repeats, "peak_mb": peak,
            "baseline_mb": base, "params": sum(q.numel() for q in m.parameters())}


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _available_mb() -> float:
    """The machine's ``MemAvailable`` (``/proc/meminfo``), MB; infinite where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.inf


def run_point(p: dict, cap_mb: float, timeout_s: float, reserve_mb: float = 2048) -> dict:
    """:func:`measure` in a forked child, killed over ``cap_mb`` resident, over ``timeout_s``
    wall seconds, or when the machine has less than ``reserve_mb`` available (it is shared);
    its record (``status`` 'ok', 'killed: ...' or 'error: ...'). A GPU point runs in this
    process (CUDA does not survive a fork), over ``cap_mb`` of device memory refused."""
    if p["device"] != "cpu":
        return _run_here(p, cap_mb)
    read, write = os.pipe()
    gc.freeze()  # the child's gc.collect then skips the parent's objects (and their pages)
    pid = os.fork()
    if pid == 0:  # the child: measure, report through the pipe, leave without clean-up
        os.close(read)
        try:
            rec = {"status": "ok", **measure(p)}
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            rec = {"status": f"error: {type(e).__name__}: {e}"}
        data = json.dumps(rec).encode()
        while data:
            data = data[os.write(write, data):]
        os._exit(0)
    os.close(write)
    start, killed, rss, wait = time.perf_counter(), None, 0.0, 0.005
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        now = _rss_mb(pid)
        rss = max(rss, now)
        if now > cap_mb:
            killed = f"killed: over the memory cap ({now / 1024:.1f} GiB > {cap_mb / 1024:.1f})"
        elif time.perf_counter() - start > timeout_s:
            killed = f"killed: over the wall-clock limit ({timeout_s:.0f} s)"
        elif _available_mb() < reserve_mb:
            killed = (f"killed: the machine ran low on memory (< {reserve_mb:.0f} MB "
                      f"available, this point at {now / 1024:.1f} GiB)")
        if killed:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            break
        time.sleep(wait)
        wait = min(2 * wait, 0.2)
    with os.fdopen(read, "rb") as f:
        text = f.read()
    if killed:
        return {"status": killed, "max_rss_mb": rss}
    if not text:
        return {"status": f"error: the child ended without a result (wait status {status})"}
    return json.loads(text)


def _run_here(p: dict, cap_mb: float) -> dict:
    """:func:`measure` in this process on a GPU with at most ``cap_mb`` of its memory."""
    device = torch.device(p["device"])
    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap_mb * 2 ** 20 / total), device)
    try:
        return {"status": "ok", **measure(p)}
    except torch.cuda.OutOfMemoryError:
        return {"status": f"killed: over the memory cap ({cap_mb / 1024:.1f} GiB of the GPU)"}
    except Exception as e:  # noqa: BLE001 - recorded, as a child's error is
        return {"status": f"error: {type(e).__name__}: {e}"}
    finally:
        gc.collect()
        torch.cuda.empty_cache()


# -- the sweep ----------------------------------------------------------------------------------

def over_budget(rec: dict, budget_s: float, budget_mb: float) -> str | None:
    """Why the larger grids are skipped after ``rec``, or None."""
    if rec["status"] != "ok":
        return f"{rec['tokens']} tokens: {rec['status']}"
    if rec["time_s"] > budget_s:
        return f"{rec['tokens']} tokens took {rec['time_s']:.0f} s > {budget_s:.0f} s"
    if rec["peak_mb"] > budget_mb:
        return f"{rec['tokens']} tokens used {rec['peak_mb']:.0f} MB > {budget_mb:.0f} MB"
    return None


def point(args, name: str, dim: int, side: int) -> dict:
    """The settings of one point: the record's keys and what :func:`measure` needs."""
    mixer, options, layout = series()[name]
    return {"series": name, "mixer": mixer, "dim": dim, "side": side, "tokens": side ** dim,
            "options": mixer_options(mixer, options, args.latents), "channels": args.channels,
            "heads": args.heads, "batch": args.batch, "dtype": args.dtype,
            "subdomain_size": max(2, round(args.subdomain_size * layout.get("size", 1))),
            "overlap": layout.get("overlap", args.overlap), "warm_side": WARM_SIDE[dim],
            "device": args.device}


def warm_up(args) -> None:
    """Every series once on the warm-up grid in this process, before any fork: the children
    share the library code it paged in and skip torch's first-call set-up (about a second a
    process here)."""
    for dim in args.dims:
        for name in args.mixers:
            measure(point(args, name, dim, WARM_SIDE[dim]))


def _run(args, p: dict) -> dict:
    """The load average before point ``p`` and its :func:`run_point` record, under the
    command's memory cap and wall-clock limit."""
    return {"loadavg_before": os.getloadavg()[0],
            **run_point(p, args.memory_cap_gib * 1024, args.timeout_s)}


def sweep(args, save) -> list[dict]:
    """Every (dimension, grid, series) point, smaller grids first; ``save(points)`` after a
    point when the last save is a minute old (a stamp asks git)."""
    sides = _sides(args)
    points, stop, saved = [], {}, time.perf_counter()
    for dim in args.dims:
        for side in [n for n in sides[dim] if n ** dim <= (args.max_tokens or math.inf)]:
            for name in args.mixers:
                p = point(args, name, dim, side)
                rec = {k: p[k] for k in ("series", "mixer", "dim", "side", "tokens", "options")}
                if (name, dim) in stop:
                    rec.update(status="skipped: over budget", reason=stop[name, dim])
                else:
                    rec.update(_run(args, p))
                    why = over_budget(rec, args.budget_s, args.memory_cap_gib * 1024)
                    if why:
                        stop[name, dim] = why
                points.append(rec)
                bench.show(line(rec))
                if time.perf_counter() - saved > 60:
                    save(points)
                    saved = time.perf_counter()
    return points


def layout_points(args) -> list[dict]:
    """``--layouts``: at the grid nearest ``--ratio-tokens`` per dimension, Schwarz attention at
    every subdomain size and overlap (series ``schwarz-s<size>-o<overlap>``), with overlap also
    in the restricted form (``...-ras``: queries from the parts only; without overlap it is
    the same operator), then :data:`LAYOUT_AGAINST` at equal width."""
    out = []
    for dim in args.dims:
        side = min(_sides(args)[dim], key=lambda n: abs(math.log(n ** dim / args.ratio_tokens)))
        for size in QUICK_LAYOUT_SIZES if args.quick else LAYOUT_SIZES:
            for overlap in LAYOUT_OVERLAPS:
                for restricted in (False, True) if overlap else (False,):
                    p = point(args, "schwarz", dim, side)
                    out.append({**p, "series": f"schwarz-s{size}-o{overlap}"
                                + ("-ras" if restricted else ""), "subdomain_size": size,
                                "overlap": overlap,
                                "options": {**p["options"], "restricted": restricted}})
        out.append(point(args, LAYOUT_AGAINST, dim, side))
    return out


def layout_sweep(args, save) -> list[dict]:
    """Every point of :func:`layout_points`, each in its own process; ``save(points)`` after
    each."""
    points = []
    for p in layout_points(args):
        rec = {k: p[k] for k in ("series", "mixer", "dim", "side", "tokens", "options",
                                 "subdomain_size", "overlap")}
        rec.update(_run(args, p))
        points.append(rec)
        bench.show(line(rec))
        save(points)
    return points


def layout_cost_table(points) -> str:
    """Per dimension and layout: subdomains, time, time over :data:`LAYOUT_AGAINST`'s, memory."""
    rows = []
    for dim in sorted({p["dim"] for p in points}):
        ref = next((p for p in points if p["dim"] == dim and p["series"] == LAYOUT_AGAINST
                    and p["status"] == "ok"), None)
        for p in points:
            if p["dim"] != dim:
                continue
            good = p["status"] == "ok"
            L = p.get("layout", {})
            mine = p["mixer"] == "schwarz"
            rows.append([f"{dim}D, {p['tokens']:,}", p["series"],
                         p["subdomain_size"] if mine else "", p["overlap"] if mine else "",
                         L.get("subdomains", ""),
                         f"{L['min_subdomain']}-{L['max_subdomain']}" if L else "",
                         f"{p['time_s']:.3g}" if good else p["status"].split(":")[0],
                         f"{p['time_s'] / ref['time_s']:.2f}" if good and ref else "",
                         f"{p['peak_mb']:.0f}" if good else ""])
    return bench.markdown_table(["grid", "series", "subdomain size", "overlap", "subdomains",
                                 "sizes with overlap", "CPU s", f"time / {LAYOUT_AGAINST}",
                                 "peak MB"], rows)


def _sides(args) -> dict:
    return QUICK_SIDES if args.quick else GPU_SIDES if args.device != "cpu" else SIDES


def line(rec: dict) -> str:
    head = f"{rec['dim']}D {rec['tokens']:>7d} {rec['series']:17s}"
    if rec["status"] != "ok":
        return f"{head} {rec['status']}"
    lay = f"  layout {rec['layout_s']:.2f} s" if "layout_s" in rec else ""
    return (f"{head} {rec['time_s']:9.3f} s cpu {rec['wall_s']:9.3f} s wall "
            f"{rec['peak_mb']:9.1f} MB{lay}")


# -- fits, ratios, tables, plot -------------------------------------------------------------------

def ok(points, name, dim):
    return sorted((p for p in points if p["series"] == name and p["dim"] == dim
                   and p["status"] == "ok"), key=lambda p: p["tokens"])


def fits(points: list[dict], min_tokens: int) -> dict:
    r"""``{series: {dim: {time, memory, points, tokens}}}``: the slopes of least-squares
    lines :math:`\log y = a + b\log N` over the points with ``tokens >= min_tokens`` (None
    with fewer than 2)."""
    out = {}
    for name in dict.fromkeys(p["series"] for p in points):
        for dim in sorted({p["dim"] for p in points}):
            use = [p for p in ok(points, name, dim) if p["tokens"] >= min_tokens]
            f = {"points": len(use), "tokens": [p["tokens"] for p in use]}
            for key, field in (("time", "time_s"), ("memory", "peak_mb")):
                ys = [p[field] for p in use]
                good = len(use) >= 2 and min(ys) > 0
                f[key] = float(np.polyfit(np.log([p["tokens"] for p in use]), np.log(ys), 1)[0]) \
                    if good else None
            out.setdefault(name, {})[str(dim)] = f
    return out


def ratios(points: list[dict], tokens: int, against: str = "schwarz") -> dict:
    """Per dimension, at the grid nearest to ``tokens`` (in log scale): every series' time
    over ``against``'s (None where either was not measured)."""
    out = {}
    for dim in sorted({p["dim"] for p in points}):
        sizes = sorted({p["tokens"] for p in points if p["dim"] == dim})
        n = min(sizes, key=lambda s: abs(math.log(s / tokens)))
        at = {p["series"]: p for p in points if p["dim"] == dim and p["tokens"] == n}
        ref = at.get(against)
        row = {"tokens": n}
        for name, p in at.items():
            good = ref and ref["status"] == "ok" and p["status"] == "ok"
            row[name] = p["time_s"] / ref["time_s"] if good else None
        out[str(dim)] = row
    return out


def _cell(p, field, fmt):
    if p is None:
        return ""
    if p["status"] == "ok":
        return fmt.format(p[field])
    return "skipped" if p["status"].startswith("skipped") else p["status"].split(":")[0]


def size_table(points, dim, field, fmt) -> str:
    names = list(dict.fromkeys(p["series"] for p in points))
    sizes = sorted({(p["tokens"], p["side"]) for p in points if p["dim"] == dim})
    at = {(p["series"], p["tokens"]): p for p in points if p["dim"] == dim}
    header = ["mixer"] + [f"{s}{'²' if dim == 2 else '³'} ({t:,})" for t, s in sizes]
    return bench.markdown_table(header, [[n] + [_cell(at.get((n, t)), field, fmt)
                                                 for t, _ in sizes] for n in names])


def fit_table(f: dict) -> str:
    dims = sorted({d for v in f.values() for d in v})
    rows = []
    for name, v in f.items():
        row = [name]
        for d in dims:
            e = v.get(d, {})
            row += [("" if e.get(k) is None else f"{e[k]:.2f}") for k in ("time", "memory")]
            row.append(e.get("points", 0))
        rows.append(row)
    header = ["mixer"] + [h for d in dims for h in (f"{d}D time", f"{d}D memory", f"{d}D points")]
    return bench.markdown_table(header, rows)


def ratio_table(r: dict) -> str:
    dims = sorted(r)
    names = list(dict.fromkeys(k for d in dims for k in r[d] if k != "tokens"))
    header = ["time / schwarz"] + [f"{d}D, {r[d]['tokens']:,} tokens" for d in dims]
    return bench.markdown_table(header, [[n] + [("" if r[d].get(n) is None else
                                                 f"{r[d][n]:.2f}") for d in dims]
                                         for n in names])


def layout_table(points) -> str:
    rows = []
    for p in points:
        if p["status"] == "ok" and "layout_s" in p and p["series"] == "schwarz":
            L = p["layout"]
            rows.append([f"{p['dim']}D", f"{p['tokens']:,}", L["subdomains"],
                         f"{L['min_subdomain']}-{L['max_subdomain']}", L["n0"],
                         f"{p['graph_s']:.2f}", f"{p['layout_s']:.2f}"])
    return bench.markdown_table(["grid", "tokens", "subdomains", "subdomain sizes", "n0",
                                 "kNN graph s", "whole build s"], rows)


def plot(points: list[dict], f: dict, path: str, where: str = "CPU") -> None:
    dims = sorted({p["dim"] for p in points})
    names = list(dict.fromkeys(p["series"] for p in points))
    fig, axes = plt.subplots(2, len(dims), figsize=(6 * len(dims), 8.5), squeeze=False)
    for j, dim in enumerate(dims):
        for row, (field, label, key) in enumerate((("time_s", f"forward + backward, {where} s",
                                                    "time"),
                                                   ("peak_mb", "peak memory above baseline, MB",
                                                    "memory"))):
            ax = axes[row, j]
            for name in names:
                pts = [p for p in ok(points, name, dim) if p[field] > 0]
                if not pts:
                    continue
                e = f.get(name, {}).get(str(dim), {}).get(key)
                tag = f" (N^{e:.2f})" if e is not None else ""
                ax.loglog([p["tokens"] for p in pts], [p[field] for p in pts], "o-",
                          ms=4, label=name + tag)
            ax.set_title(f"{dim}D grids: {label}")
            ax.set_xlabel("tokens N")
            ax.set_ylabel(label)
            ax.grid(alpha=0.3, which="both")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
    save_figure(fig, path)


def summary(data: dict) -> dict:
    """Fits and ratios of ``data['points']`` (what the JSON and the report carry)."""
    s = data["settings"]
    return {"fits": fits(data["points"], s["fit_min_tokens"]),
            "ratios": ratios(data["points"], s["ratio_tokens"])}


def _sections(data: dict, png: str, where: str) -> tuple[str, list]:
    """The intro paragraph and the sections of one sweep's JSON (``where``: "CPU" or "GPU")."""
    s, m = data["settings"], data.get("machine", {})
    dims = sorted({p["dim"] for p in data["points"]})
    gpu = s.get("device", "cpu") != "cpu"
    unit = "GPU wall seconds" if gpu else "CPU seconds"
    memory = ("peak allocated GPU memory of the second forward + backward above the allocated "
              "memory before it (torch.cuda.max_memory_allocated), each point in one process"
              if gpu else "peak resident memory of the first forward + backward above the "
              "resident memory before it (VmHWM after a reset, minus VmRSS), each point in its "
              "own forked process")
    intro = (f"**{where}** ({m.get('gpu') or m.get('processor', 'this machine')}): width "
             f"{s['channels']} channels, {s['heads']} heads, batch {s['batch']}, {s['dtype']}"
             f"{' (no TF32)' if gpu else ''}, {s['threads']} thread; FLARE / FLARE++ latents "
             f"and physics slices {s['latents']}; Schwarz: subdomain_size "
             f"{s['subdomain_size']}, overlap {s['overlap']} (the variants: a quarter of that "
             f"size, and without overlap), boxes, pou coarse level. Time: {unit} of one "
             f"forward + backward (median of up to {10 if gpu else 3} repeats after the "
             f"first); memory: {memory}. Budget: a mixer's larger grids are skipped once a "
             f"point took more than {s['budget_s']:.0f} s or {s['memory_cap_gib']:g} GiB. "
             f"Machine: niceness {m.get('nice')}, load average {m.get('loadavg_start', 0):.1f} "
             f"at the start and {m.get('loadavg_end', 0):.1f} at the end (per point in the "
             f"JSON, `loadavg_before`). {m.get('note', '')}")
    if data.get("stamp_note"):  # added to a JSON after its run, where the stamp needs a word
        intro += f"\n\nAbout the stamp: {data['stamp_note']}"
    sections = []
    for dim in dims:
        sections.append((f"{where}, {dim}D: forward + backward, {unit}",
                         size_table(data["points"], dim, "time_s", "{:.3g}")))
        if not gpu:  # on a GPU the two are one
            sections.append((f"{where}, {dim}D: forward + backward, wall seconds",
                             size_table(data["points"], dim, "wall_s", "{:.3g}")))
        sections.append((f"{where}, {dim}D: peak memory above baseline, MB",
                         size_table(data["points"], dim, "peak_mb", "{:.3g}")))
    sections += [
        (f"{where}: fitted exponents (log-log least squares, points with >= "
         f"{s['fit_min_tokens']:,} tokens)", fit_table(data["fits"])),
        (f"{where}: time relative to Schwarz attention near {s['ratio_tokens']:,} tokens",
         ratio_table(data["ratios"])),
        (f"{where}: layout set-up (TokenLayout.build on the CPU, once per mesh; not in the "
         f"times above)", layout_table(data["points"])),
        (f"{where}: plot", f"![time and memory against tokens]({os.path.basename(png)})"),
    ]
    return intro, sections


def report(args, files: dict) -> dict:
    """Tables, fits, ratios and the plot of ``files[STUDY]`` (the CPU sweep) and
    ``files[STUDY + '_gpu']`` (a GPU sweep, where one was run) into ``args.out``/README.md (a
    folder without results gets a README saying so)."""
    found = [(k, where) for k, where in ((STUDY, "CPU"), (f"{STUDY}_gpu", "GPU")) if k in files]
    if not found and f"{STUDY}_layouts" not in files:
        bench.write_readme(args, "Token mixers against the number of tokens", [
            ("Results", f"None yet: `python {args.script}` measures them (about an hour on one "
                        f"core).")], files)
        return {}
    intros, sections, out = [], [], {}
    if f"{STUDY}_layouts" in files:
        d = files[f"{STUDY}_layouts"]
        sections.append((f"CPU: Schwarz attention's layouts near {d['settings']['ratio_tokens']:,} "
                         f"tokens against {LAYOUT_AGAINST} (`--layouts`)",
                         f"Width {d['settings']['channels']}, {d['settings']['heads']} heads, "
                         f"boxes, pou coarse level; the subdomain size asked for and the sizes "
                         f"the boxes have with their overlap layers; `-ras`: the restricted "
                         f"form (queries from each box's own part, keys and values from the "
                         f"box with its overlap). "
                         f"{d['machine'].get('note', '')}\n\n" + layout_cost_table(d["points"])))
    for key, where in found:
        data = {**files[key], **summary(files[key])}
        png = os.path.join(args.out, f"{key}.png")
        plot(data["points"], data["fits"], png, where)
        intro, more = _sections(data, png, where)
        intros.append(intro)
        sections += more
        out[key] = data
    bench.write_readme(args, "Token mixers against the number of tokens", sections, files,
                       "\n\n".join(intros))
    return out[found[0][0]] if found else {}


def main(argv: list[str] | None = None) -> dict:
    ap = bench.parser(STUDY, __doc__, "8²..16² and 4³..6³ tokens, width 16, seconds")
    ap.add_argument("--mixers", nargs="+", default=list(series()), choices=list(series()),
                    help="series to run (default: every registered mixer and the variants)")
    ap.add_argument("--dims", nargs="+", type=int, default=[2, 3], choices=[2, 3])
    ap.add_argument("--channels", type=int, default=None, help="width (64; quick 16)")
    ap.add_argument("--heads", type=int, default=None, help="heads (4; quick 2)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--latents", type=int, default=None,
                    help="FLARE / FLARE++ latents and physics slices (64; quick 8)")
    ap.add_argument("--subdomain-size", type=int, default=None,
                    help="Schwarz tokens per subdomain before the overlap (256; quick 16)")
    ap.add_argument("--overlap", type=int, default=1)
    ap.add_argument("--budget-s", type=float, default=120.0,
                    help="skip a mixer's larger grids once a point took more CPU seconds")
    ap.add_argument("--memory-cap-gib", type=float, default=16.0,
                    help="kill a point over this resident memory; skip the larger grids once "
                         "a point's peak exceeded it")
    ap.add_argument("--timeout-s", type=float, default=1800.0,
                    help="kill a point after this many wall seconds")
    ap.add_argument("--fit-min-tokens", type=int, default=None,
                    help="fit exponents over the points with at least this many tokens "
                         "(16000; quick 0)")
    ap.add_argument("--ratio-tokens", type=int, default=65536)
    ap.add_argument("--max-tokens", type=int, default=None, help="leave out larger grids")
    ap.add_argument("--note", default="", help="recorded with the results (what else ran)")
    ap.add_argument("--layouts", action="store_true",
                    help="only Schwarz attention's subdomain sizes and overlaps near "
                         "--ratio-tokens, beside FLARE (mixer_scaling_layouts.json)")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda / cuda:N: the sweep on a "
                    "GPU (larger grids; results in mixer_scaling_gpu.json)")
    args = bench.parse(ap, argv)
    try:
        training_device(args.device)
    except ValueError as e:
        ap.error(str(e))
    if args.report:
        return report(args, bench.results(args))
    q = args.quick
    for key, full, quick in (("channels", 64, 16), ("heads", 4, 2), ("latents", 64, 8),
                             ("subdomain_size", 256, 16), ("fit_min_tokens", 16000, 0)):
        if getattr(args, key) is None:
            setattr(args, key, quick if q else full)
    torch.set_num_threads(1)
    # float32 means float32 on a GPU too: no TF32 in matrix products or convolutions
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    settings = {k: getattr(args, k) for k in (
        "channels", "heads", "batch", "dtype", "latents", "subdomain_size", "overlap",
        "budget_s", "memory_cap_gib", "timeout_s", "fit_min_tokens", "ratio_tokens", "device")}
    settings.update(threads=1, sides={str(d): _sides(args)[d] for d in args.dims},
                    series={k: v for k, v in series().items() if k in args.mixers})
    machine = {"nice": os.nice(0), "cores": os.cpu_count(), "loadavg_start": os.getloadavg()[0],
               "note": args.note}
    name = STUDY if args.device == "cpu" else f"{STUDY}_gpu"
    if args.layouts:
        name = f"{STUDY}_layouts" if args.device == "cpu" else f"{STUDY}_gpu_layouts"
    if args.device != "cpu":
        machine["gpu"] = torch.cuda.get_device_name(torch.device(args.device))
    data = {"settings": settings, "machine": machine, "points": []}

    def save(points):
        data["points"] = points
        data["machine"]["loadavg_end"] = os.getloadavg()[0]
        data.update(summary(data))
        return bench.write(args, data, name)

    warm_up(args)
    if args.layouts:
        path = save(layout_sweep(args, save))
        bench.show(layout_cost_table(data["points"]))
        bench.show(f"wrote {path}")
        return data
    path = save(sweep(args, save))
    plot(data["points"], data["fits"], os.path.join(args.out, f"{name}.png"),
         "CPU" if args.device == "cpu" else "GPU")
    bench.show(fit_table(data["fits"]))
    bench.show(ratio_table(data["ratios"]))
    bench.show(f"wrote {path}")
    return data


if __name__ == "__main__":
    main()
