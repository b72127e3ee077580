"""Native plugin (-pc_type ddlearn) against the Python PC: apply time and CG iterations, same run.

    python benchmarks/native.py [--n 511] [--N 64] [--ranks 1,2,4] [--applies 50] [--out DIR]
    python benchmarks/native.py --report     (README.md: the table from the JSON)

Exports a learned preconditioner for 2D Poisson n x n with N subdomains (away from its classical
start, so that every learned piece is exercised), then launches with mpiexec (a) this script as a
worker that runs CG on b = 1 with the Python PC (`ddlearn.pc.SchwarzAttentionPC`, mode learned)
and reads its PCApply time from PETSc's log (also timing a tight loop of applies), and (b) the plain C program `build/c_client` with the plugin and `-log_view`, whose
PCApply line gives the native time per apply. Writes ``native.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

from ddlearn.harness import bench

BUILD = os.path.join(bench.ROOT, "build")


def _model(n, N):
    import numpy as np

    from ddlearn.decomposition import Decomposition
    from ddlearn.learned.coarse.basis import basis_correction_model, perturb_
    from ddlearn.decomposition.problems import make_problem

    p = make_problem("poisson2d", n)
    S = basis_correction_model(Decomposition(p.grid, N, 1), 8, seed=2)
    perturb_(S, 0.05, 4)
    return p, S, np.linspace(0.0, 0.5, N)


def worker(args):
    """Time the Python PC and run CG with it (under mpiexec)."""
    import time

    import numpy as np
    import petsc4py
    petsc4py.init([])
    from mpi4py import MPI
    from petsc4py import PETSc

    from ddlearn.learned.operators.distributed import DistributedSchwarzAttention
    from ddlearn.learned.coarse.basis import learned_meta
    from ddlearn.learned.coarse.learned_insitu import LearnedInsitu
    from ddlearn.pc import TwoLevelSchwarzPC
    from ddlearn.classical.krylov import solve

    PETSc.Log.begin()
    p, S, omega = _model(args.n, args.N)
    d = DistributedSchwarzAttention(S)
    A = d.layout.matrix(p)
    d.meta.update(learned_meta("hats", omega, d.layout, A))
    b = d.layout.from_natural(np.ones(p.n))
    pc = PETSc.PC().create(comm=PETSc.COMM_WORLD)
    pc.setOperators(A, A)
    pc.setType("python")
    pc.setPythonContext(TwoLevelSchwarzPC(LearnedInsitu(d)))
    pc.setUp()
    y = b.duplicate()
    PETSc.COMM_WORLD.barrier()
    t = time.perf_counter()
    for _ in range(args.applies):
        pc.apply(b, y)
    dt = MPI.COMM_WORLD.allreduce(time.perf_counter() - t, op=MPI.MAX) / args.applies
    event = PETSc.Log.Event("PCApply")
    before = event.getPerfInfo()
    res = solve(A, b, lambda q: (q.setType("python"), q.setPythonContext(TwoLevelSchwarzPC(LearnedInsitu(d)))))
    after = event.getPerfInfo()
    # PCApply inside CG, as PETSc's log counts it for the native run (slowest rank)
    in_cg = MPI.COMM_WORLD.allreduce(after["time"] - before["time"], op=MPI.MAX) / \
        (after["count"] - before["count"])
    if PETSc.COMM_WORLD.getRank() == 0:
        print(json.dumps({"python_apply_s": in_cg, "python_apply_loop_s": dt,
                          "python_iterations": res.iterations, "python_rnorm_true": res.rnorm_true}))
    for o in (pc, y, b, A):
        o.destroy()
    d.destroy()


def main(argv=None):
    ap = bench.parser("native", __doc__, "127², N = 16, ranks 1 and 2, 10 applies")
    ap.add_argument("--n", type=int, default=None, help="grid points per direction (511)")
    ap.add_argument("--N", type=int, default=None, help="subdomains (64)")
    ap.add_argument("--ranks", default=None, help="comma list of rank counts (1,2,4)")
    ap.add_argument("--applies", type=int, default=None, help="timed applies (50)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = bench.parse(ap, argv)
    if args.report:
        files = bench.results(args)
        bench.write_readme(args, "Native plugin against the Python PC",
                           [("Table", report(files["native"]))], files)
        return files["native"]
    q = args.quick
    args.n = args.n or (127 if q else 511)
    args.N = args.N or (16 if q else 64)
    args.ranks = args.ranks or ("1,2" if q else "1,2,4")
    args.applies = args.applies or (10 if q else 50)
    if args.worker:
        return worker(args)
    from ddlearn.pc.export import export
    from ddlearn.learned.coarse.basis import LearnedBasis

    program, lib = os.path.join(BUILD, "c_client"), os.path.join(BUILD, "libddlearn_petsc.so")
    if not (os.path.exists(program) and os.path.exists(lib)):
        raise SystemExit("the native plugin is not built: run scripts/setup.sh")
    p, S, omega = _model(args.n, args.N)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model, log = os.path.join(tmp, "model.petsc"), os.path.join(tmp, "log.txt")
        export(model, LearnedBasis.serial(S, p, omega=omega))
        for ranks in map(int, args.ranks.split(",")):
            py = subprocess.run(["mpiexec", "-n", str(ranks), sys.executable, __file__, "--worker",
                                 "--n", str(args.n), "--N", str(args.N), "--applies",
                                 str(args.applies)], capture_output=True, text=True, check=True)
            python = json.loads(py.stdout.strip().splitlines()[-1])
            nat = subprocess.run(["mpiexec", "-n", str(ranks), program, "-n", str(args.n),
                                  "-ksp_type", "cg", "-ksp_rtol", "1e-8",
                                  "-ksp_norm_type", "unpreconditioned",
                                  "-dll_append", lib, "-pc_type", "ddlearn",
                                  "-ddlearn_model", model, "-log_view", f":{log}"],
                                 capture_output=True, text=True, check=True)
            fields = next(ln for ln in open(log) if ln.startswith("PCApply ")).split()
            count, tmax = int(fields[1]), float(fields[3])
            its = int(re.search(r"iterations (\d+)", nat.stdout).group(1))
            row = {"ranks": ranks, **python, "native_apply_s": tmax / count,
                   "native_applies": count, "native_iterations": its}
            row["ratio_native_over_python"] = row["native_apply_s"] / row["python_apply_s"]
            rows.append(row)
    data = {"n": p.n, "grid": args.n, "N": args.N, "cores": os.cpu_count(), "rows": rows}
    bench.write(args, data)
    print(report(data))
    return data


def report(data) -> str:
    """The README's table from a JSON this benchmark wrote."""
    return bench.markdown_table(
        ["grid", "N", "ranks", "Python PC apply ms", "native apply ms", "native/Python",
         "CG its Python", "CG its native"],
        [[f"{data['grid']}²", data["N"], r["ranks"], f"{1e3 * r['python_apply_s']:.2f}",
          f"{1e3 * r['native_apply_s']:.2f}", f"{r['ratio_native_over_python']:.2f}",
          r["python_iterations"], r["native_iterations"]] for r in data["rows"]])


if __name__ == "__main__":
    main()
