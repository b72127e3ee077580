r"""One preconditioner over a sequence of coefficient fields on the same mesh: the loop of
uncertainty quantification, design and time stepping, A(κ_t) x = b for t = 1 … F.

    mpiexec -n 2 python benchmarks/field_sequence.py [--quick] [--out DIR] [--fields F]
             [--dims 2 3] [--families channels inclusions lognormal] [--sequences iid moving]
             [--methods spectral spectral-warm learned learned-previous hats gamg gamg-tuned]
             [--n2 127 --N2 16 --n3 24 --N3 8] [--contrast 1e6] [--nev 8] [--model FILE]
             [--name STEM]
    python benchmarks/field_sequence.py --report     (README.md: condensed and full tables, plots)

Per dimension, family and sequence, every method keeps ONE KSP (CG to rtol 1e-8 on the
unpreconditioned residual, at most 3000 iterations, b a seeded uniform random vector, zero
initial guess) and ONE matrix (natural ordering, PETSc's default rows, grid coordinates
attached) over all ``--fields`` fields: per field the matrix's values are rewritten in place
(``zeroEntries``, ``setValuesCSR`` of the rank's rows of the new field, ``assemble``: the same
nonzero pattern), then ``ksp.setOperators(A); ksp.setUp()`` and one solve. The methods run one
after another over the whole sequence, their objects destroyed in between.

Fields (the seeded families of :mod:`ddlearn.decomposition.coefficients`, ``random_<family>``
in 2D and ``random_<family>3d`` in 3D, contrast ``--contrast``):

- ``iid``: independent test seeds ``SEEDS["test"] + t`` (never used in training or
  validation), t = 0 … F-1;
- ``moving``: the field of seed ``SEEDS["test"]`` shifted by t cells along x with periodic
  wrap (``np.roll`` of the grid-point array, boundary ring included): every channel and
  inclusion moves by one cell per field, the statistics stay those of the family (the wrap adds
  one seam where the field's right edge meets its left).

Methods (``ddlearn.pc.TwoLevelSchwarzPC(subdomains=N)`` on box subdomains, overlap 1, exact
local solves; the values-only re-setup keeps the partition and rebuilds the value-dependent
coarse basis and the factorisations): ``spectral`` (``Spectral(nev=8)``, cold eigensolves
every field), ``spectral-warm`` (``Spectral(nev=8, warm_start=True)``: SLEPc started from the
previous field's eigenvectors), ``learned`` (``Learned(nev=8)``, the network's start vectors
every field), ``learned-previous`` (``Learned(nev=8, start="previous")``: the refinement
started from the previous field's coarse vectors), ``hats`` (Q1 hats on the grid coordinates)
and PETSc's GAMG with its defaults (``gamg``) and tuned (``gamg-tuned``: threshold 0.01), as
``PETSC_REFERENCE`` of :mod:`ddlearn.harness.options` gives them, rebuilt by PETSc at every
set-up. A method the library refuses for a dimension (the learned model's subdomain size range) is
recorded as refused with its message.

Default sizes: 2D 127², N = 16 (32² per subdomain, the learned model's training resolution),
3D 24³, N = 8 (12³ per subdomain); ``--quick``: 63², N = 4 and 12³, N = 8, 3 fields, the
channels family.

Recorded per field and method: iterations, the value update, set-up, solve and total
(set-up + solve) seconds of the slowest rank, n_0, the PC's set-up split (``ctx.timing``), the
coarse space's summary (``ctx.meta["spectral"]`` / ``["learned"]``: eigensolver statistics,
warm / cold subdomains, the learned basis split), the matrix's Frobenius norm and
:math:`b^TAb` (fingerprints of the values: a shifted field can keep the norm), the peak
resident memory (``VmHWM``, max over ranks; reset before each method) after the field.
Memory growth = (peak after the last field - peak after the first) / peak after the first.
The learned model's one-off training time (its record's ``data_s + train_s``) is amortised
over the loop. Writes ``field_sequence.json`` (atomically, after every method), a markdown
table per (dimension, family, sequence), ``field_sequence.png`` (cumulative seconds against the
field index; learned with its training time as a dashed offset) and
``field_sequence_iterations.png``. ``--name`` writes ``<STEM>.json`` instead (a run of some
methods only, e.g. ``field_sequence_gamg``: GAMG with its defaults and tuned on the same
sequences); ``--report`` gives each such file its own tables, beside those of
``field_sequence.json``.

JSON: the settings (``ranks``, ``cores``, ``contrast``, ``fields``, ``nev``, ``sizes`` per
dimension, ``models`` per dimension and their ``training`` records) and ``runs``, one per
(dimension, family, sequence, method): ``status`` (ok,
refused, error; ``message``, ``failed_field``), ``peak_start_mb``, ``fields`` (one record per
field as above) and ``summary`` (means, maxima, ``total_s`` over the loop, ``memory_growth``).
Paths are relative to the repository root. ``--model FILE`` gives ``Learned(model=FILE)``;
by default the library picks its model for the dimension.
"""
from __future__ import annotations

import gc
import json
import os

import numpy as np
import matplotlib
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import petsc4py

petsc4py.init([])
from mpi4py import MPI  # noqa: E402
from petsc4py import PETSc  # noqa: E402

from ddlearn.classical.coarse.spectral import Spectral  # noqa: E402
from ddlearn.decomposition.coefficients import coefficient  # noqa: E402
from ddlearn.decomposition.problems import Diffusion, family_problem_name  # noqa: E402
from ddlearn.harness import bench  # noqa: E402
from ddlearn.harness.options import PETSC_REFERENCE  # noqa: E402
from ddlearn.harness.systems import natural_matrix, solve_once  # noqa: E402
from ddlearn.learned.coarse.learned import PRETRAINED_BY_DIM, Learned  # noqa: E402
from ddlearn.learned.coarse.local_training import SEEDS  # noqa: E402
from ddlearn.pc import TwoLevelSchwarzPC  # noqa: E402

COMM = MPI.COMM_WORLD
FAMILIES = ("channels", "inclusions", "lognormal")
SEQUENCES = ("iid", "moving")
METHODS = ("spectral", "spectral-warm", "learned", "learned-previous", "hats", "gamg",
           "gamg-tuned")
#: PETSc's preconditioners among the methods (by PETSC_REFERENCE's name)
REFERENCE = ("gamg", "gamg-tuned")
#: dim -> (grid points per direction, subdomains)
SIZES = {2: (127, 16), 3: (24, 8)}
QUICK = {2: (63, 4), 3: (12, 8)}
QUICK_FIELDS = 3
#: target of the memory growth over the loop
GROWTH_TARGET = 0.10


def make_config(method: str, nev: int, model: str | None):
    """The PC context's coarse space for ``method``, fresh (a coarse space keeps state from
    one field to the next); for GAMG its name in ``PETSC_REFERENCE``."""
    if method in REFERENCE:
        return method
    space = {"spectral": lambda: Spectral(nev=nev),
             "spectral-warm": lambda: Spectral(nev=nev, warm_start=True),
             "learned": lambda: Learned(model=model, nev=nev),
             "learned-previous": lambda: Learned(model=model, nev=nev, start="previous"),
             "hats": lambda: "hats"}[method]()
    return space


class Sequence:
    """The fields of one sequence: ``kappa(t)``, the grid-point array of field ``t``."""

    def __init__(self, kind: str, family: str, dim: int, n: int, contrast: float):
        self.kind, self.family, self.dim, self.n, self.contrast = kind, family, dim, n, contrast
        self._base = None

    def label(self, t: int) -> dict:
        if self.kind == "iid":
            return {"seed": SEEDS["test"] + t, "shift": 0}
        return {"seed": SEEDS["test"], "shift": t}

    def kappa(self, t: int) -> np.ndarray:
        if self.kind == "iid":
            return coefficient(self.family, self.n, self.contrast, SEEDS["test"] + t, self.dim)
        if self._base is None:
            self._base = coefficient(self.family, self.n, self.contrast, SEEDS["test"],
                                     self.dim)
        # x is the last (fastest) axis of the array: [iy, ix] / [iz, iy, ix]
        return np.roll(self._base, t, axis=-1)

    def problem(self, t: int) -> Diffusion:
        return Diffusion(self.n, self.kappa(t), self.dim,
                         label=family_problem_name(self.family, self.dim))


def _clean(value):
    """JSON-ready: numpy scalars and arrays to Python, absolute paths in the checkout made
    relative to it."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, np.ndarray):
        return _clean(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, str):  # paths (a model's, in messages) relative to the checkout
        return value.replace(str(bench.ROOT) + os.sep, "")
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return str(value)


def _error_message(e: BaseException) -> tuple[str, bool]:
    """The message of an error raised in a set-up (petsc4py wraps one raised in a Python PC in
    a PETSc.Error whose cause/context carries it) and whether it is a refusal (a ValueError:
    :func:`ddlearn.decomposition.collective.collective_check` raises it on every rank)."""
    chain = bench.error_chain(e)
    refused = any(c.startswith("ValueError: ") for c in chain)
    own = [c for c in chain if not c.startswith("PETSc error")]
    return (own[-1] if own else " <- ".join(chain))[:2000], refused


def update_values(A: PETSc.Mat, problem: Diffusion) -> None:
    """Rewrite the values of this rank's rows of ``A`` from ``problem`` (same pattern)."""
    lo, hi = A.getOwnershipRange()
    rows = problem.rows(np.arange(lo, hi))
    A.zeroEntries()
    A.setValuesCSR(rows.indptr, rows.indices, rows.data)
    A.assemble()


def _ksp(A: PETSc.Mat, N: int, config) -> PETSc.KSP:
    ksp = PETSc.KSP().create(comm=A.getComm())
    ksp.setType("cg")
    # no divergence test: at contrast 1e6 the residual of a weak coarse space may peak above
    # PETSc's default 1e5 ||b|| on its way down
    ksp.setTolerances(rtol=1e-8, divtol=1e30, max_it=3000)
    ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
    pc = ksp.getPC()
    if isinstance(config, str) and config in REFERENCE:  # PETSc's GAMG, defaults or tuned
        prefix = f"field_sequence_{config.replace('-', '_')}_"
        opts = PETSc.Options()
        for k, v in PETSC_REFERENCE[config].items():
            opts.setValue(prefix + k, v)
        ksp.setOptionsPrefix(prefix)
        ksp.setFromOptions()
        for k in PETSC_REFERENCE[config]:
            opts.delValue(prefix + k)
    else:
        pc.setType("python")
        pc.setPythonContext(TwoLevelSchwarzPC(subdomains=N, coarse_space=config))
    return ksp


def run_sequence(seq: Sequence, method: str, N: int, fields: int, nev: int,
                 model: str | None) -> dict:
    """All ``fields`` fields of ``seq`` with one KSP and one matrix for ``method``."""
    rec = {"dim": seq.dim, "n": seq.n, "N": N, "unknowns": seq.n ** seq.dim,
           "family": seq.family, "problem": family_problem_name(seq.family, seq.dim),
           "sequence": seq.kind, "method": method, "status": "ok", "fields": []}
    if method.startswith("learned"):
        rec["model"] = bench.relative(model_for(seq.dim, model))
    gc.collect()
    bench.peak_reset()
    COMM.Barrier()
    rec["peak_start_mb"] = max(bench.peak_mb_ranks())
    objs = []
    A = ksp = None
    try:
        for t in range(fields):
            problem = seq.problem(t)
            if A is None:
                update_s = bench.wall(lambda: objs.append(natural_matrix(problem)))
                A = objs[-1]
                b = A.createVecLeft()
                lo, hi = A.getOwnershipRange()
                b.setArray(np.random.default_rng(0).uniform(-1, 1, problem.n)[lo:hi])
                x, r = b.duplicate(), b.duplicate()
                objs += [b, x, r]
                ksp = _ksp(A, N, make_config(method, nev, model))
                objs.append(ksp)
            else:
                update_s = bench.wall(lambda: update_values(A, problem))

            def setup():
                ksp.setOperators(A)
                ksp.setUp()
                ksp.setUpOnBlocks()
            setup_s = bench.wall(setup)
            x.set(0.0)
            solved = solve_once(ksp, A, b, x)
            A.mult(b, r)  # b^T A b: a fingerprint of the values that a shift changes too
            row = {"index": t, **seq.label(t), **solved, "update_s": update_s,
                   "setup_s": setup_s, "total_s": setup_s + solved["solve_s"],
                   "matrix_norm": A.norm(), "bAb": r.dot(b)}
            pc = ksp.getPC()
            if pc.getType() == "python":
                ctx = pc.getPythonContext()
                row["n0"] = int(ctx.meta.get("n0", 0))
                row["split"] = {k: v for k, v in ctx.timing.items()
                                if isinstance(v, (int, float))}
                coarse = ctx.meta.get("spectral") or ctx.meta.get("learned")
                if coarse:
                    row["coarse"] = _clean(coarse)
            else:
                row["n0"], row["split"] = 0, {}
            row["peak_mb"] = max(bench.peak_mb_ranks())
            rec["fields"].append(_clean(row))
            _log(rec, row)
    except Exception as e:  # noqa: BLE001 - a refused or failing method is a result
        message, refused = _error_message(e)
        message = _clean(message)
        rec.update(status="refused" if refused else "error", message=message,
                   failed_field=len(rec["fields"]))
        PETSc.Sys.Print(f"{seq.dim}D {seq.family} {seq.kind} {method}: "
                        f"{rec['status']} at field {len(rec['fields'])}: {message[:300]}")
    finally:
        for o in reversed(objs):
            o.destroy()
        gc.collect()
    rec["summary"] = summarise(rec)
    return _clean(rec)


def _log(rec: dict, row: dict) -> None:
    c = row.get("coarse") or {}
    extra = ""
    if "warm_subdomains" in c:
        cold = c.get("cold_subdomains", c.get("subdomains", 0) - c["warm_subdomains"])
        extra = f"  warm {c['warm_subdomains']} cold {cold}"
    if "eps_iterations" in c:
        extra += f"  eps its {c['eps_iterations']}"
    its = row["iterations"] if row["converged"] else f">{row['iterations']}"
    PETSc.Sys.Print(f"{rec['dim']}D {rec['family']:10s} {rec['sequence']:6s} "
                    f"{rec['method']:16s} field {row['index']:3d}: its {its:>5}  set-up "
                    f"{row['setup_s']:.3f} s  solve {row['solve_s']:.3f} s  n0 {row['n0']}  "
                    f"peak {row['peak_mb']:.0f} MB{extra}")


def summarise(rec: dict) -> dict:
    rows = rec["fields"]
    if not rows:
        return {"fields": 0}
    its = [r["iterations"] for r in rows]
    peaks = [r["peak_mb"] for r in rows]
    return {"fields": len(rows), "mean_its": float(np.mean(its)), "max_its": int(max(its)),
            "not_converged": sum(not r["converged"] for r in rows),
            "mean_update_s": float(np.mean([r["update_s"] for r in rows])),
            "mean_setup_s": float(np.mean([r["setup_s"] for r in rows])),
            "mean_solve_s": float(np.mean([r["solve_s"] for r in rows])),
            "mean_total_s": float(np.mean([r["total_s"] for r in rows])),
            "total_s": float(np.sum([r["total_s"] for r in rows])),
            # the first field builds everything; the re-setups are what the loop repeats
            "mean_resetup_s": float(np.mean([r["setup_s"] for r in rows[1:]]))
            if len(rows) > 1 else None,
            "peak_first_mb": peaks[0], "peak_last_mb": peaks[-1],
            "memory_growth": (peaks[-1] - peaks[0]) / peaks[0] if peaks[0] > 0 else None}


def model_for(dim: int, model: str | None) -> str:
    """The learned model a run in ``dim`` uses: ``--model``, else the library's choice for the
    dimension."""
    return model or PRETRAINED_BY_DIM[dim]


def training_record(model: str) -> dict | None:
    """The one-off cost of the learned model, from its record ``<model>.json``."""
    path = model + ".json"
    if not os.path.exists(path):
        return None
    with open(path) as f:
        record = json.load(f)
    out = {key: record.get(key) for key in ("data_s", "train_s", "ranks", "fields", "samples")}
    out["once_s"] = (out["data_s"] or 0.0) + (out["train_s"] or 0.0)
    return out


def main(argv: list[str] | None = None):
    ap = bench.parser("field_sequence", __doc__,
                      f"63², N = 4 and 12³, N = 8, {QUICK_FIELDS} fields, channels only "
                      f"(explicit options still win)")
    ap.add_argument("--fields", type=int, default=None, help="fields per sequence (100)")
    ap.add_argument("--dims", type=int, nargs="+", default=[2, 3], choices=[2, 3])
    ap.add_argument("--families", nargs="+", default=None, choices=FAMILIES)
    ap.add_argument("--sequences", nargs="+", default=list(SEQUENCES), choices=SEQUENCES)
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--n2", type=int, default=None, help="2D grid points per direction (127)")
    ap.add_argument("--N2", type=int, default=None, help="2D subdomains (16)")
    ap.add_argument("--n3", type=int, default=None, help="3D grid points per direction (24)")
    ap.add_argument("--N3", type=int, default=None, help="3D subdomains (8)")
    ap.add_argument("--contrast", type=float, default=1e6)
    ap.add_argument("--nev", type=int, default=8, help="vectors per subdomain (spectral, "
                    "learned)")
    ap.add_argument("--model", default=None,
                    help="learned coarse-space model (default: the library's pretrained one)")
    ap.add_argument("--name", default="field_sequence",
                    help="file stem of the JSON and plots in DIR")
    args = bench.parse(ap, argv)
    if args.report:
        return readme(args)
    torch.set_num_threads(1)  # one thread per rank: the ranks already share the cores
    sizes = dict(QUICK if args.quick else SIZES)
    sizes[2] = (args.n2 or sizes[2][0], args.N2 or sizes[2][1])
    sizes[3] = (args.n3 or sizes[3][0], args.N3 or sizes[3][1])
    fields = args.fields or (QUICK_FIELDS if args.quick else 100)
    families = args.families or (["channels"] if args.quick else list(FAMILIES))
    methods = list(args.methods)
    data = {"ranks": COMM.Get_size(), "cores": os.cpu_count(), "quick": args.quick,
            "contrast": args.contrast, "fields": fields, "nev": args.nev,
            "model": bench.relative(args.model) if args.model else None,
            "models": {str(d): bench.relative(model_for(d, args.model)) for d in args.dims},
            "training": {bench.relative(model_for(d, args.model)):
                         training_record(model_for(d, args.model)) for d in args.dims},
            "sizes": {str(d): {"n": sizes[d][0], "N": sizes[d][1]} for d in args.dims},
            "families": families, "sequences": args.sequences, "methods": methods,
            "krylov": {"type": "cg", "rtol": 1e-8, "norm": "unpreconditioned", "max_it": 3000},
            "runs": []}
    for dim in args.dims:
        n, N = sizes[dim]
        for family in families:
            for kind in args.sequences:
                seq = Sequence(kind, family, dim, n, args.contrast)
                for method in methods:
                    data["runs"].append(run_sequence(seq, method, N, fields, args.nev,
                                                     args.model))
                    path = bench.write(args, data, args.name)
    bench.show(report(data))
    if COMM.Get_rank() == 0:
        plot(data, os.path.splitext(path)[0])
    bench.show(f"wrote {path}")
    return data


def readme(args) -> dict:
    """README.md and the plots from ``field_sequence.json`` in the results folder; every other
    ``field_sequence_*.json`` (a run of some methods) gets its own tables after them."""
    files = bench.results(args)
    data = files["field_sequence"]
    if COMM.Get_rank() == 0:
        plot(data, os.path.join(args.out, "field_sequence"))
    sections = [
        ("Condensed (mean CG iterations / mean total seconds per field)", summary(data)),
        ("Per sequence", report(data)),
        ("Plots", "![cumulative set-up + solve seconds](field_sequence.png)\n\n"
                  "![iterations per field](field_sequence_iterations.png)")]
    for name, other in files.items():
        if name != "field_sequence":
            sections += [(f"{name}.json: condensed (its own run; mean CG iterations / mean "
                          f"total seconds per field)", summary(other)),
                         (f"{name}.json: per sequence", report(other))]
    bench.write_readme(args, "One preconditioner over a sequence of coefficient fields",
                       sections, files)
    return data


# -- reports ------------------------------------------------------------------------------

def _groups(data) -> list[tuple]:
    return list(dict.fromkeys((r["dim"], r["family"], r["sequence"]) for r in data["runs"]))


def _runs(data, key) -> list[dict]:
    return [r for r in data["runs"] if (r["dim"], r["family"], r["sequence"]) == key]


def _training(data, dim: int) -> dict:
    """The training record of the learned model of ``dim``'s runs (empty if none)."""
    path = data.get("models", {}).get(str(dim))
    return (data.get("training") or {}).get(path) or {}


def report(data) -> str:
    models = ", ".join(f"{d}D {m}" for d, m in data.get("models", {}).items())
    if not any(r["method"].startswith("learned") for r in data["runs"]):
        models = "none run"
    lines = [f"{data['ranks']} ranks on {data['cores']} cores, contrast {data['contrast']:g}, "
             f"{data['fields']} fields per sequence, nev {data['nev']}, learned models {models}; "
             f"times: slowest rank, total = set-up + solve; memory growth: peak (VmHWM, max "
             f"over ranks) after the last field over the peak after the first (target "
             f"≤ {GROWTH_TARGET:.0%})."]
    for key in _groups(data):
        dim, family, kind = key
        runs = _runs(data, key)
        n, N = runs[0]["n"], runs[0]["N"]
        lines += ["", f"**{dim}D {runs[0]['problem']}, {n}{'²' if dim == 2 else '³'}, N = {N}, "
                  f"{kind}**", "",
                  "| method | mean its | max its | mean set-up s | mean solve s | mean total s "
                  "| total over loop s | memory growth % |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        notes = []
        for r in runs:
            s = r["summary"]
            if not s.get("fields"):
                lines.append(f"| {r['method']} | {r['status']} | | | | | | |")
            else:
                g = s["memory_growth"]
                nc = f" ({s['not_converged']} n.c.)" if s["not_converged"] else ""
                lines.append(f"| {r['method']} | {s['mean_its']:.1f}{nc} | {s['max_its']} | "
                             f"{s['mean_setup_s']:.3f} | {s['mean_solve_s']:.3f} | "
                             f"{s['mean_total_s']:.3f} | {s['total_s']:.2f} | "
                             f"{'–' if g is None else f'{100 * g:.1f}'} |")
                if g is not None and g > GROWTH_TARGET:
                    notes.append(f"- {r['method']}: memory grew {100 * g:.1f} % over the loop "
                                 f"({s['peak_first_mb']:.0f} → {s['peak_last_mb']:.0f} MB per "
                                 f"rank), above the {GROWTH_TARGET:.0%} target")
            if r["status"] != "ok":
                notes.append(f"- {r['method']} {r['status']} at field {r.get('failed_field')}: "
                             f"{r.get('message', '')[:300]}")
            eps = [f["coarse"]["eps_iterations"] for f in r["fields"]
                   if isinstance(f.get("coarse", {}).get("eps_iterations"), (int, float))]
            if eps:
                notes.append(f"- {r['method']}: SLEPc iterations per field mean "
                             f"{np.mean(eps):.1f} (first {eps[0]}, later mean "
                             f"{np.mean(eps[1:]) if len(eps) > 1 else float('nan'):.1f})")
            if s.get("mean_resetup_s") is not None:
                notes.append(f"- {r['method']}: first set-up {r['fields'][0]['setup_s']:.3f} s, "
                             f"re-setups mean {s['mean_resetup_s']:.3f} s")
        t = _training(data, dim)
        once = t.get("once_s")
        if once:
            spectral = next((r["summary"] for r in runs if r["method"] == "spectral"
                             and r["summary"].get("fields")), None)
            for r in runs:
                s = r["summary"]
                if not r["method"].startswith("learned") or not s.get("fields"):
                    continue
                per = once / s["fields"]
                text = (f"- {r['method']}: one-off training {once:.0f} s (data "
                        f"{t.get('data_s') or 0:.0f} + train {t.get('train_s') or 0:.0f}) is "
                        f"{per:.2f} s per field over {s['fields']} fields: "
                        f"{s['mean_total_s'] + per:.3f} s per field with it")
                if spectral:
                    saved = spectral["mean_total_s"] - s["mean_total_s"]
                    text += (f" vs spectral {spectral['mean_total_s']:.3f} s; "
                             + (f"pays back against spectral after {once / saved:.0f} fields"
                                if saved > 0 else "never pays back against spectral (no "
                                "saving per field)"))
                notes.append(text)
        if notes:
            lines += [""] + notes
    return "\n".join(lines)


def summary(data) -> str:
    """The README's table: per (dimension, family, sequence) every method's mean CG iterations
    and mean total seconds per field, whether each learned variant's total is below the best of
    spectral cold, spectral warm and GAMG (defaults or tuned), and the largest memory growth over the loop."""
    methods = list(dict.fromkeys(r["method"] for r in data["runs"]))
    lines = ["| dim | family | sequence | " + " | ".join(methods)
             + " | learned total / min(spectral, spectral-warm, gamg, gamg-tuned) | "
             "memory growth max |",
             "|---|---|---|" + "---|" * len(methods) + "---:|---:|"]
    for key in _groups(data):
        runs = {r["method"]: r["summary"] for r in _runs(data, key)}
        ok = {m: v for m, v in runs.items() if v.get("fields")}
        cells = [f"{ok[m]['mean_its']:.1f} / {ok[m]['mean_total_s']:.3f}" if m in ok else "–"
                 for m in methods]
        rivals = [ok[m]["mean_total_s"] for m in ("spectral", "spectral-warm", *REFERENCE)
                  if m in ok]
        ratios = [f"{m}: {ok[m]['mean_total_s'] / min(rivals):.2f}" for m in ok
                  if m.startswith("learned") and rivals]
        growth = [v["memory_growth"] for v in ok.values() if v.get("memory_growth") is not None]
        lines.append(f"| {key[0]}D | {key[1]} | {key[2]} | " + " | ".join(cells)
                     + f" | {', '.join(ratios)} | "
                     + (f"{100 * max(growth):.1f} %" if growth else "–") + " |")
    return "\n".join(lines)


def _panels(data):
    keys = _groups(data)
    cols = min(len(keys), 3)
    rows = -(-len(keys) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.9 * rows), squeeze=False)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    return keys, fig, axes


def _title(runs) -> str:
    r = runs[0]
    return f"{r['dim']}D {r['family']} {r['sequence']}, {r['n']}{'²' if r['dim'] == 2 else '³'}, " \
           f"N = {r['N']}"


def plot(data, stem: str) -> None:
    """``<stem>.png``: cumulative set-up + solve seconds against the field index (learned also
    with its training time added, dashed); ``<stem>_iterations.png``: iterations per field."""
    if not data["runs"]:
        return
    colour = {m: plt.cm.tab10(i) for i, m in enumerate(METHODS)}
    for what in ("time", "iterations"):
        keys, fig, axes = _panels(data)
        offset = False
        for ax, key in zip(axes.flat, keys):
            runs = _runs(data, key)
            once = _training(data, key[0]).get("once_s")
            for r in runs:
                if not r["fields"]:
                    continue
                idx = [f["index"] + 1 for f in r["fields"]]
                c = colour.get(r["method"])
                if what == "time":
                    cum = np.cumsum([f["total_s"] for f in r["fields"]])
                    ax.plot(idx, cum, "-", color=c, label=r["method"])
                    if once and r["method"].startswith("learned"):
                        ax.plot(idx, cum + once, "--", color=c,
                                label=f"{r['method']} + training")
                        offset = True
                else:
                    ax.plot(idx, [f["iterations"] for f in r["fields"]], "o-", ms=2.5, color=c,
                            label=r["method"])
            ax.set_xlabel("field")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel("cumulative set-up + solve s" if what == "time" else "CG iterations")
            if what == "time" and offset:
                ax.set_yscale("log")
            ax.set_title(_title(runs), fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
        handles = {h.get_label(): h for ax in axes.flat for h in ax.get_lines()}
        fig.legend(list(handles.values()), list(handles), fontsize=7, loc="lower center",
                   ncol=min(len(handles), 4))
        fig.tight_layout(rect=(0, 0.04 + 0.03 * ((len(handles) - 1) // 4), 1, 1))
        fig.savefig(stem + (".png" if what == "time" else "_iterations.png"), dpi=110)
        plt.close(fig)


if __name__ == "__main__":
    main()
