"""Distributed Schwarz attention: communication per apply, apply and training-step times on
P = 1, 2, 4, 8 ranks, PETSc one-level ASM apply as reference, and distributed training against
serial training.

    python benchmarks/distributed.py [--ranks 1 2 4 8] [--out DIR]
    python benchmarks/distributed.py --report     (README.md from the JSON)

The driver launches ``mpiexec -n P python benchmarks/distributed.py --worker`` for each P and
merges their JSON. On a 2-core machine P = 4 and 8 oversubscribe the cores: their times measure
oversubscription as much as scaling.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from ddlearn.harness import bench


def worker(out: str) -> None:
    import torch
    from mpi4py import MPI
    from petsc4py import PETSc

    from ddlearn.learned.operators.attention import SchwarzAttention
    from ddlearn.learned.operators.data import make_splits
    from ddlearn.learned.operators.distributed import DistributedSchwarzAttention, PetscExactSolver
    from ddlearn.decomposition.layout import Layout
    from ddlearn.decomposition.problems import Poisson1D
    from ddlearn.learned.operators.training import train
    from ddlearn.nn.trainer import TrainConfig
    from ddlearn.classical.overlapping import configure_asm, exact_local_solves

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    P, rank = comm.Get_size(), comm.Get_rank()
    PETSc.Log.begin()
    scatter_event = PETSc.Log.Event("VecScatterBegin")
    res = {"ranks": P, "bytes": [], "timing": None, "training": None}

    # 1. Bytes per apply against n (16x), N and overlap.
    for n in (1023, 4095, 16383):
        for N in (8, 16):
            if N < P:
                continue
            for overlap in (1, 2):
                d = DistributedSchwarzAttention(SchwarzAttention((n,), N, overlap, 4))
                f = torch.randn(1, d.nlocal, dtype=torch.float64)
                stage = PETSc.Log.Stage(f"bytes n{n} N{N} o{overlap}")
                stage.push()
                with torch.no_grad():
                    d(f)
                stage.pop()
                # PETSc logs bytes sent plus bytes received per rank: half the sum is the
                # bytes sent by all ranks.
                logged = comm.allreduce(scatter_event.getPerfInfo(stage)["messageLength"], op=MPI.SUM) / 2
                res["bytes"].append({"n": n, "N": N, "overlap": overlap, "n0": N - 1,
                                     "bytes_per_apply": d.bytes_per_apply(),
                                     "petsc_logged_bytes": logged})
                d.destroy()

    # 2. Times at a fixed problem: apply of a batch, one training step, PETSc ASM applies.
    n, N, r, B, reps = 16383, 16, 8, 16, 20
    serial = SchwarzAttention((n,), N, 2, r, seed=0)
    d = DistributedSchwarzAttention(serial)
    F = torch.randn(B, d.nlocal, dtype=torch.float64)
    opt = torch.optim.Adam(d.parameters(), lr=1e-3)

    def timed(fn):
        fn()
        comm.Barrier()
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        comm.Barrier()
        return comm.allreduce((time.perf_counter() - t) / reps, op=MPI.MAX)

    def apply():
        with torch.no_grad():
            d(F)

    def step():
        opt.zero_grad()
        from ddlearn.learned.operators.distributed import allreduce_sum
        allreduce_sum((d(F) ** 2).sum()[None], comm).sum().backward()
        opt.step()

    A = Layout(serial.dec).matrix(Poisson1D(n))
    pc = PETSc.PC().create(comm=PETSc.COMM_WORLD)
    pc.setOperators(A, A)
    configure_asm(pc, d.layout)
    pc.setFromOptions()
    pc.setUp()
    exact_local_solves(pc)
    x, y = A.createVecs()
    x.setRandom()

    def asm():
        for _ in range(B):
            pc.apply(x, y)

    res["timing"] = {"n": n, "N": N, "r_local": r, "batch": B,
                     "apply_s": timed(apply), "train_step_s": timed(step), "asm_apply_s": timed(asm)}
    for o in (pc, x, y, A):
        o.destroy()
    d.destroy()

    # 3. Training on P ranks against serial: same data, same steps.
    p = Poisson1D(1023)
    model = SchwarzAttention((1023,), 16, 2, 4, seed=0)
    d = DistributedSchwarzAttention(model)
    A = Layout(model.dec).matrix(p)
    solver = PetscExactSolver(A)
    splits = make_splits(p, 512, 64, 128, modes=256, rows=d.layout.local_natural(), solve=solver)
    cfg = TrainConfig(steps=600, batch_size=32, lr=3e-3, lr_final=3e-5, eval_every=20,
                      progress=False)
    t = train(d, splits, cfg, comm=comm)
    res["training"] = {"n": 1023, "N": 16, "r_local": 4, "steps": t.steps, "val_error": t.history.val_error,
                       "step": t.history.step, "final_test": t.final_test, "seconds": t.seconds,
                       "steps_to_1e-2": t.history.first_below(1e-2, "val_error")[0]}
    # 4. Parity with the serial module: k steps, parameters and loss curve.
    k = 50
    cfg_k = TrainConfig(steps=k, batch_size=32, lr=3e-3, eval_every=5, progress=False)
    serial = SchwarzAttention((1023,), 16, 2, 4, seed=1)
    d = DistributedSchwarzAttention(serial)
    dist = train(d, make_splits(p, 256, 32, 32, modes=256, rows=d.layout.local_natural(),
                                solve=solver), cfg_k, comm=comm)
    gathered = d.to_serial()
    if rank == 0:
        ser = train(serial, make_splits(p, 256, 32, 32, modes=256), cfg_k)
        loss_diff = float(np.max(np.abs(np.array(dist.history.train_loss) - ser.history.train_loss)
                                 / np.array(ser.history.train_loss)))
        param_diff = max(float((a - b).abs().max() / b.abs().max())
                         for a, b in zip(gathered.parameters(), serial.parameters()))
        res["parity"] = {"steps": k, "max_rel_loss_diff": loss_diff, "max_rel_param_diff": param_diff}
    solver.destroy(), A.destroy(), d.destroy()
    if rank == 0:
        with open(out, "w") as f:
            json.dump(res, f)


def report(data) -> str:
    runs = {r["ranks"]: r for r in data["runs"]}
    lines = ["Bytes sent per apply (one right-hand side, r_l = 4, interface hats):", "",
             "| n | N | overlap | P | bytes (counter) | bytes (PETSc log) |",
             "|---:|---:|---:|---:|---:|---:|"]
    for P, r in runs.items():
        for b in r["bytes"]:
            lines.append(f"| {b['n']} | {b['N']} | {b['overlap']} | {P} | {b['bytes_per_apply']} | "
                         f"{b['petsc_logged_bytes']:.0f} |")
    t0 = runs[min(runs)]
    lines += ["", f"Times at n = {t0['timing']['n']}, N = {t0['timing']['N']}, r_l = "
              f"{t0['timing']['r_local']}, batch of {t0['timing']['batch']} right-hand sides "
              f"(slowest rank, mean of 20):", "",
              "| P | apply ms | training step ms | PETSc ASM (exact LU), B applies ms | apply / ASM |",
              "|---:|---:|---:|---:|---:|"]
    for P, r in runs.items():
        t = r["timing"]
        lines.append(f"| {P} | {1e3 * t['apply_s']:.2f} | {1e3 * t['train_step_s']:.2f} | "
                     f"{1e3 * t['asm_apply_s']:.2f} | {t['apply_s'] / t['asm_apply_s']:.2f} |")
    lines += ["", "Training (n = 1023, N = 16, r_l = 4, 600 steps, same data and seed):", "",
              "| P | final validation error | final test error | steps to 1e-2 (val) | max rel. diff of val curve vs P = 1 | seconds |",
              "|---:|---:|---:|---:|---:|---:|"]
    ref = np.array(runs[min(runs)]["training"]["val_error"])
    for P, r in runs.items():
        tr = r["training"]
        diff = np.max(np.abs(np.array(tr["val_error"]) - ref) / ref)
        lines.append(f"| {P} | {tr['val_error'][-1]:.3e} | {tr['final_test']:.3e} | "
                     f"{tr['steps_to_1e-2']} | {diff:.1e} | {tr['seconds']:.1f} |")
    lines += ["", "Parity with the serial module after "
              f"{runs[min(runs)]['parity']['steps']} training steps (n = 1023, N = 16, r_l = 4):", "",
              "| P | max rel. loss-curve difference | max rel. parameter difference |",
              "|---:|---:|---:|"]
    for P, r in runs.items():
        lines.append(f"| {P} | {r['parity']['max_rel_loss_diff']:.1e} | "
                     f"{r['parity']['max_rel_param_diff']:.1e} |")
    return "\n".join(lines)


def main(argv=None):
    ap = bench.parser("distributed", __doc__, "P = 1 and 2 only")
    ap.add_argument("--ranks", type=int, nargs="+", default=None, help="P (default 1 2 4 8)")
    ap.add_argument("--worker", metavar="OUT", help=argparse.SUPPRESS)
    args = bench.parse(ap, argv)
    if args.worker:
        return worker(args.worker)
    if args.report:
        files = bench.results(args)
        bench.write_readme(args, "Distributed Schwarz attention",
                           [("Tables", report(files["distributed"]))], files)
        return files["distributed"]
    args.ranks = args.ranks or ([1, 2] if args.quick else [1, 2, 4, 8])
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for P in args.ranks:
            out = os.path.join(tmp, f"P{P}.json")
            print(f"running on {P} ranks ...", flush=True)
            subprocess.run(["mpiexec", "-n", str(P), sys.executable, "-m", "mpi4py", __file__,
                            "--worker", out], check=True)
            with open(out) as f:
                runs.append(json.load(f))
    data = {"cores": os.cpu_count(), "runs": runs}
    path = bench.write(args, data)
    print(report(data))
    print(f"wrote {path}")
    return data


if __name__ == "__main__":
    main()
