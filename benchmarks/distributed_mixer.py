r"""Schwarz attention distributed over ranks: the time of a training step and the bytes a rank
sends per forward.

    mpiexec -n P python benchmarks/distributed_mixer.py [--side 128] [--width 64] [--batch 4]
             [--sub 16] [--steps 10] [--quick] [--out DIR]       (once per P: 1, 2, 4)
    python benchmarks/distributed_mixer.py --report    (README.md: the tables from the JSON)

Training step (:class:`~ddlearn.nn.distributed.DistributedSchwarzMixer`, float32, one thread
per rank): every rank holds the tokens of its subdomains (balanced contiguous blocks of
subdomain numbers) of each of the ``batch`` samples; forward, backward of the mean squared
error against a fixed target, :func:`~ddlearn.nn.comm.allreduce_gradients`, AdamW step.
Tokens: a ``side x side`` grid, box subdomains of ``sub x sub`` tokens, overlap 1, ``pou``
coarse basis (``n0`` = subdomains), softmax attention, 4 heads. Seconds per step on the slowest
rank, mean of ``--steps`` steps after two warm-up steps, and its phases (slowest rank each); on
one rank also the serial :class:`~ddlearn.nn.schwarz.SchwarzMixer`'s step. Ranks beyond the
machine's cores oversubscribe it.

Bytes per forward (the mixer's ``traffic``, counted as sent): ghost rows, reverse-exchange rows
and the coarse allreduce payload (the ``[batch, n0, 3 width]`` array each rank contributes; the
allreduce algorithm's internal messages are not counted), the largest over the ranks, at
``sub x sub`` tokens per subdomain and 2², 4², 8² subdomains (32², 64², 128² tokens at
``sub`` = 16) on this run's ranks. And, from :func:`~ddlearn.nn.distributed.exchange_plan`
(no ranks needed), the weak-scaling series at one subdomain per rank, P = 4, 16, 64.

Each run writes ``distributed_mixer_P<P>.json`` (its own stamp) and leaves the other rank
counts' files.
"""
from __future__ import annotations

import os

import numpy as np
import petsc4py

petsc4py.init([])
import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402

from ddlearn.decomposition.timing import Timer  # noqa: E402
from ddlearn.harness import bench  # noqa: E402
from ddlearn.nn.comm import allreduce_gradients, broadcast_parameters  # noqa: E402
from ddlearn.nn.distributed import DistributedSchwarzMixer, exchange_plan  # noqa: E402
from ddlearn.nn.layout import TokenLayout  # noqa: E402
from ddlearn.nn.schwarz import SchwarzMixer  # noqa: E402

COMM = MPI.COMM_WORLD
PHASES = ("forward", "backward", "allreduce_gradients", "adamw")


def grid(side: int) -> np.ndarray:
    X, Y = np.meshgrid(np.arange(side) / side, np.arange(side) / side, indexing="ij")
    return np.stack([X.ravel(), Y.ravel()], axis=1)


def layout_of(side: int, sub: int, overlap: int = 1) -> TokenLayout:
    return TokenLayout.build(grid(side), subdomains=(side // sub) ** 2, overlap=overlap)


def data(side: int, batch: int, width: int):
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(batch, side * side, width, generator=gen),
            torch.randn(batch, side * side, width, generator=gen))


def train_step_time(args) -> dict:
    """Seconds per training step of the distributed mixer (slowest rank) and its phases."""
    layout = layout_of(args.side, args.sub)
    torch.manual_seed(0)
    mixer = DistributedSchwarzMixer(args.width, 4, "softmax", layout=layout)
    broadcast_parameters(mixer)
    opt = torch.optim.AdamW(mixer.parameters(), lr=1e-3)
    x, target = (mixer.scatter(z) for z in data(args.side, args.batch, args.width))
    count = args.batch * layout.tokens * args.width
    timer = Timer(*PHASES)

    def step(timed):
        t = Timer.start()
        opt.zero_grad()
        y = mixer(x)
        loss = ((y - target) ** 2).sum() / count
        if timed:
            timer.add("forward", t)
        t = Timer.start()
        loss.backward()
        if timed:
            timer.add("backward", t)
        t = Timer.start()
        allreduce_gradients(mixer, COMM)
        if timed:
            timer.add("allreduce_gradients", t)
        t = Timer.start()
        opt.step()
        if timed:
            timer.add("adamw", t)

    for _ in range(2):
        step(False)
    total = bench.wall(lambda: [step(True) for _ in range(args.steps)])
    phases = {k: v / args.steps for k, v in timer.slowest(COMM).items()}
    rec = {"ranks": COMM.size, "cores": os.cpu_count(), "tokens": layout.tokens,
           "subdomains": layout.N,
           "tokens_per_rank_max": COMM.allreduce(len(mixer.owned), op=MPI.MAX),
           "width": args.width, "batch": args.batch, "step_s": total / args.steps,
           "phases_s": phases, "bytes_per_forward_max": COMM.allreduce(mixer.traffic["total"],
                                                                       op=MPI.MAX)}
    if COMM.size == 1:  # the serial mixer, same parameters and step
        serial = SchwarzMixer(args.width, 4, "softmax", layout=layout)
        serial.load_state_dict(mixer.state_dict())
        opt = torch.optim.AdamW(serial.parameters(), lr=1e-3)

        def serial_step():
            opt.zero_grad()
            (((serial(x) - target) ** 2).sum() / count).backward()
            opt.step()

        for _ in range(2):
            serial_step()
        rec["serial_step_s"] = bench.wall(
            lambda: [serial_step() for _ in range(args.steps)]) / args.steps
    return rec


def bytes_series(args) -> list[dict]:
    """Bytes a rank sends per forward at ``sub x sub`` tokens per subdomain, on this run's
    ranks (counted), for each side of ``args.sides`` with at least one subdomain per rank."""
    rows = []
    for side in args.sides:
        layout = layout_of(side, args.sub)
        if layout.N < COMM.size:
            continue
        mixer = DistributedSchwarzMixer(args.width, 4, "softmax", layout=layout)
        x = mixer.scatter(data(side, args.batch, args.width)[0])
        with torch.no_grad():
            mixer(x)
        t = mixer.traffic
        per_sub = t["ghost"] / len(mixer.plan["subdomains"])
        rows.append({"ranks": COMM.size, "tokens": layout.tokens, "side": side,
                     "subdomains": layout.N, "n0": layout.n0,
                     "subdomains_per_rank_max": COMM.allreduce(
                         len(mixer.plan["subdomains"]), op=MPI.MAX),
                     **{f"{k}_max": COMM.allreduce(t[k], op=MPI.MAX) for k in t},
                     "ghost_per_subdomain_max": COMM.allreduce(per_sub, op=MPI.MAX)})
    return rows


def weak_plan(args) -> list[dict]:
    """Ghost rows and bytes per rank from the plan, one ``sub x sub`` subdomain per rank,
    ``P`` ranks (a square), batch x width float32 numbers per row."""
    rows = []
    for P in args.weak:
        k = int(round(np.sqrt(P)))
        layout = layout_of(k * args.sub, args.sub)
        plans = [exchange_plan(layout, P, r) for r in range(P)]
        ghost = max(len(p["ghosts"]) for p in plans)
        sent = max(sum(len(v) for v in p["send"].values()) for p in plans)
        row_bytes = args.batch * args.width * 4
        rows.append({"ranks": P, "tokens": layout.tokens, "subdomains": layout.N,
                     "ghost_rows_max": ghost, "ghost_bytes_max": sent * row_bytes,
                     "reverse_bytes_max": ghost * row_bytes,
                     "allreduce_bytes": args.batch * layout.n0 * 3 * args.width * 4})
    return rows


def _kb(b) -> str:
    return f"{b / 1024:,.1f}"


def tables(files: dict) -> list[tuple[str, str]]:
    runs = sorted((f for f in files.values() if "step" in f), key=lambda f: f["step"]["ranks"])
    if not runs:
        return []
    base = next((f["step"]["step_s"] for f in runs if f["step"]["ranks"] == 1), None)
    s0 = runs[0]["step"]
    timing = bench.markdown_table(
        ["P", "tokens per rank (max)", "step s", "speed-up", "forward s", "backward s",
         "grad allreduce s", "AdamW s", "KiB sent per forward (max rank)"],
        [[f["step"]["ranks"], f["step"]["tokens_per_rank_max"], f"{f['step']['step_s']:.3f}",
          f"{base / f['step']['step_s']:.2f}" if base else "–",
          *(f"{f['step']['phases_s'][k]:.3f}" for k in PHASES),
          _kb(f["step"]["bytes_per_forward_max"])] for f in runs])
    serial = [f["step"]["serial_step_s"] for f in runs if "serial_step_s" in f["step"]]
    note = (f"\n\nThe serial `SchwarzMixer`, same step on one rank: {serial[0]:.3f} s."
            if serial else "")
    note += ("\n\nEach P is its own run (its JSON's stamp); on a machine shared with other "
             "jobs the seconds move with its load between runs. The forward and backward are "
             "dominated by the batched softmax attention of the subdomains; the bytes sent "
             "per forward are exact.")
    cores = {f["step"]["cores"] for f in runs}
    head = (f"{s0['tokens']} tokens ({s0['subdomains']} subdomains), width {s0['width']}, "
            f"batch {s0['batch']}, float32; seconds per step on the slowest rank, "
            f"{'/'.join(map(str, sorted(cores)))} cores")
    series = bench.markdown_table(
        ["P", "tokens", "subdomains", "per rank (max)", "ghost KiB", "reverse KiB",
         "allreduce KiB", "total KiB", "ghost KiB per owned subdomain"],
        [[r["ranks"], f"{r['side']}²", r["subdomains"], r["subdomains_per_rank_max"],
          _kb(r["ghost_max"]), _kb(r["reverse_max"]), _kb(r["allreduce_max"]),
          _kb(r["total_max"]), _kb(r["ghost_per_subdomain_max"])]
         for f in runs for r in f["bytes"]])
    weak = runs[-1]["weak_plan"]
    plan = bench.markdown_table(
        ["P", "tokens", "ghost rows (max rank)", "ghost KiB", "reverse KiB", "allreduce KiB"],
        [[r["ranks"], r["tokens"], r["ghost_rows_max"], _kb(r["ghost_bytes_max"]),
          _kb(r["reverse_bytes_max"]), _kb(r["allreduce_bytes"])] for r in weak])
    return [
        (f"Training step, {head}", timing + note),
        ("Bytes sent per forward, largest rank, fixed subdomain size (counted)",
         series + "\n\nColumns are maxima over the ranks, each on its own. At a fixed subdomain "
         "size the ghost and reverse bytes of a rank follow the boundary of its subdomains "
         "towards other ranks, not the total tokens; with more subdomains per rank (a bigger "
         "region per rank) they grow with that region's boundary, and the coarse allreduce "
         "payload grows with n0 (= subdomains)."),
        ("Weak scaling from the plan: one subdomain per rank (no ranks run)",
         plan + "\n\nGhost and reverse bytes per rank stop growing once a rank has neighbours "
         "on all four sides (P >= 9): the invariant that holds is *bytes per rank at fixed "
         "tokens per rank and fixed subdomain size*. The coarse allreduce payload is "
         "batch x n0 x 3 width numbers and grows with the subdomains (n0 = P here)."),
    ]


def main(argv: list[str] | None = None) -> dict:
    ap = bench.parser("distributed_mixer", __doc__, "16² tokens, width 8, 2 steps")
    ap.add_argument("--side", type=int, default=None, help="grid side (128)")
    ap.add_argument("--sub", type=int, default=None, help="tokens per subdomain side (16)")
    ap.add_argument("--width", type=int, default=None, help="channels (64)")
    ap.add_argument("--batch", type=int, default=None, help="samples (4)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps (10)")
    ap.add_argument("--sides", type=int, nargs="+", default=None,
                    help="grid sides of the bytes series (32 64 128)")
    ap.add_argument("--weak", type=int, nargs="+", default=None,
                    help="rank counts of the planned weak-scaling series (4 16 64)")
    args = bench.parse(ap, argv)
    if args.report:
        files = bench.results(args)
        bench.write_readme(args, "Distributed Schwarz attention", tables(files), files)
        return files
    quick = args.quick
    args.side = args.side or (16 if quick else 128)
    args.sub = args.sub or (8 if quick else 16)
    args.width = args.width or (8 if quick else 64)
    args.batch = args.batch or (2 if quick else 4)
    args.steps = args.steps or (2 if quick else 10)
    args.sides = args.sides or ([16, 32] if quick else [32, 64, 128])
    args.weak = args.weak or ([4, 16] if quick else [4, 16, 64])
    torch.set_num_threads(1)
    out = {"step": train_step_time(args), "bytes": bytes_series(args)}
    out["weak_plan"] = weak_plan(args) if COMM.rank == 0 else None
    out["weak_plan"] = COMM.bcast(out["weak_plan"])
    path = bench.write(args, out, f"distributed_mixer_P{COMM.size}")
    for heading, body in tables({"run": out}):
        bench.show(f"## {heading}\n\n{body}\n")
    bench.show(f"wrote {path}")
    return out


if __name__ == "__main__":
    main()
