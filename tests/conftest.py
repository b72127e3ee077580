"""Shared helpers for serial and MPI (pytest-mpi) tests."""
import contextlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from mpi4py import MPI
from petsc4py import PETSc

from ddlearn.classical.krylov import solve
from ddlearn.pc import set_coordinates

ROOT = Path(__file__).resolve().parents[1]
# The examples are real clients: tests import and run them.
sys.path.insert(0, str(ROOT / "examples"))
import petsc_client  # noqa: E402

# One thread per rank: ranks already share two cores.
torch.set_num_threads(1)

# Under MPI the first failing test aborts every rank (see mpi_abort_plugin).
pytest_plugins = ["mpi_abort_plugin"]


def pytest_configure(config):
    # Ranks must not clean up each other's temporary directories.
    comm = MPI.COMM_WORLD
    if comm.Get_size() > 1 and not config.option.basetemp:
        config.option.basetemp = os.path.join(
            tempfile.gettempdir(), f"ddlearn-pytest-{os.getuid()}-{comm.Get_size()}-{comm.Get_rank()}")


def load_script(path: str, name: str | None = None):
    """The script at ``path`` (relative to the repository root: a benchmark, an example) as a
    module named ``name`` (default: its file name), registered in ``sys.modules`` (a script's
    dataclasses look their module up there)."""
    name = name or Path(path).stem
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def raised_everywhere(fn, exc=ValueError):
    """Call ``fn`` on every rank; return the messages of the ``exc`` each rank raised, gathered
    on all ranks. A rank that did not raise contributes ``None``; reaching the allgather proves
    no rank is stuck in a collective."""
    try:
        fn()
        msg = None
    except exc as e:
        # petsc4py reports an exception raised inside a Python PC as a PETSc.Error whose
        # cause/context carries the original message: keep the whole chain.
        parts, err = [], e
        while err is not None:
            parts.append(str(err))
            err = err.__cause__ or err.__context__
        msg = " <- ".join(parts)
    return MPI.COMM_WORLD.allgather(msg)


@contextlib.contextmanager
def petsc_options(values: dict):
    """Put ``values`` into the PETSc options database for the ``with`` block only."""
    opts = PETSc.Options()
    for k, v in values.items():
        opts.setValue(k, v)
    try:
        yield
    finally:
        for k in values:
            opts.delValue(k)


def pc_options(prefix: str, pc: str, ddlearn: dict) -> dict:
    """Options selecting ``ddlearn.pc.<pc>`` under ``prefix``, with its ``-ddlearn_*``
    settings."""
    return {f"{prefix}pc_type": "python", f"{prefix}pc_python_type": f"ddlearn.pc.{pc}",
            **{f"{prefix}ddlearn_{k}": v for k, v in ddlearn.items()}}


def solve_with_pc_options(A, b, prefix: str, ksp: str = "cg", pc: str = "SchwarzAttentionPC",
                          **ddlearn):
    """Solve with a ddlearn PC selected purely through the options database."""
    with petsc_options(pc_options(prefix, pc, ddlearn)):
        return solve(A, b, lambda pc: None, ksp_type=ksp, rtol=1e-8, prefix=prefix)


def pc_from_options(A, prefix: str, pc: str = "SchwarzAttentionPC", **ddlearn):
    """A set-up ddlearn PC for ``A`` built from the options database alone."""
    out = PETSc.PC().create(comm=A.getComm())
    out.setOptionsPrefix(prefix)
    with petsc_options(pc_options(prefix, pc, ddlearn)):
        out.setOperators(A, A)
        out.setFromOptions()
        out.setUp()
    return out


def apply_gathered(pc, A, x):
    """``pc`` applied to the replicated vector ``x`` (the matrix's own numbering), the result
    gathered on every rank."""
    X, Y = A.createVecs()
    lo, hi = X.getOwnershipRange()
    X.setArray(x[lo:hi])
    pc.apply(X, Y)
    y = np.concatenate(MPI.COMM_WORLD.allgather(Y.getArray(readonly=True).copy()))
    X.destroy(), Y.destroy()
    return y


def client_matrix(n: int, contrast: float):
    """The plain petsc4py client's matrix (natural ordering, PETSc's rows) with its grid
    coordinates attached, as a user program would hand it to the PC."""
    A = petsc_client.assemble(n, contrast)
    set_coordinates(A, petsc_client.coordinates(A, n))
    return A


def channels_system(n: int, contrast: float = 1e6):
    """The client's 2D channels matrix (:func:`client_matrix`) and b = 1, for a module fixture
    to yield and destroy."""
    A = client_matrix(n, contrast)
    b = A.createVecLeft()
    b.set(1.0)
    return A, b


def converged_iterations(A, b, prefix: str, pc: str, **ddlearn) -> int:
    """CG's iterations with the ddlearn PC ``pc`` from the options, checked to have converged
    to a true relative residual below 1e-8."""
    r = solve_with_pc_options(A, b, prefix, pc=pc, **ddlearn)
    assert r.converged and r.rnorm_true < 1e-8, r
    return r.iterations


def smooth_channels_field(n: int, delta: float = 0.0):
    """The high-contrast channels field of seed 1 on ``n``², times a smooth factor within
    ``exp(±delta)`` (a slowly changing coefficient, as in a loop over fields)."""
    from ddlearn.decomposition.problems import Diffusion2D, make_problem
    p = make_problem("random_channels", n, contrast=1e6, seed=1)
    t = np.arange(n + 2) / (n + 1)
    X, Y = np.meshgrid(t, t)
    return Diffusion2D(n, p.kappa * np.exp(delta * np.sin(3 * X + 1) * np.cos(2 * Y)))


def natural_matrix_of(problem, A=None) -> PETSc.Mat:
    """``problem`` in natural ordering on PETSc's rows, coordinates attached; with ``A`` (a
    matrix of the same pattern) its values go into ``A`` in place: the same object and
    nonzero pattern, a values-only re-setup for a PC."""
    new = A is None
    if new:
        A = PETSc.Mat().createAIJ((problem.n, problem.n), comm=PETSc.COMM_WORLD)
        A.setUp()
    lo, hi = A.getOwnershipRange()
    rows = problem.rows(np.arange(lo, hi)).tocsr()
    rows.sort_indices()
    if new:
        A.setPreallocationCSR((rows.indptr, rows.indices, rows.data))
        A.setOption(PETSc.Mat.Option.SYMMETRIC, True)
    else:
        A.setValuesCSR(rows.indptr, rows.indices, rows.data)
    A.assemble()
    set_coordinates(A, problem.coordinates(np.arange(lo, hi)))
    return A


def two_level_ksp(A, space, subdomains: int) -> PETSc.KSP:
    """CG to 1e-8 with ``ddlearn.pc.TwoLevelSchwarzPC`` on ``space`` and ``subdomains``
    subdomains, not yet set up."""
    from ddlearn.pc import TwoLevelSchwarzPC
    ksp = PETSc.KSP().create(comm=A.getComm())
    ksp.setOperators(A)
    ksp.setType("cg")
    ksp.setTolerances(rtol=1e-8)
    pc = ksp.getPC()
    pc.setType("python")
    pc.setPythonContext(TwoLevelSchwarzPC(coarse_space=space, subdomains=subdomains))
    return ksp


def span_gap(P: np.ndarray, S: np.ndarray) -> float:
    """The larger relative residual of each basis (columns) in the span of the other: 0 for
    two bases of one space, whatever their order and orientation."""
    worst = 0.0
    for X, Y in ((P, S), (S, P)):
        c = np.linalg.lstsq(X, Y, rcond=None)[0]
        worst = max(worst, np.abs(X @ c - Y).max() / np.abs(Y).max())
    return worst


def gathered_sets(ctx):
    """Every subdomain's ``(I_i, D_i)`` of a set-up ddlearn PC, in subdomain order, on every
    rank: ``(sets, weights)``."""
    s = ctx.subdomains
    found = sum(MPI.COMM_WORLD.allgather([(int(i), I, D) for i, I, D in
                                          zip(s.ids, s.overlapping, s.weights)]), [])
    found.sort(key=lambda t: t[0])
    return [t[1] for t in found], [t[2] for t in found]


def gathered_csr(A) -> sp.csr_matrix:
    """A distributed PETSc matrix as one scipy matrix on every rank (collective)."""
    parts = MPI.COMM_WORLD.allgather(A.getValuesCSR())
    rows = [sp.csr_matrix((v, j, i), shape=(len(i) - 1, A.getSize()[1])) for i, j, v in parts]
    return sp.vstack(rows).tocsr()


def view_text(obj, path) -> str:
    """What ``obj.view`` prints to an ASCII viewer on all ranks (collective)."""
    name = MPI.COMM_WORLD.bcast(str(path), root=0)
    viewer = PETSc.Viewer().createASCII(name, comm=PETSc.COMM_WORLD)
    obj.view(viewer)
    viewer.destroy()
    MPI.COMM_WORLD.Barrier()
    with open(name) as f:
        return f.read()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
