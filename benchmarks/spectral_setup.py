"""Set-up and apply cost of the spectral coarse space, SLEPc against scipy, beside the hats.

    mpiexec -n 4 python benchmarks/spectral_setup.py [--quick] [--out DIR]
    python benchmarks/spectral_setup.py --report     (README.md: the table from the JSON)

Channels 255² (contrast 1e6), natural ordering with coordinates, N = 16, 64, 256, overlap 1;
``ddlearn.pc.TwoLevelSchwarzPC`` with hats, and hats + spectral k = 8 with each eigensolver.
Per configuration: the set-up split (partition, coarse basis = eigensolves, local LU, coarse
matrix and its factorisation) and the time per apply of the one-level and the coarse part
(mean of 20, slowest rank). Writes ``spectral_setup.json``.
"""
from __future__ import annotations

import json
import os
import time

import petsc4py

petsc4py.init([])
from mpi4py import MPI  # noqa: E402
from petsc4py import PETSc  # noqa: E402

from ddlearn.classical.coarse.hats import Hats  # noqa: E402
from ddlearn.classical.coarse.spectral import Spectral  # noqa: E402
from ddlearn.decomposition.problems import make_problem  # noqa: E402
from ddlearn.harness import bench  # noqa: E402
from ddlearn.harness.systems import natural_matrix  # noqa: E402
from ddlearn.pc import TwoLevelSchwarzPC  # noqa: E402

COMM = MPI.COMM_WORLD
CONFIGS = {"hats": dict(coarse_space="hats"),
           "hats+spectral slepc": dict(coarse_space=Hats() + Spectral(8, eigensolver="slepc")),
           "hats+spectral scipy": dict(coarse_space=Hats() + Spectral(8, eigensolver="scipy"))}


def _per_apply(fn, x, y, count=20):
    COMM.Barrier()
    t = time.perf_counter()
    for _ in range(count):
        fn(x, y)
    return bench.slowest(time.perf_counter() - t) / count


def main(argv: list[str] | None = None):
    ap = bench.parser("spectral_setup", __doc__, "63², N = 4 and 16")
    args = bench.parse(ap, argv)
    if args.report:
        files = bench.results(args)
        bench.write_readme(args, "Set-up and apply cost of the spectral coarse space",
                           [("Table", report(files["spectral_setup"]))], files)
        return files["spectral_setup"]
    n, Ns = (63, (4, 16)) if args.quick else (255, (16, 64, 256))
    A = natural_matrix(make_problem("channels", n, contrast=1e6))
    x, y = A.createVecs()
    x.setRandom()
    rows = []
    for N in Ns:
        for label, kw in CONFIGS.items():
            pc = PETSc.PC().create(comm=A.getComm())
            pc.setOperators(A, A)
            pc.setType("python")
            ctx = TwoLevelSchwarzPC(subdomains=N, **kw)
            pc.setPythonContext(ctx)
            setup = bench.wall(pc.setUp)
            two = ctx.two_level
            rows.append({"N": N, "method": label, "n0": ctx.Phi.getSize()[1], "setup_s": setup,
                         "split": dict(ctx.timing),
                         "local_apply_s": _per_apply(two.local.apply, x, y),
                         "coarse_apply_s": _per_apply(two.coarse.apply, x, y)})
            PETSc.Sys.Print(json.dumps(rows[-1]))
            pc.destroy()
    data = {"ranks": COMM.Get_size(), "cores": os.cpu_count(), "n": A.getSize()[0],
            "rows": rows}
    for o in (A, x, y):
        o.destroy()
    path = bench.write(args, data)
    bench.show(report(data))
    bench.show(f"wrote {path}")
    return data


def report(data) -> str:
    out = [f"channels 1e6, n = {data['n']}, {data['ranks']} ranks on {data['cores']} cores", "",
           "| N | method | n_0 | setup s | partition | basis (eigensolves) | local LU | coarse "
           "matrix | setup / hats | local apply ms | coarse apply ms | coarse share of apply |",
           "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    hats = {r["N"]: r["setup_s"] for r in data["rows"] if r["method"] == "hats"}
    for r in data["rows"]:
        s = r["split"]
        share = r["coarse_apply_s"] / (r["coarse_apply_s"] + r["local_apply_s"])
        out.append(f"| {r['N']} | {r['method']} | {r['n0']} | {r['setup_s']:.2f} | "
                   f"{s['partition_s']:.2f} | {s['basis_s']:.2f} | {s['local_s']:.2f} | "
                   f"{s['coarse_s']:.2f} | {r['setup_s'] / hats[r['N']]:.2f} | "
                   f"{1e3 * r['local_apply_s']:.2f} | {1e3 * r['coarse_apply_s']:.2f} | "
                   f"{share:.0%} |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
