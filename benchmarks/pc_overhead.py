"""Set-up and apply time of ``ddlearn.pc.TwoLevelSchwarzPC`` selected purely from options, so
that the same script measures any version of the package (``PYTHONPATH`` pointing at another
checkout) on the main job's matrices: 2D Poisson and channels 1e6, 255², N = 64, natural
ordering with coordinates, coarse spaces hats, nicolaides, gdsw, spectral (k = 8) and learned::

    mpiexec -n 4 python benchmarks/pc_overhead.py --label after --out FILE
    python benchmarks/pc_overhead.py --compare BEFORE.json AFTER.json

Each figure is the best of ``--repeat`` set-ups and of ``--applies`` applications; compare two
versions in runs taken one after the other on the same machine, as ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import petsc4py

petsc4py.init([])
from mpi4py import MPI  # noqa: E402
from petsc4py import PETSc  # noqa: E402

import numpy as np  # noqa: E402

from ddlearn.decomposition.problems import make_problem  # noqa: E402
from ddlearn.pc import set_coordinates  # noqa: E402

COMM = MPI.COMM_WORLD
COARSE = ("hats", "nicolaides", "gdsw", "spectral", "learned")


def natural_matrix(problem) -> PETSc.Mat:
    """The problem's matrix in natural ordering, PETSc's rows, coordinates attached (only what
    every version of the package provides)."""
    A = PETSc.Mat().createAIJ((problem.n, problem.n), comm=PETSc.COMM_WORLD)
    A.setUp()
    lo, hi = A.getOwnershipRange()
    rows = problem.rows(np.arange(lo, hi))
    A.setPreallocationCSR((rows.indptr, rows.indices, rows.data))
    A.assemble()
    set_coordinates(A, problem.coordinates()[lo:hi])
    return A


def _wall(fn) -> float:
    COMM.Barrier()
    t = time.perf_counter()
    fn()
    return COMM.allreduce(time.perf_counter() - t, op=MPI.MAX)


def measure(A, coarse: str, N: int, repeat: int, applies: int) -> dict:
    opts = PETSc.Options()
    prefix = f"ov_{coarse}_"
    values = {"pc_type": "python", "pc_python_type": "ddlearn.pc.TwoLevelSchwarzPC",
              "ddlearn_coarse_space": coarse, "ddlearn_subdomains": N}
    for k, v in values.items():
        opts.setValue(prefix + k, v)
    setups, apply = [], float("inf")
    x, y = A.createVecs()
    x.setRandom()
    for _ in range(repeat):
        pc = PETSc.PC().create(comm=A.getComm())
        pc.setOptionsPrefix(prefix)
        pc.setOperators(A, A)
        pc.setFromOptions()
        setups.append(_wall(pc.setUp))
        pc.apply(x, y)  # PCASM factors its blocks at the first apply in some versions
        apply = min(apply, _wall(lambda: [pc.apply(x, y) for _ in range(applies)]) / applies)
        pc.destroy()
    for k in values:
        opts.delValue(prefix + k)
    x.destroy(), y.destroy()
    return {"coarse": coarse, "setup_s": min(setups), "apply_s": apply}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--label", default="")
    ap.add_argument("--out")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--applies", type=int, default=20)
    ap.add_argument("--n", type=int, default=255)
    ap.add_argument("--N", type=int, default=64)
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = ap.parse_args(argv)
    if args.compare:
        print(compare(*[json.load(open(f)) for f in args.compare]))
        return None
    rows = []
    for name, kw in (("poisson2d", {}), ("channels", {"contrast": 1e6})):
        A = natural_matrix(make_problem(name, args.n, **kw))
        for coarse in COARSE:
            rows.append({"problem": name, **measure(A, coarse, args.N, args.repeat,
                                                      args.applies)})
        A.destroy()
    data = {"label": args.label, "ranks": COMM.Get_size(), "cores": os.cpu_count(), "n": args.n,
            "N": args.N, "rows": rows}
    if COMM.rank == 0:
        print(json.dumps(data, indent=1))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(data, f, indent=1)
    return data


def compare(before, after) -> str:
    out = [f"| problem | coarse | set-up {before['label']} s | {after['label']} s | ratio | "
           f"apply {before['label']} ms | {after['label']} ms | ratio |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for b, a in zip(before["rows"], after["rows"]):
        out.append(f"| {b['problem']} | {b['coarse']} | {b['setup_s']:.3f} | {a['setup_s']:.3f} | "
                   f"{a['setup_s'] / b['setup_s']:.2f} | {b['apply_s'] * 1e3:.2f} | "
                   f"{a['apply_s'] * 1e3:.2f} | {a['apply_s'] / b['apply_s']:.2f} |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
