r"""The partitioners without coordinates on several ranks: METIS on the whole graph gathered on
rank 0 (``metis``) against the gather-free ``cluster_metis`` (METIS on each rank's rows into
small clusters, then on the clusters' graph) and ``local_metis`` (METIS on each rank's rows
alone), with the PC's default coarse space for the matrix.

    mpiexec -n 4 python benchmarks/partitions.py [--quick] [--out DIR]
    python benchmarks/partitions.py --report     (README.md from the JSON)

Cases (every run names its partitioner; the coarse space reads the matrix, its block size and
near-null space only):

- ``laplace2d``, ``channels2d``: the 5-point operator of :mod:`ddlearn.decomposition.problems`
  in natural ordering on 127² points (PETSc's default rows: horizontal strips), coefficient 1
  and channels of 1e4; GDSW (``-ddlearn_coarse_space gdsw``, its scalar form);
- ``elasticity2d``, ``elasticity3d``: examples/elasticity.py's P1 elasticity with random stiff
  inclusions (1e6, seed 0) on 64² and 12³ cells in the mesh's node numbering; the default
  coarse space for systems (GDSW with the rigid-body modes).

N = 4 subdomains per rank, overlap 1, CG to rtol 1e-8 on the unpreconditioned residual, at most
2000 iterations. Recorded per run: iterations, the partition's seconds (slowest rank) and the
peak resident memory of every rank during the set-up. Compare partitioners of one run.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import petsc4py

petsc4py.init([sys.argv[0]])
from petsc4py import PETSc  # noqa: E402

from ddlearn.harness import bench, fem  # noqa: E402
from ddlearn.harness.study import Rows  # noqa: E402
from ddlearn.decomposition.problems import make_problem  # noqa: E402
from ddlearn.harness.systems import natural_matrix, solve_with_options  # noqa: E402

PARTITIONERS = ("metis", "cluster_metis", "local_metis")
PC = {"pc_type": "python", "pc_python_type": "ddlearn.pc.TwoLevelSchwarzPC"}


def _cases(quick: bool) -> dict:
    return {"laplace2d": ("grid", 31 if quick else 127, 1.0),
            "channels2d": ("grid", 31 if quick else 127, 1e4),
            "elasticity2d": ("fem", (2, 12 if quick else 64), 1e6),
            "elasticity3d": ("fem", (3, 5 if quick else 12), 1e6)}


def _matrix(kind, size, contrast):
    """``(A, b, objects to destroy)`` of a case."""
    if kind == "grid":
        A = natural_matrix(make_problem("poisson2d", size) if contrast == 1.0
                           else make_problem("channels", size, contrast=contrast))
        b = A.createVecLeft()
        b.set(1.0)
        return A, b, [A, b]
    dim, cells = size
    A, b, coords = fem.to_petsc(fem.build(dim, cells, contrast=contrast, seed=0))
    return A, b, [A, b, coords]


def run_one(case: str, spec, partitioner: str, max_it: int) -> dict:
    kind, size, contrast = spec
    ranks = PETSc.COMM_WORLD.getSize()
    options = {"ksp_type": "cg", "ksp_rtol": "1e-8", "ksp_max_it": str(max_it), **PC,
               "ddlearn_subdomains": str(4 * ranks), "ddlearn_partition": partitioner}
    if kind == "grid":  # with coordinates attached the default would be the hats
        options["ddlearn_coarse_space"] = "gdsw"
    A, b, objs = _matrix(kind, size, contrast)
    bench.peak_reset()
    rec = {"case": case, "partitioner": partitioner, "unknowns": A.getSize()[0],
           "N": 4 * ranks, "options": options, **solve_with_options(A, b, options)}
    rec["peak_mb"] = bench.peak_mb_ranks()
    for o in objs:
        o.destroy()
    return rec


def benchmark(args) -> dict:
    comm = PETSc.COMM_WORLD.tompi4py()
    data = {"ranks": comm.Get_size(), "cores": os.cpu_count(), "max_it": args.max_it,
            "quick": args.quick}
    rows = Rows(args, data, lambda r: (r["case"], r["partitioner"]))
    for case, spec in _cases(args.quick).items():
        for p in PARTITIONERS:
            if not rows.done((case, p)):
                rec = rows.add(run_one(case, spec, p, args.max_it))
                part = rec.get("setup_split", {}).get("partition_s", float("nan"))
                PETSc.Sys.Print(f"{case} {p}: {bench.outcome(rec)} its, partition {part:.2f} s",
                                comm=PETSc.COMM_WORLD)
    return data


def summary(data: dict) -> str:
    lines = [f"{data['ranks']} ranks on {data['cores']} cores, N = 4 per rank, CG rtol 1e-8; "
             f"iterations (over METIS on the whole graph), the partition's seconds (slowest "
             f"rank) and the set-up's peak memory of rank 0 and of the largest other rank.", "",
             "| case | unknowns | partitioner | iterations | / metis | partition s | "
             "rank 0 MB | others' max MB |", "|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in data["rows"]:
        ref = next((q for q in data["rows"] if q["case"] == r["case"]
                    and q["partitioner"] == "metis"), None)
        ratio = r["iterations"] / ref["iterations"] if ref and ref.get("converged") \
            and r.get("converged") else float("nan")
        peak = r.get("peak_mb") or [float("nan")]
        others = max(peak[1:]) if len(peak) > 1 else float("nan")
        part = r.get("setup_split", {}).get("partition_s", float("nan"))
        lines.append(f"| {r['case']} | {r['unknowns']:,} | {r['partitioner']} | "
                     f"{bench.outcome(r)} | "
                     f"{ratio:.2f} | {part:.2f} | {peak[0]:.0f} | {others:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = bench.parser("partitions", __doc__.split("\n\n")[0])
    ap.add_argument("--max-it", type=int, default=2000)
    args = bench.parse(ap, argv)
    if args.report:
        data = bench.read(os.path.join(args.out, "partitions.json"))
    else:
        data = benchmark(args)
        bench.write(args, data)
    bench.write_readme(args, "Partitioners without coordinates", [("Table", summary(data))],
                       {"partitions": data})
    bench.show(summary(data))
    return data


if __name__ == "__main__":
    main()
