r"""Weak scaling of the partition step alone: time and peak memory per rank of
:meth:`~ddlearn.decomposition.partition.Subdomains.from_matrix` at a fixed subdomain size.

    mpiexec -n P python benchmarks/partition_scaling.py [--sub 8] [--per-rank 8 64]
             [--methods boxes rcb local_metis metis] [--baseline OLD_PARTITION.py] [--out DIR]
    python benchmarks/partition_scaling.py --report     (README.md: the weak-scaling table)

The matrix: the 3D 7-point Laplacian pattern on a grid of ``N`` boxes of ``sub^3`` unknowns
(:func:`~ddlearn.decomposition.structured.box_grid`), natural ordering, PETSc's default rows,
each rank building only its own rows; ``N = k P`` for each ``k`` of ``--per-rank``, overlap 1,
coordinates given. Per method: the slowest rank's wall time, the phases of ``Subdomains.timing``
(slowest rank each), and the peak resident memory above the matrix's, per rank (``VmHWM``
reset before each run, Linux). ``--baseline`` loads another implementation of the module (e.g.
an older one that gathers everything on rank 0) and times its ``boxes`` as ``gathered_boxes``.
Ranks beyond the machine's cores oversubscribe it: compare methods within one run. Each run
replaces its rank count's records in ``partition_scaling.json`` and keeps the others (with the
provenance of the runs that made them).
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import time

import numpy as np
import petsc4py

petsc4py.init([sys.argv[0]])
from mpi4py import MPI  # noqa: E402
from petsc4py import PETSc  # noqa: E402

from ddlearn.decomposition import subdomains as partition  # noqa: E402
from ddlearn.decomposition.structured import box_grid  # noqa: E402
from ddlearn.harness import bench  # noqa: E402

COMM = MPI.COMM_WORLD


def laplacian_3d(grid) -> tuple[PETSc.Mat, np.ndarray]:
    """This rank's rows of the 7-point pattern on ``grid`` (natural ordering, x fastest) as a
    distributed AIJ matrix, and its rows' coordinates."""
    nx, ny, nz = grid
    n = nx * ny * nz
    A = PETSc.Mat().createAIJ(((PETSc.DECIDE, n), (PETSc.DECIDE, n)), nnz=(7, 6),
                              comm=PETSc.COMM_WORLD)
    A.setUp()
    lo, hi = A.getOwnershipRange()
    row = np.arange(lo, hi)
    ijk = np.stack([row % nx, row // nx % ny, row // (nx * ny)], axis=1)
    cols, vals = [row], [np.full(len(row), 6.0)]
    for axis, stride in enumerate((1, nx, nx * ny)):
        for step in (-1, 1):
            inside = (ijk[:, axis] + step >= 0) & (ijk[:, axis] + step < grid[axis])
            cols.append(np.where(inside, row + step * stride, -1))
            vals.append(np.full(len(row), -1.0))
    C, V = np.stack(cols, 1), np.stack(vals, 1)
    keep = C >= 0
    indptr = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(PETSc.IntType)
    order = np.argsort(np.where(keep, C, np.iinfo(np.int64).max), axis=1)
    C, V, keep = (np.take_along_axis(a, order, 1) for a in (C, V, keep))
    A.setValuesCSR(indptr, C[keep].astype(PETSc.IntType), V[keep])
    A.assemble()
    return A, ijk.astype(np.float64)


def _load(path: str):
    """Another implementation of :mod:`ddlearn.decomposition.partition` from a file."""
    spec = importlib.util.spec_from_file_location("ddlearn.decomposition._baseline", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(module, A, coords, N, method) -> dict:
    COMM.Barrier()
    bench.peak_reset()
    base = bench.memory_mb("VmRSS")
    t = time.perf_counter()
    s = module.Subdomains.from_matrix(A, N, 1, coords, method)
    wall = time.perf_counter() - t
    extra = bench.peak_mb() - base
    phases = getattr(s, "timing", {})
    keys = sorted(set().union(*COMM.allgather(set(phases))))
    return {"time_s": bench.slowest(wall),
            "phases_s": {k: bench.slowest(phases.get(k, 0.0)) for k in keys},
            "extra_mb_per_rank": COMM.allgather(round(extra, 1)),
            "n_i_max": int(s.sizes.max())}


def summary(records: list[dict], per_rank: int = 64) -> str:
    """The weak-scaling table: per rank count, at ``per_rank`` subdomains per rank, each
    method's partition time (slowest rank) and rank 0's peak memory above the matrix's."""
    methods = [m for m in ("boxes", "rcb", "local_metis", "metis")
               if any(r["method"] == m for r in records)]
    lines = ["| ranks (unknowns) | " + " | ".join(methods) + " |",
             "|---|" + "---|" * len(methods)]
    for P in sorted({r["ranks"] for r in records}):
        got = {r["method"]: r for r in records if r["ranks"] == P and r["N"] == per_rank * P}
        if not got:
            continue
        n = next(iter(got.values()))["n"]
        lines.append(f"| {P} ({n:,}) | " + " | ".join(
            f"{got[m]['time_s']:.2f} s, {got[m]['extra_mb_per_rank'][0]:.1f} MB" if m in got
            else "–" for m in methods) + " |")
    return "\n".join(lines)


def records_of(data) -> list[dict]:
    """The records of a JSON this benchmark wrote (before the provenance: a bare list)."""
    return data if isinstance(data, list) else data["records"]


def main(argv=None) -> list[dict]:
    ap = bench.parser("partition_scaling", __doc__, "4³ per subdomain, 2 per rank")
    ap.add_argument("--sub", type=int, default=None, help="unknowns per subdomain per "
                    "direction (8)")
    ap.add_argument("--per-rank", type=int, nargs="+", default=None,
                    help="subdomains per rank (8 64)")
    ap.add_argument("--methods", nargs="+", default=["boxes", "rcb", "local_metis", "metis"])
    ap.add_argument("--baseline", default=None)
    args = bench.parse(ap, argv)
    path = os.path.join(args.out, "partition_scaling.json")
    if args.report:
        files = bench.results(args)
        records = records_of(files["partition_scaling"])
        per_rank = max(r["N"] // r["ranks"] for r in records)
        bench.write_readme(args, "Weak scaling of the partition step", [
            (f"Partition time (slowest rank) and rank 0's peak memory above the matrix's, "
             f"{per_rank} subdomains per rank", summary(records, per_rank))], files)
        return records
    args.sub = args.sub or (4 if args.quick else 8)
    args.per_rank = args.per_rank or ([2] if args.quick else [8, 64])
    baseline = _load(args.baseline) if args.baseline else None
    records = []
    A, coords = laplacian_3d((8, 8, 8 * COMM.size))  # warm-up: imports, first-call costs
    for m in args.methods:
        partition.Subdomains.from_matrix(A, 2 * COMM.size, 1, coords, m)
    A.destroy()
    for k in args.per_rank:
        N = k * COMM.size
        grid = tuple(args.sub * b for b in box_grid(N, 3))
        A, coords = laplacian_3d(grid)
        runs = [(partition, m, m) for m in args.methods]
        runs += [(baseline, "boxes", "gathered_boxes")] if baseline else []
        for module, method, name in runs:
            rec = {"ranks": COMM.size, "cores": os.cpu_count(), "N": N, "grid": list(grid),
                   "n": int(np.prod(grid)), "method": name,
                   **run(module, A, coords, N, method)}
            records.append(rec)
            bench.show(json.dumps(rec))
        A.destroy()
    old = bench.read(path) if os.path.exists(path) else []
    earlier = [] if isinstance(old, list) else \
        [old["provenance"], *old.get("earlier_provenance", [])]
    # one rank count's records replaced, the others kept with the runs that made them
    kept = [r for r in records_of(old) if r["ranks"] != COMM.size]
    bench.write(args, {"earlier_provenance": earlier, "records": kept + records})
    return records


if __name__ == "__main__":
    main()
