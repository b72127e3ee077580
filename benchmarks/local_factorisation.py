r"""Local subdomain factorisations: PETSc's native LU and Cholesky against CHOLMOD.

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

*Shared symbolic factorisation* (:mod:`ddlearn.classical.shared_factor`), per diffusion block:
the spectral coarse space factors :math:`M_i = A_i^N + \varepsilon\,\mathrm{diag}A_i^N` (the
algebraic Neumann matrix of the block inside its grid, regularised as
:func:`~ddlearn.classical.neumann.regularised_pencil` does) and the one-level part
:math:`A_i`, both by CHOLMOD. *Separate* (the path with ``-ddlearn_spectral_share_factor 0``):
two new KSPs, each ordering and factoring its own matrix; *shared*: the block of a sequential
PCASM (one subdomain, the whole block) given :math:`M_i`'s values and factored
(``LocalBlocks.factored``, its check of the pattern included), then :math:`A_i`'s back and
refactored by ``factor_blocks``, numerically only. Both paths' factors solve their matrix to the
residual reported.

*In the PC*: the set-up of ``TwoLevelSchwarzPC`` with the spectral space (8 vectors per
subdomain, SLEPc) on ``random_inclusions3d`` (contrast 1e6, seed 0), one rank, box
subdomains, ``share_factor`` on and off interleaved (``--repeats`` each, medians): its split
(basis = Neumann matrices and eigensolves; local = PCASM set-up and local factorisations), the
symbolic factorisations counted by PETSc's log, and CG's iterations to 1e-8 (b = 1).

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
import scipy.sparse as sp  # noqa: E402

petsc4py.init([])
from petsc4py import PETSc  # noqa: E402

from ddlearn.classical.coarse.spectral import Spectral  # noqa: E402
from ddlearn.classical.neumann import regularised_pencil  # noqa: E402
from ddlearn.classical.overlapping import asm_pc, factor_blocks  # noqa: E402
from ddlearn.classical.shared_factor import LocalBlocks  # noqa: E402
from ddlearn.decomposition.problems import make_problem  # noqa: E402
from ddlearn.harness import bench  # noqa: E402
from ddlearn.pc import two_level  # noqa: E402

#: the solvers: (PC type, factorisation package)
SOLVERS = {"petsc lu": ("lu", "petsc"), "petsc cholesky": ("cholesky", "petsc"),
           "cholmod": ("cholesky", "cholmod")}
#: nodes per side of the blocks, overlap included (s + 2 for a box of s^3 nodes)
SIZES = {"diffusion": (18, 26, 34), "elasticity": (12, 18, 24)}
QUICK = {"diffusion": (10,), "elasticity": (6,)}
#: the PC section: (grid points per side, subdomains)
PC_CASES = ((32, 8), (48, 8), (48, 27))
PC_QUICK = ((12, 8),)
CONTRAST, SEED = 1e6, 0
#: the PETSc log events of a set-up's phases, by factorisation type
EVENTS = {"ordering": ("MatGetOrdering",),
          "symbolic": ("MatLUFactorSym", "MatCholFctrSym"),
          "numeric": ("MatLUFactorNum", "MatCholFctrNum")}


def _inner_rows(m: int):
    """The ``random_inclusions3d`` problem on ``m + 2`` interior points per side and its
    ``m^3`` inner points' rows (natural, x fastest)."""
    n = m + 2
    problem = make_problem("random_inclusions3d", n, contrast=CONTRAST, seed=SEED)
    r = np.arange(1, m + 1)
    iz, iy, ix = np.meshgrid(r, r, r, indexing="ij")
    idx = (iz * n * n + iy * n + ix).ravel()
    return problem.rows(idx).tocsr(), idx


def diffusion_block(m: int):
    """The ``m^3`` inner points of the 7-point ``random_inclusions3d`` operator on ``m + 2``
    interior points per side: ``A[idx, idx]``, natural (x fastest) ordering."""
    rows, idx = _inner_rows(m)
    return rows[:, idx].tocsr(), 1


def neumann_pencil_matrix(m: int):
    r"""``(A_i, M_i)`` of the diffusion block: :math:`M_i = A_i^N + \varepsilon\,\mathrm{diag}
    A_i^N`, :math:`A_i^N = A_i - \mathrm{diag}(\sum_{j \notin I}|a_{kj}|)` (the algebraic
    Neumann matrix)."""
    rows, idx = _inner_rows(m)
    A = rows[:, idx].tocsr()
    leaving = np.asarray(abs(rows).sum(axis=1)).ravel() - np.asarray(abs(A).sum(axis=1)).ravel()
    _, M = regularised_pencil((A - sp.diags(leaving)).tocsr(), np.ones(A.shape[0]), A)
    return A, M


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


def _counts() -> dict:
    return {phase: sum(int(PETSc.Log.Event(name).getPerfInfo()["count"]) for name in names)
            for phase, names in EVENTS.items()}


def _residual(ksp: PETSc.KSP, A: PETSc.Mat, b: PETSc.Vec) -> float:
    """``||b - A x|| / ||b||`` for ``x`` = the KSP's solve of ``b``."""
    x, r = b.duplicate(), b.duplicate()
    ksp.solve(b, x)
    A.mult(x, r)
    r.aypx(-1.0, b)
    out = r.norm() / b.norm()
    x.destroy(), r.destroy()
    return out


class _WholeBlock:
    """The whole matrix as the one subdomain of a sequential PCASM."""

    def __init__(self, n: int):
        self.n = n

    def index_sets(self, overlapping: bool) -> list:
        return [PETSc.IS().createStride(self.n, comm=PETSc.COMM_SELF)]


def _separate(A: PETSc.Mat, M: PETSc.Mat, b: PETSc.Vec) -> dict:
    """Today's path without sharing: each matrix ordered and factored by its own KSP."""
    out, kinds = {"setup_s": 0.0}, {}
    before = _counts()
    for name, X in (("M", M), ("A", A)):
        ksp = PETSc.KSP().create(comm=PETSc.COMM_SELF)
        ksp.setOperators(X, X)
        ksp.setType("preonly")
        ksp.getPC().setType("cholesky")
        ksp.getPC().setFactorSolverType("cholmod")
        t = time.perf_counter()
        ksp.setUp()
        out["setup_s"] += time.perf_counter() - t
        kinds[f"residual_{name}"] = _residual(ksp, X, b)
        ksp.destroy()
    after = _counts()
    return {**out, **kinds, **{f"{k}_count": after[k] - before[k] for k in EVENTS}}


def _shared(A: PETSc.Mat, Msp: sp.csr_matrix, b: PETSc.Vec) -> dict:
    """The shared path: the PCASM block given M's values and factored, then A's, refactored."""
    whole = _WholeBlock(A.getSize()[0])
    asm = asm_pc(A, whole, prefix="shared_", solver="cholmod", factor=False)
    blocks = LocalBlocks(asm)
    before = _counts()
    t = time.perf_counter()
    with blocks.factored(0, Msp) as (Mp, ksp):
        t_m = time.perf_counter() - t
        assert Mp is not None, "the block's pattern did not take M"
        residual_m = _residual(ksp, Mp, b)
    t = time.perf_counter()
    factor_blocks(asm, whole, "cholmod")
    t_a = time.perf_counter() - t
    after = _counts()
    residual_a = _residual(asm.getASMSubKSP()[0], A, b)
    asm.destroy()
    return {"setup_s": t_m + t_a, "residual_M": residual_m, "residual_A": residual_a,
            **{f"{k}_count": after[k] - before[k] for k in EVENTS}}


def measure_shared(m: int, repeats: int) -> list[dict]:
    """Separate and shared factorisations of the diffusion block of ``m`` nodes per side."""
    S, Msp = neumann_pencil_matrix(m)
    A, M = to_petsc(S, 1), to_petsc(Msp.tocsr(), 1)
    b = A.createVecLeft()
    b.setArray(np.random.default_rng(SEED).standard_normal(S.shape[0]))
    runs = {"separate": [], "shared": []}
    for _ in range(repeats):
        runs["separate"].append(_separate(A, M, b))
        runs["shared"].append(_shared(A, Msp, b))
    for o in (A, M, b):
        o.destroy()
    rows = []
    for path, rs in runs.items():
        rows.append({"problem": "diffusion", "m": m, "rows": S.shape[0], "path": path,
                     "setup_s": statistics.median(r["setup_s"] for r in rs), "runs": rs,
                     "symbolic_count": rs[0]["symbolic_count"],
                     "numeric_count": rs[0]["numeric_count"],
                     "residual": max(max(r["residual_A"], r["residual_M"]) for r in rs)})
        PETSc.Sys.Print(f"shared: diffusion {m}^3 {path:9s} A_i and M_i set-up "
                        f"{rows[-1]['setup_s']:.3f} s, symbolic {rows[-1]['symbolic_count']}, "
                        f"numeric {rows[-1]['numeric_count']}")
    return rows


def measure_pc(n: int, N: int, repeats: int) -> list[dict]:
    """The spectral two-level PC's set-up with and without the shared factorisation."""
    problem = make_problem("random_inclusions3d", n, contrast=CONTRAST, seed=SEED)
    A = problem.matrix()
    runs = {True: [], False: []}
    for _ in range(repeats):
        for share in (True, False):
            before = _counts()
            t = time.perf_counter()
            h = two_level(A, Spectral(8, share_factor=share), subdomains=N,
                          coordinates=problem.coordinates())
            setup = time.perf_counter() - t
            after = _counts()
            ksp = PETSc.KSP().create(comm=PETSc.COMM_SELF)
            ksp.setOperators(h.A)
            ksp.setType("cg")
            ksp.setTolerances(rtol=1e-8, max_it=1000)
            ksp.setPC(h.pc)
            b, x = h.A.createVecs()
            b.set(1.0)
            ksp.solve(b, x)
            timing, meta = h.context.timing, h.context.meta
            runs[share].append({"setup_s": setup, "basis_s": timing["basis_s"],
                                "local_s": timing["local_s"], "coarse_s": timing["coarse_s"],
                                "iterations": ksp.getIterationNumber(),
                                "reason": int(ksp.getConvergedReason()),
                                "shared_factorisations":
                                    meta["spectral"]["shared_factorisations"],
                                "symbolic_count": after["symbolic"] - before["symbolic"]})
            for o in (ksp, b, x):
                o.destroy()
            h.destroy()
    rows = []
    for share, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs)
               for k in ("setup_s", "basis_s", "local_s", "coarse_s")}
        rows.append({"n": n, "N": N, "unknowns": problem.n, "share_factor": share,
                     "median": med, "runs": rs, "iterations": rs[0]["iterations"],
                     "converged": all(r["reason"] > 0 for r in rs),
                     "shared_factorisations": rs[0]["shared_factorisations"],
                     "symbolic_count": rs[0]["symbolic_count"]})
        PETSc.Sys.Print(f"pc: inclusions {n}^3 N = {N} share {share!s:5s} set-up "
                        f"{med['setup_s']:.2f} s (basis {med['basis_s']:.2f}, local "
                        f"{med['local_s']:.2f}), {rows[-1]['iterations']} CG iterations, "
                        f"symbolic {rows[-1]['symbolic_count']}")
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
                           "CHOLMOD", [("Ratios", ratios(data)), ("Timings", report(data)),
                                       ("Shared symbolic factorisation", shared_report(data)),
                                       ("Shared symbolic factorisation in the PC",
                                        pc_report(data))],
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
    shared = [r for m in sizes["diffusion"] for r in measure_shared(m, repeats)]
    pc_rows = [r for n, N in (PC_QUICK if args.quick else PC_CASES)
               for r in measure_pc(n, N, repeats)]
    data = {"threads": os.environ.get("OMP_NUM_THREADS"), "repeats": repeats,
            "shared_rows": shared, "pc_rows": pc_rows,
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



def shared_report(data) -> str:
    if not data.get("shared_rows"):
        return "Not in this run."
    by = {}
    for r in data["shared_rows"]:
        by.setdefault(r["m"], {})[r["path"]] = r
    rows = [[f"{m}³", p["separate"]["rows"], f"{p['separate']['setup_s']:.3f}",
             f"{p['shared']['setup_s']:.3f}",
             f"{p['shared']['setup_s'] / p['separate']['setup_s']:.2f}",
             f"{p['separate']['symbolic_count']} / {p['shared']['symbolic_count']}",
             f"{p['separate']['numeric_count']} / {p['shared']['numeric_count']}",
             f"{max(p['separate']['residual'], p['shared']['residual']):.0e}"]
            for m, p in by.items()]
    return ("Per diffusion block: the factorisations of the pencil's right-hand matrix M_i and "
            "of the Dirichlet block A_i by CHOLMOD, each on its own (separate) or on one "
            "symbolic factorisation (shared), seconds (medians); symbolic and numeric "
            "factorisations counted by PETSc's log; `residual`: the largest ‖b − Xx‖/‖b‖ of "
            "both paths' solves with X = A_i and X = M_i (M_i, regularised by 1e-9 of its "
            "diagonal, is nearly singular: its residual is the larger).\n\n" +
            bench.markdown_table(["m", "rows", "separate s", "shared s", "shared / separate",
                                  "symbolic: separate / shared",
                                  "numeric: separate / shared", "residual"], rows,
                                 "lrrrrrrr"))


def pc_report(data) -> str:
    if not data.get("pc_rows"):
        return "Not in this run."
    by = {}
    for r in data["pc_rows"]:
        by.setdefault((r["n"], r["N"]), {})[r["share_factor"]] = r
    rows = []
    for (n, N), p in by.items():
        on, off = p[True], p[False]
        rows.append([f"{n}³", N, on["unknowns"],
                     f"{off['median']['setup_s']:.2f}", f"{on['median']['setup_s']:.2f}",
                     f"{on['median']['setup_s'] / off['median']['setup_s']:.2f}",
                     f"{off['median']['basis_s'] + off['median']['local_s']:.2f}",
                     f"{on['median']['basis_s'] + on['median']['local_s']:.2f}",
                     f"{off['symbolic_count']} / {on['symbolic_count']}",
                     f"{off['iterations']} / {on['iterations']}",
                     f"{on['shared_factorisations']} of {N}"])
    return ("`TwoLevelSchwarzPC`, spectral (8 per subdomain), one rank: set-up seconds "
            "(medians) with `share_factor` off and on; `basis + local`: the coarse basis "
            "(Neumann matrices, eigensolves) and the one-level part (PCASM, local "
            "factorisations), the two the sharing touches; symbolic factorisations (the "
            "coarse matrix's included) and CG iterations, off / on.\n\n" +
            bench.markdown_table(["grid", "N", "unknowns", "set-up off s", "set-up on s",
                                  "on / off", "basis + local off s", "basis + local on s",
                                  "symbolic off / on", "CG its off / on", "shared"], rows,
                                 "lrrrrrrrrrr"))

if __name__ == "__main__":
    main()
