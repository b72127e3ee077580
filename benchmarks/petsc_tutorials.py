r"""The domain-decomposition user's path: PETSc's own tutorials and the project's MATIS client,
each solved by ddlearn's PC from the command line as a PETSc program selects it, beside PETSc's
PCBDDC, PCHPDDM (where the build has it) and GAMG.

    python benchmarks/petsc_tutorials.py [--quick] [--ranks 4] [--cases ...] [--methods ...]
    python benchmarks/petsc_tutorials.py --report     (README.md from the JSON)

The script runs serially and starts every solve as its own program under ``mpiexec``:

- ``ex71-elasticity`` / ``ex71-poisson``: PETSc's ``src/ksp/ksp/tutorials/ex71.c``, 3D Q1 on a
  DMDA assembled as ``MATIS`` (each process its own elements' Neumann matrix), one face
  clamped, a random right-hand side, ``--ranks`` processes; the AIJ form (``-dm_mat_type aij``)
  for GAMG;
- ``ex56-sphere``: ``src/ksp/ksp/tutorials/ex56.c``, 3D Q1 elasticity with a stiff sphere of
  modulus 1e6 (``-alpha 1e6``), assembled AIJ with its rigid-body modes
  (``-use_mat_nearnullspace``), one process, 27 subdomains for ddlearn;
- ``client-matis-1e6`` / ``client-matis-1``: the project's elasticity program
  (``examples/elasticity.py -matis``: 3D P1, random stiff inclusions of modulus 1e6, or none),
  its matrix as ``MATIS`` from a METIS split of the elements, ``--ranks`` processes.

The C tutorials are compiled here, at run time, from the PETSc source distribution of the
installed PETSc's version (``pip download --no-binary :all: petsc==<version>``, kept in
``build/petsc-tutorials/``), against that PETSc (its pkg-config flags); nothing of PETSc's is
copied into the repository. ddlearn's PC reaches a C program through PETSc's ``-python``.

Every solve: CG to rtol 1e-8 on the unpreconditioned residual, at most 2000 iterations. Methods:

- ``ddlearn``: ``ddlearn.pc.TwoLevelSchwarzPC`` with its defaults (on a MATIS: one subdomain per
  process, its local matrix as Neumann matrix, the adaptive spectral space: the eigenvectors of
  lambda < 0.5, at most 128 per subdomain); ``ddlearn-harmonic``, ``ddlearn-gdsw`` on the
  assembled matrices (27 subdomains for ex56; on a system with the balanced coarse correction,
  their default there), ``ddlearn-gdsw-additive``: GDSW with the additive correction;
- ``ddlearn-nev8`` / ``ddlearn-tau0.3``: the spectral space with a fixed 8 eigenvectors per
  subdomain (the earlier default), or with the threshold 0.3;
- ``bddc``: PETSc's PCBDDC with its defaults (MATIS only), ``bddc-deluxe``: with deluxe
  scaling (its adaptive primal constraints need MUMPS, which this PETSc build lacks); ``hpddm``: PCHPDDM, GenEO on the
  MATIS's local matrices (``-pc_hpddm_levels_1_eps_nev 20``), where PETSc was built with HPDDM;
- ``gamg``: GAMG with its defaults, ``gamg-tuned``: threshold 0.01 (the registry's entries).

Recorded per solve: iterations, reason, set-up and solve seconds (PETSc's ``-log_view``: the
programs' own logging stages around their set-up and their solve, mean over the ranks; the
Python client: the slowest rank's wall clock) and the peak resident memory per rank (``-memory_view``: largest, smallest and total over
the ranks; the Python client: every rank's). A C program that runs ddlearn embeds Python, numpy,
scipy and petsc4py: about 100 MB more per rank than a C-only preconditioner before any work.
Writes ``petsc_tutorials.json`` after every solve.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import petsc4py

petsc4py.init([sys.argv[0]])
from petsc4py import PETSc  # noqa: E402

from ddlearn.harness import bench  # noqa: E402
from ddlearn.harness.methods import METHODS as REGISTRY  # noqa: E402
from ddlearn.harness.study import Rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build" / "petsc-tutorials"
TUTORIALS = {"ex71": "src/ksp/ksp/tutorials/ex71.c", "ex56": "src/ksp/ksp/tutorials/ex56.c"}
KSP = ["-ksp_type", "cg", "-ksp_rtol", "1e-8", "-ksp_norm_type", "unpreconditioned",
       "-ksp_max_it", "2000", "-ksp_converged_reason"]
DDLEARN = ["-pc_type", "python", "-pc_python_type", "ddlearn.pc.TwoLevelSchwarzPC"]


def _options(entry: dict) -> list[str]:
    return [x for k, v in entry.items() for x in (f"-{k}", str(v))]


#: method -> (options, on a MATIS, on an assembled matrix)
METHODS = {
    "ddlearn": (DDLEARN, True, True),
    "ddlearn-harmonic": (DDLEARN + ["-ddlearn_coarse_space", "harmonic"], False, True),
    "ddlearn-gdsw": (DDLEARN + ["-ddlearn_coarse_space", "gdsw"], False, True),
    "ddlearn-gdsw-additive": (DDLEARN + ["-ddlearn_coarse_space", "gdsw",
                                         "-ddlearn_coarse_correction", "additive"], False, True),
    "ddlearn-nev8": (DDLEARN + ["-ddlearn_spectral_nev", "8", "-ddlearn_spectral_threshold", "0"],
                     True, False),
    "ddlearn-tau0.3": (DDLEARN + ["-ddlearn_spectral_threshold", "0.3"], True, False),
    "bddc": (["-pc_type", "bddc"], True, False),
    "bddc-deluxe": (["-pc_type", "bddc", "-pc_bddc_use_deluxe_scaling"], True, False),
    "hpddm": (["-pc_type", "hpddm", "-pc_hpddm_levels_1_eps_nev", "20",
               "-pc_hpddm_levels_1_sub_pc_type", "cholesky"], True, False),
    "gamg": (_options(REGISTRY["gamg"].options), False, True),
    "gamg-tuned": (_options(REGISTRY["gamg-tuned"].options), False, True),
}


def _cases(ranks: int, quick: bool) -> dict[str, dict]:
    """case -> program, its arguments, ranks, whether it assembles a MATIS, ddlearn's
    subdomains on its assembled form."""
    EX71 = ("KSPSetUp", "KSPSolve")
    c = 6 if quick else 24
    ne = 7 if quick else 23
    client = ["-dim", "3", "-cells", "4" if quick else "14", "-matis"]
    return {
        "ex71-elasticity": dict(program="ex71", stages=EX71, ranks=ranks, matis=True, subdomains=None,
                                args=["-pde_type", "Elasticity", "-dim", "3", "-cells",
                                      f"{c},{c},{c}"]),
        "ex71-poisson": dict(program="ex71", stages=EX71, ranks=ranks, matis=True, subdomains=None,
                             args=["-pde_type", "Poisson", "-dim", "3", "-cells",
                                   f"{c},{c},{c}"]),
        "ex56-sphere": dict(program="ex56", stages=("Setup", "Solve"), ranks=1, matis=False, subdomains=8 if quick else 27,
                            args=["-ne", str(ne), "-alpha", "1e6", "-use_mat_nearnullspace"]),
        "client-matis-1e6": dict(program="client", ranks=ranks, matis=True, subdomains=None,
                                 args=client + ["-contrast", "1e6"]),
        "client-matis-1": dict(program="client", ranks=ranks, matis=True, subdomains=None,
                               args=client + ["-contrast", "1"]),
    }


def petsc_dir() -> Path:
    """The installed PETSc (the ``petsc`` package the set-up built)."""
    import petsc
    return Path(petsc.get_petsc_dir())


def sources() -> dict[str, Path]:
    """The tutorials' C files from the source distribution of the installed PETSc's version,
    downloaded once into :data:`BUILD`."""
    version = ".".join(str(v) for v in PETSc.Sys.getVersion())
    folder = BUILD / f"petsc-{version}"
    wanted = {k: folder / v for k, v in TUTORIALS.items()}
    if all(p.exists() for p in wanted.values()):
        return wanted
    BUILD.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=BUILD) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--no-binary", ":all:", "--no-build-isolation", f"petsc=={version}",
                        "-d", tmp], check=True)
        (sdist,) = Path(tmp).glob("petsc-*.tar.gz")
        with tarfile.open(sdist) as tar:
            for path in TUTORIALS.values():
                member = tar.getmember(f"petsc-{version}/{path}")
                tar.extract(member, BUILD, filter="data")
    return wanted


def compiled(name: str, source: Path) -> Path:
    """``source`` compiled against the installed PETSc (pkg-config ``PETSc``), once."""
    exe = BUILD / name
    if exe.exists() and exe.stat().st_mtime >= source.stat().st_mtime:
        return exe
    env = {**os.environ, "PKG_CONFIG_PATH": str(petsc_dir() / "lib" / "pkgconfig")}
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "PETSc"], env=env, check=True,
                           capture_output=True, text=True).stdout.split()
    rpath = [f"-Wl,-rpath,{petsc_dir() / 'lib'}"]
    subprocess.run(["mpicc", "-O2", str(source), "-o", str(exe), *flags, *rpath, "-lm"],
                   check=True)
    return exe


def _stage_time(log: str, stage: str) -> float | None:
    """The seconds of the logging stage ``stage`` in a ``-log_view`` summary (the mean over
    the ranks, which the stage's closing collective brings together); the tutorials push one
    stage around their set-up and one around their solve."""
    m = re.search(rf"^\s*\d+:\s+{re.escape(stage)}:\s+(\S+)", log, re.M)
    return float(m.group(1)) if m else None


def _memory(out: str) -> dict:
    """The peak resident memory of ``-memory_view`` (largest / smallest / total over the
    ranks, MB)."""
    m = re.search(r"Maximum \(over computational time\) process memory:\s+total\s+(\S+)\s+"
                  r"max\s+(\S+)\s+min\s+(\S+)", out)
    if not m:
        return {}
    total, hi, lo = (float(x) / 2 ** 20 for x in m.groups())
    return {"peak_mb_max": hi, "peak_mb_min": lo, "peak_mb_total": total}


def _failure(text: str) -> str:
    """The error lines of a failed run's output, without the machine's paths (directories
    dropped) or PETSc's configure line."""
    lines = [re.sub(r"(?:/[\w.+-]+)+/", "", line) for line in text.splitlines()
             if re.search(r"Error|error", line) and "Configure options" not in line]
    return "\n".join(lines)[-3000:]


def run_c(exe: Path, case: dict, options: list[str]) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".log", delete=False) as f:
        log = f.name
    args = [*case["args"], *KSP, *options, "-log_view", f":{log}", "-memory_view"]
    if "ddlearn.pc.TwoLevelSchwarzPC" in options:
        args = ["-python", sys.executable, *args]
    cmd = ["mpiexec", "-n", str(case["ranks"]), str(exe), *args]
    p = subprocess.run(cmd, capture_output=True, text=True)
    text = p.stdout + p.stderr
    rec = {"command": shlex.join([exe.name, *args]).replace(log, "LOG").replace(
        sys.executable, "python"), "returncode": p.returncode}
    m = re.search(r"Linear solve (converged|did not converge) due to (\S+) iterations (\d+)",
                  text)
    if p.returncode or not m:
        rec["error"] = _failure(text)
        return rec
    rec.update(converged=m.group(1) == "converged", reason_name=m.group(2),
               iterations=int(m.group(3)), **_memory(text))
    with open(log) as f:
        view = f.read()
    os.unlink(log)
    rec["setup_s"], rec["solve_s"] = (_stage_time(view, st) for st in case["stages"])
    return rec


def run_client(case: dict, options: list[str]) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    args = [*case["args"], *KSP, *options, "-o", out]
    cmd = ["mpiexec", "-n", str(case["ranks"]), sys.executable,
           str(ROOT / "examples" / "elasticity.py"), *args]
    p = subprocess.run(cmd, capture_output=True, text=True)
    rec = {"command": shlex.join(["python", "examples/elasticity.py", *args]).replace(out, "OUT"),
           "returncode": p.returncode}
    if p.returncode:
        rec["error"] = _failure(p.stdout + p.stderr)
        return rec
    with open(out) as f:
        got = json.load(f)
    os.unlink(out)
    peak = got.get("peak_mb") or []
    rec.update({k: got[k] for k in ("iterations", "converged", "reason_name", "setup_s",
                                    "solve_s", "unknowns", "n0") if k in got},
               peak_mb=peak, peak_mb_max=max(peak, default=None),
               peak_mb_min=min(peak, default=None))
    return rec


def applicable(method: str, case: dict) -> list[str] | None:
    """The method's options on this case (with the case's MATIS or AIJ form), or None where it
    does not apply (PCBDDC needs a MATIS, GAMG an AIJ matrix, PCHPDDM a build with HPDDM)."""
    options, on_matis, on_aij = METHODS[method]
    if method == "hpddm" and not PETSc.Sys.hasExternalPackage("hpddm"):
        return None
    if case["matis"] and on_matis:
        return list(options)
    if not on_aij:
        return None
    options = list(options)
    if case["matis"]:  # the assembled form of the same program
        if case["program"] == "client":
            return ["-matis", "0", *options]
        options = ["-dm_mat_type", "aij", *options]
    if case["subdomains"] and options[:len(DDLEARN)] == DDLEARN:
        options += ["-ddlearn_subdomains", str(case["subdomains"])]
    return options


def benchmark(args) -> dict:
    cases = _cases(args.ranks, args.quick)
    data = {"ranks": args.ranks, "cores": os.cpu_count(), "quick": args.quick,
            "cases": {k: cases[k] for k in args.cases},
            "hpddm_built": bool(PETSc.Sys.hasExternalPackage("hpddm"))}
    rows = Rows(args, data, lambda r: (r["case"], r["method"]))
    # a resumed run of some cases keeps the others' rows: the file describes every case it holds
    kept = {r["case"] for r in data["rows"]}
    data["cases"] = {k: c for k, c in cases.items() if k in args.cases or k in kept}
    exes = {}
    if any(cases[k]["program"] != "client" for k in args.cases):
        exes = {k: compiled(k, src) for k, src in sources().items()}
    for name in args.cases:
        case = cases[name]
        for method in args.methods:
            options = applicable(method, case)
            if options is None or rows.done((name, method)):
                continue
            rec = run_client(case, options) if case["program"] == "client" else \
                run_c(exes[case["program"]], case, options)
            rows.add({"case": name, "method": method, **rec})
            print(f"{name} {method}: {bench.outcome(rec)}"
                  + (f"  {rec['setup_s']:.2f} s + {rec['solve_s']:.2f} s, peak "
                     f"{rec.get('peak_mb_max') or 0:.0f} MB" if "setup_s" in rec else ""),
                  flush=True)
    return data


def summary(data: dict) -> str:
    header = ["case", "method", "iterations", "set-up s", "solve s", "total s",
              "peak MB/rank (max)", "max/min"]
    table = []
    for name in data["cases"]:
        for r in sorted((r for r in data["rows"] if r["case"] == name),
                        key=lambda r: list(METHODS).index(r["method"])):
            ok = "setup_s" in r and r["setup_s"] is not None
            hi, lo = r.get("peak_mb_max"), r.get("peak_mb_min")
            table.append([name, r["method"], bench.outcome(r),
                          f"{r['setup_s']:.2f}" if ok else "–",
                          f"{r['solve_s']:.2f}" if ok else "–",
                          f"{r['setup_s'] + r['solve_s']:.2f}" if ok else "–",
                          f"{hi:.0f}" if hi else "–", f"{hi / lo:.2f}" if hi and lo else "–"])
    lines = [f"{data['ranks']} processes (ex56: 1) on {data['cores']} cores; CG rtol 1e-8, "
             f"unpreconditioned residual; PCHPDDM "
             f"{'built' if data['hpddm_built'] else 'not in this PETSc build'}.", "",
             bench.markdown_table(header, table)]
    errors = [r for r in data["rows"] if r.get("error")]
    if errors:
        lines += ["", "Errors (the last lines):", ""]
        for r in errors:
            said = r["error"].strip().splitlines() or [""]
            first = next((x for x in said if "Error:" in x), said[-1])
            lines.append(f"- {r['case']} {r['method']}: `{first.strip()[:300]}`")
    return "\n".join(lines)


def main(argv=None):
    ap = bench.parser("petsc_tutorials", __doc__, "small meshes (tests)")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--cases", nargs="+", default=None)
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    args = bench.parse(ap, argv)
    names = list(_cases(args.ranks, args.quick))
    args.cases = args.cases or names
    bad = sorted(set(args.cases) - set(names))
    if bad:
        ap.error(f"unknown --cases {' '.join(bad)}; choose from {' '.join(names)}")
    if args.report:
        files = bench.results(args)
        bench.write_readme(args, "PETSc's tutorials and the project's MATIS client",
                           [("Table", summary(files["petsc_tutorials"]))], files)
        return files["petsc_tutorials"]
    data = benchmark(args)
    bench.write(args, data)
    bench.show(summary(data))
    return data


if __name__ == "__main__":
    main()
