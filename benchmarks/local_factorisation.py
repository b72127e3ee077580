"""Local subdomain factorisations: PETSc's native LU and Cholesky against CHOLMOD.

    python benchmarks/local_factorisation.py [--quick] [--repeats 3] [--out DIR]
    python benchmarks/local_factorisation.py --report     (README.md: the tables from the JSON)

One subdomain block at a time, sequential (``PETSc.COMM_SELF``, one rank, one OpenMP thread),
factorised by a ``preonly`` KSP with

- ``petsc lu``: ``-pc_type lu`` with PETSc's own factorisation (its default ordering ``nd``);
- ``petsc cholesky``: ``-pc_type cholesky``, PETSc's own (AIJ, its default ordering ``nd``);
- ``cholmod``: ``-pc_type cholesky -pc_factor_mat_solver_type cholmod`` (SuiteSparse's
  supernodal Cholesky, its own fill-reducing ordering: AMD or METIS, whichever fills less).

The blocks are Dirichlet blocks :math:`A_i = R_i A R_i^T` of a box subdomain grown by one layer
of overlap, ``m`` nodes per side including the overlap (``m = s + 2`` for a box of ``s^3``
nodes):

- ``diffusion``: the 7-point ``random_inclusions3d`` operator (contrast 1e6, seed 0) on a grid
  of ``m + 2`` interior points per side, the block its ``m^3`` inner points (one grid layer
  between the block and the Dirichlet boundary), ``s = 16, 24, 32``;
- ``elasticity``: the P1 (tetrahedra) elasticity of ``examples/elasticity.py`` (20 random
  inclusions of contrast 1e6, seed 0, nu = 0.3) on ``m + 3`` cells per side, the block the
  ``m^3`` nodes with grid indices ``2 .. m + 1`` (away from the clamped face), three dofs a node
  (block size 3), ``m = 12, 18, 24``: about as many rows as the diffusion blocks.

Per block and solver, ``--repeats`` runs (the solvers interleaved within a repeat), each on a
new KSP: the set-up (``KSPSetUp``: ordering, symbolic and numeric factorisation; the split from
PETSc's log events ``MatGetOrdering``, ``Mat*FactorSym``/``MatCholFctrSym`` and
``Mat*FactorNum``/``MatCholFctrNum``) and one solve (``KSPSolve``, a seeded random right-hand
side), the medians reported; the factor's stored entries (``MatGetInfo`` of the factor: L and
U for LU, L for Cholesky) and the relative residual of the solve check the three against each
other. The ratio ``cholmod / petsc lu`` is of set-up + one solve. Writes
``local_factorisation.json``.

Times are of one shared machine (the BLAS it runs on is recorded: CHOLMOD's supernodes call
it); read ratios of one run rather than seconds.
"""
from __future__ import annotations

import os
import statistics
import time

# One thread: CHOLMOD is linked with OpenMP, the runtime reads this when it loads.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import petsc4py  # noqa: E402

petsc4py.init([])
from petsc4py import PETSc  # noqa: E402

from ddlearn.decomposition.problems import make_problem  # noqa: E402
from ddlearn.harness import bench  # noqa: E402

#: the solvers: (PC type, factorisation package)
SOLVERS = {"petsc lu": ("lu", "petsc"), "petsc cholesky": ("cholesky", "petsc"),
           "cholmod": ("cholesky", "cholmod")}
#: nodes per side of the blocks, overlap included (s + 2 for a box of s^3 nodes)
SIZES = {"diffusion": (18, 26, 34), "elasticity": (12, 18, 24)}
QUICK = {"diffusion": (10,), "elasticity": (6,)}
CONTRAST, SEED = 1e6, 0
#: the PETSc log events of a set-up's phases, by factorisation type
EVENTS = {"ordering": ("MatGetOrdering",),
          "symbolic": ("MatLUFactorSym", "MatCholFctrSym"),
          "numeric": ("MatLUFactorNum", "MatCholFctrNum")}


def diffusion_block(m: int):
    """The ``m^3`` inner points of the 7-point ``random_inclusions3d`` operator on ``m + 2``
    interior points per side: ``A[idx, idx]``, natural (x fastest) ordering."""
    n = m + 2
    problem = make_problem("random_inclusions3d", n, contrast=CONTRAST, seed=SEED)
    r = np.arange(1, m + 1)
    iz, iy, ix = np.meshgrid(r, r, r, indexing="ij")
    idx = (iz * n * n + iy * n + ix).ravel()
    return problem.rows(idx)[:, idx].tocsr(), 1


def elasticity_block(m: int):
    """The ``m^3`` nodes with grid indices ``2 .. m + 1`` of the P1 elasticity stiffness on
    ``m + 3`` cells per side (``examples/elasticity.py``), node-wise dofs (block size 3)."""
    ex = bench.load_example("elasticity")
    cells = m + 3
    problem = ex.build(dim=3, cells=cells, contrast=CONTRAST, seed=SEED, element="p1")
    ijk = np.rint(problem.mesh.p * cells).astype(np.int64)
    nodes = np.flatnonzero(np.all((ijk >= 2) & (ijk < m + 2), axis=0))
    assert len(nodes) == m ** 3, (len(nodes), m)
    dofs = (3 * nodes[:, None] + np.arange(3)).ravel()
    return problem.K[dofs][:, dofs].tocsr(), 3


BLOCKS = {"diffusion": diffusion_block, "elasticity": elasticity_block}


def to_petsc(A, bs: int) -> PETSc.Mat:
    A.sort_indices()
    M = PETSc.Mat().createAIJ(A.shape, bsize=bs, csr=(A.indptr.astype(PETSc.IntType),
                                                      A.indices.astype(PETSc.IntType), A.data),
                              comm=PETSc.COMM_SELF)
    M.assemble()
    M.setOption(PETSc.Mat.Option.SYMMETRIC, True)
    M.setOption(PETSc.Mat.Option.SPD, True)
    return M


def _event_seconds() -> dict:
    return {phase: sum(PETSc.Log.Event(name).getPerfInfo()["time"] for name in names)
            for phase, names in EVENTS.items()}


def factor_and_solve(A: PETSc.Mat, b: PETSc.Vec, pc_type: str, package: str) -> dict:
    """One set-up (ordering + symbolic + numeric factorisation) and one solve on a new KSP."""
    ksp = PETSc.KSP().create(comm=PETSc.COMM_SELF)
    ksp.setOperators(A, A)
    ksp.setType("preonly")
    pc = ksp.getPC()
    pc.setType(pc_type)
    pc.setFactorSolverType(package)
    x = b.duplicate()
    before = _event_seconds()
    t0 = time.perf_counter()
    ksp.setUp()
    t1 = time.perf_counter()
    ksp.solve(b, x)
    t2 = time.perf_counter()
    after = _event_seconds()
    r = b.duplicate()
    A.mult(x, r)
    r.aypx(-1.0, b)
    out = {"setup_s": t1 - t0, "solve_s": t2 - t1,
           **{f"{k}_s": after[k] - before[k] for k in EVENTS},
           "factor_nnz": int(pc.getFactorMatrix().getInfo()["nz_used"]),
           "relative_residual": r.norm() / b.norm()}
    for o in (ksp, x, r):
        o.destroy()
    return out


def measure(problem: str, m: int, repeats: int) -> list[dict]:
    """Every solver on the ``problem`` block of ``m`` nodes per side, ``repeats`` times."""
    S, bs = BLOCKS[problem](m)
    A = to_petsc(S, bs)
    b = A.createVecLeft()
    b.setArray(np.random.default_rng(SEED).standard_normal(S.shape[0]))
    diag = S.diagonal()
    block = {"problem": problem, "m": m, "rows": S.shape[0], "bs": bs, "nnz": int(S.nnz),
             "diag_ratio": float(diag.max() / diag.min())}
    runs = {name: [] for name in SOLVERS}
    for _ in range(repeats):
        for name, (pc_type, package) in SOLVERS.items():
            runs[name].append(factor_and_solve(A, b, pc_type, package))
    A.destroy()
    b.destroy()
    rows = []
    for name, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0] if k.endswith("_s")}
        rows.append({**block, "solver": name, "median": med, "runs": rs,
                     "factor_nnz": rs[0]["factor_nnz"],
                     "relative_residual": max(r["relative_residual"] for r in rs)})
        PETSc.Sys.Print(f"{problem} {m}^3 ({block['rows']} rows) {name:15s} "
                        f"set-up {med['setup_s']:.3f} s, solve {med['solve_s']:.4f} s, "
                        f"factor nnz {rows[-1]['factor_nnz']}, "
                        f"residual {rows[-1]['relative_residual']:.1e}")
    return rows


def _blas() -> str:
    """Which system BLAS (``libblas.so.3``, Debian's alternatives) PETSc and CHOLMOD run on:
    CHOLMOD's supernodal kernels call it. (numpy's own OpenBLAS in the process is not it.)"""
    with open("/proc/self/maps") as f:
        libs = {os.path.realpath(line.split()[-1]) for line in f
                if os.path.basename(line.split()[-1]).startswith("libblas.so")}
    names = " ".join(sorted(libs)).lower()
    for key, label in (("openblas", "OpenBLAS"), ("mkl", "MKL"), ("blis", "BLIS"),
                       ("atlas", "ATLAS")):
        if key in names:
            return label
    return "the reference BLAS (netlib)" if names else "an unknown BLAS"


def main(argv: list[str] | None = None):
    ap = bench.parser("local_factorisation", __doc__,
                      "one diffusion block of 10^3 and one elasticity block of 6^3 nodes, one "
                      "repeat")
    ap.add_argument("--repeats", type=int, default=3, help="runs per block and solver "
                    "(the median is reported)")
    args = bench.parse(ap, argv)
    if args.report:
        files = bench.results(args)
        data = files["local_factorisation"]
        bench.write_readme(args, "Local subdomain factorisations: PETSc LU and Cholesky against "
                           "CHOLMOD", [("Ratios", ratios(data)), ("Timings", report(data))],
                           files, intro=intro(data))
        return data
    if not PETSc.Sys.hasExternalPackage("cholmod"):
        raise SystemExit("this PETSc was built without SuiteSparse: CHOLMOD is missing; "
                         "scripts/setup.sh builds PETSc with it (Debian's libsuitesparse-dev)")
    if args.repeats < 1:
        ap.error(f"--repeats {args.repeats}: at least one run is needed")
    repeats = 1 if args.quick else args.repeats
    sizes = QUICK if args.quick else SIZES
    PETSc.Log.begin()
    load = os.getloadavg()
    rows = [r for problem, ms in sizes.items() for m in ms for r in measure(problem, m, repeats)]
    data = {"threads": os.environ.get("OMP_NUM_THREADS"), "repeats": repeats,
            "blas": _blas(), "petsc": ".".join(map(str, PETSc.Sys.getVersion())),
            "load_average_start": load[0], "load_average_end": os.getloadavg()[0],
            "contrast": CONTRAST, "seed": SEED, "rows": rows}
    path = bench.write(args, data)
    bench.show(ratios(data))
    bench.show(f"wrote {path}")
    return data


def _total(row) -> float:
    return row["median"]["setup_s"] + row["median"]["solve_s"]


def _blocks(data):
    """The rows grouped by block, in run order: ``{(problem, m): {solver: row}}``."""
    out = {}
    for r in data["rows"]:
        out.setdefault((r["problem"], r["m"]), {})[r["solver"]] = r
    return out


def intro(data) -> str:
    return (f"One block at a time on one rank, {data['threads']} thread, PETSc {data['petsc']} "
            f"on {data['blas']}; median of {data['repeats']} runs per block and solver (the "
            f"solvers interleaved), each a new `preonly` KSP: set-up (ordering, symbolic and "
            f"numeric factorisation) and one solve. Blocks: Dirichlet blocks of a box subdomain "
            f"with one layer of overlap, `m` nodes per side including it; `diffusion` the "
            f"7-point `random_inclusions3d` operator, `elasticity` P1 tetrahedra "
            f"(`examples/elasticity.py`, block size 3), both with inclusions of contrast "
            f"{data['contrast']:g}. The machine's load average (1 min) was "
            f"{data['load_average_start']:.1f} at the start and "
            f"{data['load_average_end']:.1f} at the end: the cores were shared, compare ratios "
            f"of one run rather than seconds. The script's docstring has the details.")


def ratios(data) -> str:
    rows = []
    for (problem, m), by in _blocks(data).items():
        lu, chol, cm = by["petsc lu"], by["petsc cholesky"], by["cholmod"]
        rows.append([problem, f"{m}³", lu["rows"], f"{_total(lu):.3f}", f"{_total(chol):.3f}",
                     f"{_total(cm):.3f}", f"{_total(cm) / _total(lu):.2f}",
                     f"{_total(cm) / _total(chol):.2f}",
                     f"{cm['median']['setup_s'] / lu['median']['setup_s']:.2f}",
                     f"{cm['median']['solve_s'] / lu['median']['solve_s']:.2f}"])
    return ("Set-up + one solve, seconds (medians), and CHOLMOD's time over the others' "
            "(below 1: CHOLMOD is faster).\n\n" +
            bench.markdown_table(["block", "m", "rows", "petsc lu s", "petsc cholesky s",
                                  "cholmod s", "cholmod / lu", "cholmod / petsc cholesky",
                                  "set-up: cholmod / lu", "solve: cholmod / lu"], rows,
                                 "llrrrrrrrr"))


def report(data) -> str:
    rows = []
    for r in data["rows"]:
        med = r["median"]
        rows.append([r["problem"], f"{r['m']}³", r["rows"], r["bs"], r["nnz"], r["solver"],
                     r["factor_nnz"], f"{r['factor_nnz'] / r['nnz']:.1f}",
                     f"{med['ordering_s']:.3f}", f"{med['symbolic_s']:.3f}",
                     f"{med['numeric_s']:.3f}", f"{med['setup_s']:.3f}",
                     f"{1e3 * med['solve_s']:.2f}", f"{r['relative_residual']:.0e}"])
    return ("Medians per block and solver. `factor nnz`: the factor's stored entries as "
            "`MatGetInfo` reports them (L and U for LU, L for Cholesky); `fill`: factor nnz / "
            "nnz(A). The ordering is inside CHOLMOD's symbolic phase (it orders itself); PETSc "
            "orders with `nd` before its symbolic phase. `residual`: the largest "
            "‖b − Ax‖/‖b‖ of the runs.\n\n" +
            bench.markdown_table(["block", "m", "rows", "bs", "nnz(A)", "solver", "factor nnz",
                                  "fill", "ordering s", "symbolic s", "numeric s", "set-up s",
                                  "solve ms", "residual"], rows, "llrrrlrrrrrrrr"))


if __name__ == "__main__":
    main()
