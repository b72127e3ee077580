"""ddlearn's two-level Schwarz PC on matrices it did not assemble.

    mpiexec -n 2 python benchmarks/any_matrix.py [--quick] [--out DIR]
    python benchmarks/any_matrix.py --report     (README.md: condensed tables, set-up ratios, every row)

1. *Orderings*: 2D 255² (Poisson and channels, contrast 1e6), N = 64, overlap 1: the PC from
   options on the plain petsc4py client's matrix (natural ordering, PETSc's default rows) and on
   the same matrix in ddlearn's subdomain ordering: CG iterations and apply parity; the
   structured harness method ``twolevel`` (box overlap, so other subdomains) for reference.
2. *Unstructured FEM* (scikit-fem P1, jittered Delaunay mesh, RCM numbering, >= 100 000
   unknowns): one-level, Nicolaides (METIS and boxes), hats (boxes) for N = 16, 64, 256 and
   PETSc's GAMG with its defaults (``gamg``) and tuned (``gamg-tuned``: threshold 0.01,
   ``PETSC_REFERENCE["gamg-tuned"]`` of :mod:`ddlearn.harness.options`), constant and
   channels coefficient; set-up split (partition, coarse basis, local factorisations, coarse
   matrix) beside PETSc's own PCASM set-up with the same N and overlap.

CG to rtol 1e-8 on the unpreconditioned residual, b from the client, true residual checked.
Writes ``any_matrix.json`` (default folder ``benchmarks/results/any_matrix/``); times are the
slowest rank's, one rank per core (more ranks than cores slow PETSc's collective set-ups,
GAMG's above all, many-fold), and compare methods of one run, not machines.
"""
from __future__ import annotations

import json
import os

import numpy as np
import petsc4py

petsc4py.init([])
from mpi4py import MPI  # noqa: E402
from petsc4py import PETSc  # noqa: E402

from ddlearn.decomposition import Decomposition  # noqa: E402
from ddlearn.decomposition.petsc_rows import RowLayout as Layout  # noqa: E402
from ddlearn.decomposition.problems import make_problem  # noqa: E402
from ddlearn.harness import bench  # noqa: E402
from ddlearn.harness.methods import Case, run_methods  # noqa: E402
from ddlearn.harness.options import PETSC_REFERENCE, set_defaults  # noqa: E402
from ddlearn.pc import TwoLevelSchwarzPC, set_coordinates  # noqa: E402

COMM = MPI.COMM_WORLD


def _solve(A, b, configure, **ctx_args):
    """CG with the PC ``configure`` sets; returns iterations, residual, times, PC timing."""
    ksp = PETSc.KSP().create(comm=A.getComm())
    ksp.setOperators(A)
    ksp.setType("cg")
    ksp.setTolerances(rtol=1e-8, max_it=5000)
    ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
    configure(ksp.getPC())
    ksp.setFromOptions()
    x = b.duplicate()
    # KSPSetUp leaves PCASM's block factorisations to the first solve: count them as set-up
    setup_s = bench.wall(lambda: (ksp.setUp(), ksp.setUpOnBlocks()))
    solve_s = bench.wall(lambda: ksp.solve(b, x))
    r = b.duplicate()
    A.mult(x, r)
    r.aypx(-1.0, b)
    pc = ksp.getPC()
    timing = dict(pc.getPythonContext().timing) if pc.getType() == "python" else {}
    out = {"iterations": ksp.getIterationNumber(), "converged": ksp.getConvergedReason() > 0,
           "rnorm_true": r.norm() / b.norm(), "setup_s": setup_s, "solve_s": solve_s,
           "split": timing}
    for o in (ksp, x, r):
        o.destroy()
    return out


def _ddlearn_pc(coarse, N, partition=None):
    def configure(pc):
        pc.setType("python")
        pc.setPythonContext(TwoLevelSchwarzPC(coarse, N, 1, partition))
    return configure


def _petsc_asm(N):
    def configure(pc):
        pc.setType("asm")
        pc.setASMType(PETSc.PC.ASMType.BASIC)
        pc.setASMTotalSubdomains(N)
        pc.setASMOverlap(1)
        opts = PETSc.Options()
        opts.setValue("-sub_pc_type", "lu")
    return configure


def _petsc_reference(name):
    """PETSc's ``PETSC_REFERENCE[name]`` (GAMG's defaults or tuned), its options under the
    prefix ``<name>_`` (``-gamg_tuned_pc_gamg_threshold 0.02`` on the command line wins)."""
    def configure(pc):
        pc.setOptionsPrefix(f"{name.replace('-', '_')}_")
        set_defaults(pc.getOptionsPrefix(), PETSC_REFERENCE[name])
    return configure


def orderings(n, N):
    petsc_client = bench.load_example("petsc_client")
    rows = []
    for name, contrast in (("poisson2d", 1.0), ("channels", 1e6)):
        problem = make_problem(name, n, **({"contrast": contrast} if name == "channels" else {}))
        A_nat = petsc_client.assemble(n, contrast)
        set_coordinates(A_nat, petsc_client.coordinates(A_nat, n))
        layout = Layout(Decomposition(problem.grid, N, 1))
        A_dd = layout.matrix(problem)
        set_coordinates(A_dd, problem.coordinates()[layout.local_natural()])
        ones = np.ones(problem.n)
        b_nat = A_nat.createVecLeft()
        b_nat.set(1.0)
        b_dd = layout.from_natural(ones)
        x = np.random.default_rng(0).standard_normal(problem.n)
        for coarse in ("hats", "nicolaides"):
            res = {}
            ys = {}
            for label, A, b in (("natural", A_nat, b_nat), ("ddlearn", A_dd, b_dd)):
                res[label] = _solve(A, b, _ddlearn_pc(coarse, N))
                pc = PETSc.PC().create(comm=A.getComm())
                pc.setOperators(A, A)
                _ddlearn_pc(coarse, N)(pc)
                pc.setUp()
                X, Y = A.createVecs()
                lo, hi = X.getOwnershipRange()
                perm = np.arange(problem.n) if label == "natural" else layout.perm
                X.setArray(x[perm[lo:hi]])
                pc.apply(X, Y)
                y = np.empty(problem.n)
                y[perm] = np.concatenate(COMM.allgather(Y.getArray(readonly=True).copy()))
                ys[label] = y
                for o in (pc, X, Y):
                    o.destroy()
            parity = float(np.abs(ys["natural"] - ys["ddlearn"]).max() /
                           np.abs(ys["ddlearn"]).max())
            rows.append({"problem": name, "n": problem.n, "N": N, "coarse": coarse,
                         "its_natural": res["natural"]["iterations"],
                         "its_ddlearn": res["ddlearn"]["iterations"],
                         "rnorm_natural": res["natural"]["rnorm_true"],
                         "apply_parity": parity})
        case = Case.build(problem, N, 1)
        b = case.layout.from_natural(ones)
        (twolevel,) = run_methods(case, ["twolevel"], b)
        rows[-2]["its_structured_twolevel"] = rows[-1]["its_structured_twolevel"] = \
            twolevel.iterations
        for o in (A_nat, A_dd, b_nat, b_dd, b):
            o.destroy()
        case.destroy()
        PETSc.Sys.Print(json.dumps(rows[-2:]))
    return rows


def fem(m, Ns, coefficients):
    fem_diffusion = bench.load_example("fem_diffusion")
    rows = []
    for name in coefficients:
        A_sp, b_np, coords = fem_diffusion.system(m, name, 1e6)
        A = fem_diffusion.to_petsc(A_sp)
        lo, hi = A.getOwnershipRange()
        set_coordinates(A, coords[lo:hi])
        b = A.createVecLeft()
        b.setArray(b_np[lo:hi])
        methods = {name: _petsc_reference(name) for name in ("gamg", "gamg-tuned")}
        for N in Ns:
            methods.update({
                f"one-level N={N}": _ddlearn_pc("none", N, "metis"),
                f"nicolaides metis N={N}": _ddlearn_pc("nicolaides", N, "metis"),
                f"nicolaides boxes N={N}": _ddlearn_pc("nicolaides", N, "boxes"),
                f"hats boxes N={N}": _ddlearn_pc("hats", N, "boxes"),
                f"PCASM N={N}": _petsc_asm(N)})
        for label, configure in methods.items():
            r = _solve(A, b, configure)
            PETSc.Options().delValue("-sub_pc_type")
            rows.append({"coefficient": name, "unknowns": A_sp.shape[0], "method": label, **r})
            PETSc.Sys.Print(f"{name} {label}: {r['iterations']} its, setup {r['setup_s']:.2f} s "
                            f"{r['split']}")
        for o in (A, b):
            o.destroy()
    return rows


def report(data) -> str:
    out = ["| problem | coarse | N | CG its, natural ordering | CG its, ddlearn ordering | "
           "apply parity | structured twolevel (box overlap) |",
           "|---|---|---:|---:|---:|---:|---:|"]
    for r in data["orderings"]:
        out.append(f"| {r['problem']} {int(np.sqrt(r['n']))}² | {r['coarse']} | {r['N']} | "
                   f"{r['its_natural']} | {r['its_ddlearn']} | {r['apply_parity']:.1e} | "
                   f"{r['its_structured_twolevel']} |")
    out += ["", "| coefficient | unknowns | method | CG its | setup s | partition s | "
            "coarse basis s | local s | coarse matrix s | solve s |",
            "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in data["fem"]:
        s = r["split"]
        cells = [f"{s[k]:.2f}" if k in s else "" for k in ("partition_s", "basis_s", "local_s",
                                                           "coarse_s")]
        out.append(f"| {r['coefficient']} | {r['unknowns']} | {r['method']} | {r['iterations']}"
                   f"{'' if r['converged'] else ' (not converged)'} | {r['setup_s']:.2f} | "
                   + " | ".join(cells) + f" | {r['solve_s']:.2f} |")
    return "\n".join(out)


FEM_LABELS = (("one-level", "one-level (METIS)"), ("nicolaides metis", "Nicolaides (METIS)"),
              ("nicolaides boxes", "Nicolaides (boxes)"), ("hats boxes", "hats (boxes)"),
              ("PCASM", "PETSc PCASM"), ("gamg", "PETSc GAMG"),
              ("gamg-tuned", "PETSc GAMG tuned"))
#: PETSc's preconditioners that do not depend on N (one row, under the smallest N)
BY_N_ONCE = ("gamg", "gamg-tuned")


def summary(data) -> str:
    """The README's condensed tables: the orderings, the unstructured client's iterations and
    set-up per N, and the set-up ratios against PETSc's PCASM with the same N."""
    out = report(data).split("\n\n")[0].split("\n")
    out[0] = out[0].replace("structured twolevel (box overlap)", "structured twolevel")
    fem_rows = data["fem"]
    Ns = sorted({int(r["method"].rsplit("N=", 1)[1]) for r in fem_rows if "N=" in r["method"]})
    out += ["", "| coefficient | method | " + " | ".join(f"N={N} its | setup s" for N in Ns) + " |",
            "|---|---|" + "---:|---:|" * len(Ns)]
    by = {(r["coefficient"], r["method"]): r for r in fem_rows}
    coefficients = list(dict.fromkeys(r["coefficient"] for r in fem_rows))
    for c in coefficients:
        name = "constant" if c == "constant" else f"{c} 1e6"
        for key, label in FEM_LABELS:
            cells = []
            for N in Ns:
                # GAMG does not depend on N: one row, under the smallest N
                r = by.get((c, key) if key in BY_N_ONCE else (c, f"{key} N={N}"))
                r = None if key in BY_N_ONCE and N != Ns[0] else r
                cells += ([f"{r['iterations']}", f"{r['setup_s']:.2f}"] if r else ["", ""])
            if not any(cells):
                continue  # a method this run did not measure
            out.append(f"| {name} | {label} | " + " | ".join(cells) + " |")
    ratios, hats, share, part = [], [], [], []
    for r in fem_rows:
        if not r["split"]:
            continue
        N = r["method"].rsplit("N=", 1)[1]
        ratio = r["setup_s"] / by[r["coefficient"], f"PCASM N={N}"]["setup_s"]
        ratios.append(ratio)
        if r["method"].startswith("hats"):
            hats.append(ratio)
        share.append(r["split"]["partition_s"] / r["setup_s"])
        part.append(r["split"]["partition_s"])
    out += ["", f"Set-up / PETSc PCASM set-up (same coefficient and N): {min(ratios):.2f}–"
            f"{max(ratios):.2f}× (hats {min(hats):.2f}–{max(hats):.2f}×); partition on rank 0 "
            f"{min(part):.2f}–{max(part):.2f} s, {100 * min(share):.0f}–"
            f"{100 * max(share):.0f} % of the set-up."]
    return "\n".join(out)


def main(argv: list[str] | None = None):
    ap = bench.parser("any_matrix", __doc__, "small sizes (a smoke run)")
    args = bench.parse(ap, argv)
    if args.report:
        files = bench.results(args)
        data = files["any_matrix"]
        bench.write_readme(args, "ddlearn's two-level Schwarz PC on matrices it did not "
                           "assemble", [("Condensed", summary(data)),
                                        ("Every run", report(data))], files)
        return data
    n, N, m, Ns = (31, 16, 40, (4, 16)) if args.quick else (255, 64, 320, (16, 64, 256))
    data = {"ranks": COMM.Get_size(), "cores": os.cpu_count(),
            "orderings": orderings(n, N),
            "fem": fem(m, Ns, ("constant", "channels"))}
    path = bench.write(args, data)
    bench.show(report(data))
    bench.show(f"wrote {path}")
    return data


if __name__ == "__main__":
    main()
