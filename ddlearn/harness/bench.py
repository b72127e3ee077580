"""The one command line of every benchmark script, and what the scripts share.

Each script ``benchmarks/<study>.py`` is a *study*; its results live in
``benchmarks/results/<study>/`` (JSON, plots and the ``README.md`` made from them)::

    mpiexec -n 4 python benchmarks/<study>.py [--out DIR] [--quick] [--resume] [its own options]
                                               [-petsc_option value ...]
    python benchmarks/<study>.py --report [--out DIR]

``--out DIR``
    the results folder (default ``benchmarks/results/<study>/``; with ``--quick`` a folder under
    the system's temporary directory, so that a smoke run never overwrites committed results);
``--quick``
    the small case the tests run;
``--resume``
    keep the rows of the results file that did not fail and run the rest
    (:class:`ddlearn.harness.study.Rows`);
``--report``
    regenerate the study's tables, plots and ``DIR/README.md`` from the JSON in ``DIR`` and run
    nothing.

Arguments with a single leading dash that the script does not define go to the PETSc options
database (``-ksp_monitor``, ``-ddlearn_spectral_eigensolver scipy``); the database is recorded
with the results.

Every JSON is written atomically by rank 0 (:func:`write`: an interrupted write leaves the old
file) with a ``provenance`` entry: the command (with ``mpiexec -n P`` for P > 1 ranks), the git
commit and whether the work tree differed from it, ranks, cores (all, and those this process
may run on), the processor, the date (UTC), the script's effective options (its parsed
arguments) and the PETSc options database (None where petsc4py is not installed: a torch-only
study that reads cached data runs, on a GPU machine say). A copy of the checkout without its git
folder names its commit in ``DDLEARN_COMMIT`` (whether it differed is then unknown: None).
Results committed before the stamp carry only
``{"committed in": <commit>}`` where git history names the commit that added them.

Shared pieces: :func:`markdown_table` (the one table printer, for README and console),
:func:`peak_reset` / :func:`peak_mb` / :func:`peak_mb_ranks` (peak resident memory,
``VmHWM``), :func:`wall` / :func:`slowest` (collective timers: the slowest rank's seconds),
:func:`relative` (paths in results are relative to the repository).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from mpi4py import MPI

try:
    from petsc4py import PETSc
except ModuleNotFoundError:  # a torch-only study on cached data runs without PETSc (a GPU machine)
    PETSc = None

from ddlearn.decomposition.atomic import atomic_write, atomic_write_json
from ddlearn.decomposition.timing import Timer

__all__ = ["ROOT", "RESULTS", "parser", "parse", "provenance", "write", "read", "results",
           "write_readme", "markdown_table", "show", "peak_reset", "memory_mb", "peak_mb",
           "peak_mb_ranks", "wall", "slowest", "relative", "error_chain",
           "failure"]

#: The repository root (results record paths relative to it) and the results' root folder.
ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
COMM = MPI.COMM_WORLD


# -- the command line ------------------------------------------------------------------------

def parser(study: str, doc: str, quick: str = "the small case the tests run",
           script: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of ``benchmarks/<study>.py`` (or of ``script``, as run: a path or
    ``-m module``) with the harness's options ``--out``, ``--quick`` and ``--report``; the
    script adds its own."""
    script = script or f"benchmarks/{study}.py"
    ap = argparse.ArgumentParser(prog=script, description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.set_defaults(study=study, script=script)
    group = ap.add_argument_group("harness (every benchmark)")
    group.add_argument("--out", metavar="DIR",
                       help=f"results folder (default benchmarks/results/{study}/; with --quick "
                            f"a temporary folder)")
    group.add_argument("--quick", action="store_true", help=quick)
    group.add_argument("--resume", action="store_true",
                       help="keep the rows of the results file that did not fail, run the rest")
    group.add_argument("--redo", action="store_true",
                       help="with --resume: run the rows this command selects again (each "
                            "replaces its kept row) and keep the others")
    group.add_argument("--report", action="store_true",
                       help="regenerate the tables, plots and DIR/README.md from the JSON in "
                            "DIR; run nothing")
    return ap


def parse(ap: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    """Parse ``argv`` (default ``sys.argv[1:]``): the script's options into the namespace,
    unknown ``-name [value]`` pairs into the PETSc options database. ``args.out`` is set to the
    results folder, ``args.argv`` keeps the arguments for the provenance."""
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    args, rest = ap.parse_known_args(argv)
    # a PETSc option is -name, optionally followed by one value
    wrong = [a for i, a in enumerate(rest) if a.startswith("--") or not a.startswith("-")
             and (i == 0 or not rest[i - 1].startswith("-"))]
    if wrong:
        ap.error(f"unrecognized arguments: {' '.join(wrong)}")
    if rest:
        if PETSc is None:
            ap.error(f"PETSc options ({' '.join(rest)}) need petsc4py, which is not installed "
                     f"here: run scripts/setup.sh, or leave them out")
        PETSc.Options().insertString(shlex.join(rest))
    if getattr(args, "redo", False) and not args.resume:
        ap.error("--redo replaces kept rows: it needs --resume (without it every row runs)")
    args.argv = argv
    if args.out is None:
        args.out = str(Path(tempfile.gettempdir()) / "ddlearn-bench" / args.study if args.quick
                       else RESULTS / args.study)
    return args


# -- provenance and files ----------------------------------------------------------------------

def _git(*cmd: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *cmd], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _processor() -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``), else what :mod:`platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _setting(obj):
    """A setting that is no JSON type: its ``describe()`` where it has one (a coarse space's
    settings), else its ``str`` (never an object's address)."""
    return obj.describe() if callable(getattr(obj, "describe", None)) else str(obj)


def _plain(value):
    """``value`` as JSON types (:func:`_setting` for anything else), paths in the checkout
    relative to it (no checkout's absolute path in committed results)."""
    return json.loads(json.dumps(value, default=_setting).replace(str(ROOT) + os.sep, ""))


def provenance(script: str, argv: list[str], options: dict, comm=COMM) -> dict:
    """What made a result (collective: rank 0 asks git, every rank gets the answer).

    ``script`` is the path run (relative to the repository), ``argv`` its arguments,
    ``options`` its effective settings."""
    ranks = comm.Get_size()
    command = shlex.join(["python", *script.split(), *argv])
    if ranks > 1:
        command = f"mpiexec -n {ranks} {command}"
    git = None
    if comm.Get_rank() == 0:
        # results are not code: a run that writes several files is not "dirty" by its own
        status = _git("status", "--porcelain", "--untracked-files=no", "--", ".",
                      f":(exclude){RESULTS.relative_to(ROOT)}")
        git = (_git("rev-parse", "HEAD"), None if status is None else bool(status))
        if git[0] is None and os.environ.get("DDLEARN_COMMIT"):
            # a copy of the checkout without its git folder (another machine) names its commit
            git = (os.environ["DDLEARN_COMMIT"], None)
    commit, dirty = comm.bcast(git, root=0)
    cores = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    return {"command": command, "commit": commit, "dirty": dirty, "ranks": ranks,
            "cores": cores, "cores_usable": usable, "processor": _processor(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "options": _plain(options), "petsc_options": _petsc_options()}


def _petsc_options() -> dict | None:
    """The PETSc options database, for the record (None without PETSc)."""
    return None if PETSc is None else _plain(PETSc.Options().getAll())


def _options(args: argparse.Namespace) -> dict:
    return {k: v for k, v in vars(args).items() if k not in ("argv", "report", "script")}


def write(args: argparse.Namespace, data: dict, name: str | None = None, comm=COMM) -> str:
    """Write ``data`` with its provenance to ``<args.out>/<name>.json`` (default name: the
    study), atomically, on rank 0; return the path (collective)."""
    path = os.path.join(args.out, f"{name or args.study}.json")
    stamp = provenance(args.script, args.argv, _options(args), comm)
    if comm.Get_rank() == 0:
        atomic_write_json(path, {"provenance": stamp,
                                 **{k: v for k, v in data.items() if k != "provenance"}})
    return path


def read(path: str):
    with open(path) as f:
        return json.load(f)


def results(args: argparse.Namespace) -> dict[str, dict]:
    """Every JSON of the study in the results folder ``args.out`` (``<study>*.json``) by file
    stem, in name order."""
    folder = Path(args.out)
    return {p.stem: read(str(p)) for p in sorted(folder.glob(f"{args.study}*.json"))}


def earlier_runs(data: dict) -> list[dict]:
    """The provenance of the runs whose rows a resumed run keeps: the file's own stamp, then
    the runs it had kept itself (``data["earlier_runs"]``), newest first."""
    own = [data["provenance"]] if "provenance" in data else []
    return own + list(data.get("earlier_runs", []))


def _run_text(p: dict) -> str:
    dirty = " (with uncommitted changes)" if p.get("dirty") else ""
    return (f"`{p['command']}` at commit {p.get('commit')}{dirty}, {p['ranks']} ranks on "
            f"{p['cores']} cores ({p.get('processor')}), {p.get('date')}")


def _provenance_line(name: str, data) -> str:
    p = data.get("provenance", {}) if isinstance(data, dict) else {}
    if "command" in p:
        kept = "".join(f"\n  - rows kept from an earlier run: {_run_text(e)}"
                       for e in data.get("earlier_runs", []) if "command" in e)
        return f"- `{name}.json`: {_run_text(p)}{kept}"
    if "committed in" in p:
        return (f"- `{name}.json`: committed in {p['committed in']}; written before the stamp: "
                f"the command and the commit that ran it were not recorded")
    return f"- `{name}.json`: no provenance recorded"


def write_readme(args: argparse.Namespace, title: str, sections: list[tuple[str, str]],
                 files: dict[str, dict], intro: str = "", options: str = "",
                 out_option: str | None = None) -> str:
    """``<args.out>/README.md``: the regenerating command at the top (``--report``, then
    ``options``, then ``--out`` with ``out_option``, default ``args.out``, unless that is the
    study's folder), the provenance of every JSON it is made from, then ``sections``
    (heading, markdown); rank 0 writes. Returns the path."""
    out = Path(args.out)
    named = Path(out_option or args.out)
    default = named.resolve() == (RESULTS / args.study).resolve()
    command = f"python {args.script} --report{options}" + \
        ("" if default else f" --out {relative(str(named))}")
    lines = [f"# {title}", "", "Regenerated from the JSON in this folder (runs nothing):", "",
             "```", command, "```", ""]
    if intro:
        lines += [intro, ""]
    if files:  # a study of many runs may name their commands in its intro instead
        lines += ["Measured by:", ""] + [_provenance_line(k, v) for k, v in files.items()] + [""]
    for heading, body in sections:
        lines += [f"## {heading}", "", body.rstrip(), ""]
    path = str(out / "README.md")
    if COMM.Get_rank() == 0:
        atomic_write(path, lambda f: f.write("\n".join(lines).encode()))
    return path


def relative(path: str) -> str:
    """``path`` relative to the repository root, as results record it (no checkout's
    absolute path in committed files)."""
    return os.path.relpath(os.path.abspath(path), ROOT)


# -- tables --------------------------------------------------------------------------------

def markdown_table(header: list[str], rows: list[list], align: str | None = None) -> str:
    """A markdown table (readable on a console as it is): ``align`` has one letter per column,
    ``l`` or ``r`` (default: the first column left, the others right)."""
    align = align or "l" + "r" * (len(header) - 1)
    rule = ["---:" if a == "r" else "---" for a in align]
    return "\n".join("| " + " | ".join(str(c) for c in row) + " |"
                     for row in [header, rule, *rows])


def show(text: str, comm=COMM) -> None:
    """Print ``text`` once (rank 0)."""
    if comm.Get_rank() == 0:
        print(text, flush=True)


# -- memory and time -------------------------------------------------------------------------

def peak_reset() -> None:
    """Start a new peak-memory window for this process (Linux: ``clear_refs`` 5 resets
    ``VmHWM``; elsewhere a no-op)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def memory_mb(field: str = "VmHWM") -> float | None:
    """A memory line of ``/proc/self/status`` in MB (``VmHWM``: peak resident since the last
    :func:`peak_reset`, ``VmRSS``: resident now); None where there is no such file."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def peak_mb() -> float:
    """This process's peak resident memory since the last :func:`peak_reset`, MB (without
    ``/proc``: the peak of the whole process, ``ru_maxrss``)."""
    peak = memory_mb("VmHWM")
    if peak is None:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return peak


def peak_mb_ranks(comm=COMM) -> list[float]:
    """Every rank's :func:`peak_mb`, on every rank (collective)."""
    return comm.allgather(peak_mb())


def slowest(seconds: float, comm=COMM) -> float:
    """The largest of the ranks' ``seconds`` (collective)."""
    return comm.allreduce(seconds, op=MPI.MAX)


def wall(fn, comm=COMM) -> float:
    r"""Seconds of ``fn()`` on the slowest rank, :math:`\max_r (t_r^{end} - t^{start})`, the
    ranks starting together after a barrier (collective)."""
    comm.Barrier()
    timer = Timer()
    fn()
    timer.lap("run")
    return timer.slowest(comm)["run"]


def outcome(rec: dict) -> str:
    """A solve's row in a table: its iterations, the reason it stopped without converging, or
    ``error``."""
    if rec.get("error"):
        return "error"
    return str(rec["iterations"]) if rec["converged"] else rec["reason_name"]


def error_chain(e: BaseException) -> list[str]:
    """The messages of ``e`` and the exceptions it came from (cause or context), outermost
    first: a PETSc error as its code alone (its message is a traceback of PETSc's build
    paths), anything else as ``Type: message`` (a Python PC's exception reaches the caller as
    the context of a PETSc error)."""
    chain = []
    while e is not None:
        chain.append(f"PETSc error {e.ierr}" if PETSc and isinstance(e, PETSc.Error)
                     else f"{type(e).__name__}: {e}")
        e = e.__cause__ or e.__context__
    return chain


def failure(e: BaseException, limit: int = 2000) -> str:
    """A failed run's record: :func:`error_chain` joined, at most ``limit`` characters."""
    return " <- ".join(error_chain(e))[:limit]
