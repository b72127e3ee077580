"""The spectral (GenEO-type) coarse space against the reference implementation's settings, 3D.

    mpiexec -n 2 python benchmarks/geneo_reference.py [--n 32] [--quick] [--out DIR]
            [--problems inclusions layered] [--kinds rows rcb] [--configs NAME ...]
    python benchmarks/geneo_reference.py --report     (README.md: the ablation tables)

A user-style 3D program: the 7-point diffusion matrix on the unit cube, ``n^3`` unknowns,
harmonic-mean face coefficients, natural ordering (x fastest), Dirichlet boundary, PETSc's
default row distribution, ``b = 1``, CG to rtol 1e-8 (PETSc's default norm) from zero. Two
coefficients at contrast 1e6: seeded *inclusions* (balls of radius 0.03-0.08 in a background
of 1) and *layered* (layers across y with values 1..100, and square channels along all three
axes, so some of them cross every subdomain interface).

Two kinds of 16 subdomains: ``rows``, the contiguous row blocks of a 16-rank layout (what
PCHPDDM builds with one subdomain per rank: slabs in natural ordering), handed to the PC as
non-overlapping parts (``ddlearn.pc.set_subdomains``, 16 / size per rank) and grown by
``-ddlearn_overlap``; and ``rcb``, ddlearn's own boxes from the coordinates.

The configurations (:data:`CONFIGS`) change one factor at a time from ddlearn's spectral
settings before the Dirichlet pencil became the default (``ours``: Neumann pencil,
multiplicity weights, additive) and from the reference's settings (``reference``: Dirichlet pencil,
Boolean partition of unity, balanced correction, overlap 1, 8 vectors), beside PETSc's ASM
(16 blocks, overlap 1, LU), GAMG with its defaults (``gamg``) and tuned (``gamg-tuned``:
threshold 0.01, ``PETSC_REFERENCE["gamg-tuned"]`` of :mod:`ddlearn.harness.options`) and
Nicolaides on the same matrix. Writes ``geneo_reference.json`` after every run; times are the
slowest rank's, one rank per core (more ranks than cores slow PETSc's collective set-ups,
GAMG's above all, many-fold), and compare methods of one run, not machines.
"""
from __future__ import annotations

import numpy as np
import petsc4py

petsc4py.init([])
from mpi4py import MPI  # noqa: E402
from petsc4py import PETSc  # noqa: E402

from ddlearn.harness import bench  # noqa: E402
from ddlearn.harness.options import PETSC_REFERENCE  # noqa: E402
from ddlearn.pc import TwoLevelSchwarzPC, set_coordinates, set_subdomains  # noqa: E402

COMM = MPI.COMM_WORLD
CONTRAST = 1e6

OURS = {"coarse_space": "spectral", "spectral_pencil": "neumann",
        "spectral_partition_of_unity": "multiplicity", "coarse_correction": "additive",
        "overlap": 1, "spectral_nev": 8}
REFERENCE = {"coarse_space": "spectral", "spectral_pencil": "dirichlet",
             "spectral_partition_of_unity": "boolean", "coarse_correction": "balanced",
             "overlap": 1, "spectral_nev": 8}
#: name -> (method, ddlearn options, Krylov method); the spectral rows change one factor
CONFIGS = {
    "asm": ("asm", {}, "cg"),
    "gamg": ("gamg", {}, "cg"),
    "gamg-tuned": ("gamg-tuned", {}, "cg"),
    "nicolaides": ("ddlearn", {"coarse_space": "nicolaides", "overlap": 1}, "cg"),
    "ours": ("ddlearn", OURS, "cg"),
    "ours+dirichlet": ("ddlearn", {**OURS, "spectral_pencil": "dirichlet"}, "cg"),
    "ours+boolean": ("ddlearn", {**OURS, "spectral_partition_of_unity": "boolean"}, "cg"),
    "ours+interior": ("ddlearn", {**OURS, "spectral_partition_of_unity": "interior"}, "cg"),
    "ours+balanced": ("ddlearn", {**OURS, "coarse_correction": "balanced"}, "cg"),
    "ours+deflated": ("ddlearn", {**OURS, "coarse_correction": "deflated"}, "gmres"),
    "ours+overlap2": ("ddlearn", {**OURS, "overlap": 2}, "cg"),
    "ours+nev16": ("ddlearn", {**OURS, "spectral_nev": 16}, "cg"),
    "reference": ("ddlearn", REFERENCE, "cg"),
    "reference-neumann": ("ddlearn", {**REFERENCE, "spectral_pencil": "neumann"}, "cg"),
    "reference-multiplicity": ("ddlearn", {**REFERENCE,
                                           "spectral_partition_of_unity": "multiplicity"}, "cg"),
    "reference-additive": ("ddlearn", {**REFERENCE, "coarse_correction": "additive"}, "cg"),
    "reference+deflated": ("ddlearn", {**REFERENCE, "coarse_correction": "deflated"}, "gmres"),
    "reference+overlap2": ("ddlearn", {**REFERENCE, "overlap": 2}, "cg"),
    "reference+threshold": ("ddlearn", {**REFERENCE, "spectral_nev": 16,
                                        "spectral_threshold": 0.1}, "cg"),
}


def inclusions(n: int, seed: int = 0, count: int = 30) -> np.ndarray:
    """``contrast`` in ``count`` seeded balls of radius 0.03-0.08, 1 elsewhere, at the
    ``(n+2)^3`` grid points including the boundary, indexed ``[iz, iy, ix]``."""
    rng = np.random.default_rng(seed)
    z, y, x = np.meshgrid(*(np.arange(n + 2) / (n + 1),) * 3, indexing="ij")
    kappa = np.ones_like(x)
    for c, r in zip(rng.uniform(0, 1, (count, 3)), rng.uniform(0.03, 0.08, count)):
        kappa[(x - c[0]) ** 2 + (y - c[1]) ** 2 + (z - c[2]) ** 2 <= r * r] = CONTRAST
    return kappa


def layered(n: int, seed: int = 0, layers: int = 8, per_axis: int = 2) -> np.ndarray:
    """Layers across y with seeded values in 1..100, and ``per_axis`` square channels of
    ``contrast`` (side 1/16) along each axis at seeded positions, same layout as
    :func:`inclusions`."""
    rng = np.random.default_rng(seed)
    z, y, x = np.meshgrid(*(np.arange(n + 2) / (n + 1),) * 3, indexing="ij")
    values = 10.0 ** rng.uniform(0, 2, layers)
    kappa = values[np.minimum((y * layers).astype(int), layers - 1)]
    w = 1.0 / 32
    axes = (x, y, z)
    for along in range(3):
        across = [axes[a] for a in range(3) if a != along]
        for c in rng.uniform(0.15, 0.85, (per_axis, 2)):
            kappa[(np.abs(across[0] - c[0]) <= w) & (np.abs(across[1] - c[1]) <= w)] = CONTRAST
    return kappa


PROBLEMS = {"inclusions": inclusions, "layered": layered}


def assemble(kappa: np.ndarray) -> PETSc.Mat:
    r"""This rank's rows of :math:`(Au)_p = h^{-2}\sum_{q\sim p}\kappa_{pq}(u_p-u_q)`,
    :math:`\kappa_{pq}` the harmonic mean, in natural ordering, as a user's program assembles
    them: PETSc's default row distribution, MatSetValues row by row block."""
    n = kappa.shape[0] - 2
    N = n ** 3
    A = PETSc.Mat().createAIJ((N, N), nnz=(7, 6), comm=COMM)
    lo, hi = A.getOwnershipRange()
    rows = np.arange(lo, hi)
    ix, iy, iz = rows % n, (rows // n) % n, rows // (n * n)
    here = kappa[iz + 1, iy + 1, ix + 1]
    diag = np.zeros(len(rows))
    cols, vals = [], []
    for d, (dz, dy, dx) in enumerate([(0, 0, 1), (0, 1, 0), (1, 0, 0)]):
        for s in (-1, 1):
            there = kappa[iz + 1 + s * dz, iy + 1 + s * dy, ix + 1 + s * dx]
            face = 2 * here * there / (here + there) * (n + 1) ** 2
            diag += face
            j = (ix, iy, iz)[d] + s
            inside = (j >= 0) & (j < n)
            cols.append(np.where(inside, rows + s * n ** d, -1))  # -1: PETSc ignores it
            vals.append(-face)
    cols.append(rows), vals.append(diag)
    C, V = np.stack(cols, 1).astype(PETSc.IntType), np.stack(vals, 1)
    for k, r in enumerate(rows):
        A.setValues([r], C[k], V[k])
    A.assemble()
    coords = np.stack([ix + 1, iy + 1, iz + 1], 1) / (n + 1)
    set_coordinates(A, coords)
    return A


def row_blocks(N: int, parts: int) -> list[np.ndarray]:
    """This rank's share of the ``parts`` contiguous row blocks of PETSc's default split of
    ``N`` rows over ``parts`` ranks (block ``k`` goes to rank ``k * size // parts``)."""
    sizes = [N // parts + (k < N % parts) for k in range(parts)]
    starts = np.concatenate([[0], np.cumsum(sizes)])
    rank, size = COMM.Get_rank(), COMM.Get_size()
    return [np.arange(starts[k], starts[k + 1]) for k in range(parts)
            if k * size // parts == rank]


def configure(pc: PETSc.PC, method: str, opts: dict, kind: str, N: int, parts: int) -> None:
    prefix = pc.getOptionsPrefix()
    db = PETSc.Options()
    if method in ("gamg", "gamg-tuned"):  # PETSc's GAMG, defaults or tuned
        for k, v in PETSC_REFERENCE[method].items():
            db[f"{prefix}{k}"] = v
    elif method == "asm":
        pc.setType("asm")
        pc.setASMTotalSubdomains(parts)  # each rank's rows split into contiguous blocks
        pc.setASMOverlap(1)
        pc.setASMType(PETSc.PC.ASMType.BASIC)
        db[f"{prefix}sub_pc_type"] = "lu"
    else:
        pc.setType("python")
        pc.setPythonContext(TwoLevelSchwarzPC())
        for k, v in opts.items():
            db[f"{prefix}ddlearn_{k}"] = v
        if kind == "rows":
            set_subdomains(pc, row_blocks(N, parts), overlapping=False)
        else:
            db[f"{prefix}ddlearn_partition"] = kind
            db[f"{prefix}ddlearn_subdomains"] = parts


def run(A: PETSc.Mat, name: str, kind: str, parts: int, tag: str) -> dict:
    method, opts, krylov = CONFIGS[name]
    N = A.getSize()[0]
    ksp = PETSc.KSP().create(comm=COMM)
    ksp.setOptionsPrefix(f"{tag}_")
    ksp.setOperators(A)
    ksp.setType(krylov)
    if krylov == "gmres":
        ksp.setGMRESRestart(200)
    ksp.setTolerances(rtol=1e-8, max_it=1000)
    pc = ksp.getPC()
    configure(pc, method, opts, kind, N, parts)
    ksp.setFromOptions()
    b, x = A.createVecs()
    b.set(1.0)
    setup_s = bench.wall(ksp.setUp)
    solve_s = bench.wall(lambda: ksp.solve(b, x))
    r = b.duplicate()
    A.mult(x, r)
    r.aypx(-1.0, b)
    row = {"config": name, "method": method, "krylov": krylov, "kind": kind, "options": opts,
           "iterations": ksp.getIterationNumber(), "reason": int(ksp.getConvergedReason()),
           "converged": ksp.getConvergedReason() > 0, "true_relres": r.norm() / b.norm(),
           "setup_s": setup_s, "solve_s": solve_s}
    if method == "asm":  # the blocks PETSc made of the parts (parts / size per rank)
        row["blocks"] = COMM.allreduce(len(pc.getASMSubKSP()))
    if method == "ddlearn":
        meta = pc.getPythonContext().meta
        row["n0"] = meta["n0"]
        if "spectral" in meta:
            sp_ = meta["spectral"]
            row["largest_kept_lambda"] = sp_["largest_kept_lambda"]
            row["per_subdomain"] = [sp_["per_subdomain_min"], sp_["per_subdomain_max"]]
    for o in (ksp, b, x, r):
        o.destroy()
    db = PETSc.Options()
    for key in list(db.getAll()):
        if key.startswith(f"{tag}_"):
            db.delValue(key)
    return row


def summary(data: dict, seconds: bool = False) -> str:
    """The ablation table: CG iterations (``seconds``: set-up + solve seconds, slowest rank)
    per configuration, problem and subdomain kind."""
    cols = sorted({(r["problem"], r["kind"]) for r in data["rows"]})
    its = {(r["config"], r["problem"], r["kind"]):
           (f"{r['setup_s'] + r['solve_s']:.2f}" if seconds else f"{r['iterations']}")
           + ("" if r["converged"] else " n.c.") for r in data["rows"]}
    n0 = {(r["config"], r["problem"], r["kind"]): r.get("n0") for r in data["rows"]}
    names = [c for c in CONFIGS if any(k[0] == c for k in its)]
    out = ["| configuration | " + " | ".join(f"{p} {k}" for p, k in cols) + " | n_0 |",
           "|---|" + "---:|" * (len(cols) + 1)]
    for c in names:
        sizes = sorted({n0[(c, p, k)] for p, k in cols if n0.get((c, p, k)) is not None})
        out.append(f"| {c} | " + " | ".join(its.get((c, p, k), "–") for p, k in cols)
                   + f" | {'/'.join(map(str, sizes)) or '–'} |")
    return "\n".join(out)


def _ranks(data: dict) -> str:
    """Whose seconds: the run's ranks (and cores, where it recorded them)."""
    stamp = data.get("provenance", {})
    cores = f" on {stamp['cores']} cores" if "cores" in stamp else ""
    over = " (oversubscribed)" if stamp.get("cores", data["ranks"]) < data["ranks"] else ""
    return f"The slowest rank's, {data['ranks']} ranks{cores}{over}.\n\n"


def main(argv: list[str] | None = None) -> dict:
    ap = bench.parser("geneo_reference", __doc__, "12^3, 8 subdomains, four configs")
    ap.add_argument("--n", type=int, default=32, help="grid points per direction")
    ap.add_argument("--parts", type=int, default=16, help="subdomains (rows: of that many ranks)")
    ap.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=list(PROBLEMS))
    ap.add_argument("--kinds", nargs="+", default=["rows", "rcb"], choices=["rows", "rcb"])
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    args = bench.parse(ap, argv)
    if args.report:
        files = bench.results(args)
        bench.write_readme(args, "The spectral coarse space against the reference "
                           "implementation's settings, 3D",
                           [("CG iterations per configuration", summary(files["geneo_reference"])),
                            ("Set-up + solve seconds per configuration",
                             _ranks(files["geneo_reference"])
                             + summary(files["geneo_reference"], seconds=True))],
                           files)
        return files["geneo_reference"]
    if args.quick:
        args.n, args.parts = 12, 8
        args.configs = ["asm", "gamg", "gamg-tuned", "nicolaides", "ours", "reference"]
    data = {"n": args.n, "parts": args.parts, "ranks": COMM.Get_size(), "contrast": CONTRAST,
            "rtol": 1e-8, "norm": "PETSc default (preconditioned for CG)", "rows": []}
    for problem in args.problems:
        A = assemble(PROBLEMS[problem](args.n))
        for kind in args.kinds:
            for k, name in enumerate(args.configs):
                if kind != "rows" and CONFIGS[name][0] != "ddlearn":
                    continue  # PETSc's ASM and GAMGs do not see the subdomain kind
                row = run(A, name, kind, args.parts, f"g{k}")
                row["problem"] = problem
                data["rows"].append(row)
                PETSc.Sys.Print(f"{problem:10s} {kind:4s} {name:24s} its {row['iterations']:4d} "
                                f"n0 {row.get('n0', '-')} setup {row['setup_s']:.2f}s "
                                f"solve {row['solve_s']:.2f}s", flush=True)
                bench.write(args, data)
        A.destroy()
    bench.show(summary(data))
    return data


if __name__ == "__main__":
    main()
