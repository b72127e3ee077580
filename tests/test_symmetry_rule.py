"""CG, CR and MINRES need a symmetric matrix and a symmetric preconditioner. Checked through the
PC's own path (a KSP configured from the options database, as a PETSc program would), not
through the benchmark runner: the PC refuses what the options database lets it see; a Krylov
method set in code is invisible to it, and ``check_symmetric_pc`` on the KSP catches it."""
import contextlib

import pytest
from mpi4py import MPI
from petsc4py import PETSc

from ddlearn.classical.krylov import check_symmetric_pc

N = 200
PREFIX = "t_"
PC_OPTIONS = {"pc_type": "python", "pc_python_type": "ddlearn.pc.TwoLevelSchwarzPC",
              "ddlearn_coarse_space": "nicolaides", "ddlearn_subdomains": "4"}


def matrix(convection: float) -> PETSc.Mat:
    """1D convection-diffusion ``-u'' + c u'`` on ``N`` points, central differences (``c = 0``:
    the symmetric Poisson matrix), PETSc's row distribution."""
    h = 1.0 / (N + 1)
    A = PETSc.Mat().createAIJ([N, N], nnz=(3, 2), comm=PETSc.COMM_WORLD)
    lo, hi = A.getOwnershipRange()
    for i in range(lo, hi):
        A.setValue(i, i, 2.0 / h**2)
        if i > 0:
            A.setValue(i, i - 1, -1.0 / h**2 - convection / (2 * h))
        if i < N - 1:
            A.setValue(i, i + 1, -1.0 / h**2 + convection / (2 * h))
    A.assemble()
    return A


@contextlib.contextmanager
def ksp_from_options(A, **options):
    """A KSP under ``PREFIX`` for ``A`` with ``PC_OPTIONS`` and ``options`` in the database
    (for the ``with`` block only; the KSP and the options are cleaned up after it)."""
    opts = PETSc.Options()
    values = {PREFIX + k: v for k, v in {**PC_OPTIONS, **options}.items()}
    ksp = PETSc.KSP().create(comm=A.getComm())
    try:
        for k, v in values.items():
            opts.setValue(k, v)
        ksp.setOptionsPrefix(PREFIX)
        ksp.setOperators(A)
        yield ksp
    finally:
        ksp.destroy()
        for k in values:
            opts.delValue(k)


def chain(e: BaseException) -> str:
    """The messages of ``e`` and of the exceptions it came from (petsc4py reports an exception
    raised inside a Python PC as a PETSc.Error caused by it)."""
    parts = []
    while e is not None:
        parts.append(str(e))
        e = e.__cause__ or e.__context__
    return " <- ".join(parts)


def setup_error(ksp):
    with pytest.raises(PETSc.Error) as info:
        ksp.setUp()
    # every rank raised (a rank that had not would be stuck in a collective of the set-up)
    assert isinstance(info.value.__cause__, ValueError), chain(info.value)
    return chain(info.value)


def test_cg_from_options_refuses_a_nonsymmetric_matrix_in_the_pc_setup():
    A = matrix(convection=50.0)
    try:
        with ksp_from_options(A, ksp_type="cg") as ksp:
            ksp.setFromOptions()
            assert ksp.getType() == "cg"
            msg = setup_error(ksp)
            assert "not symmetric" in msg and "CG" in msg and "gmres" in msg
    finally:
        A.destroy()


def test_cg_set_in_code_is_refused_by_check_symmetric_pc():
    """No ``-ksp_type`` in the database: the PC cannot know CG is coming; the KSP check can."""
    A = matrix(convection=50.0)
    try:
        with ksp_from_options(A) as ksp:
            ksp.setType("cg")
            ksp.setFromOptions()
            assert ksp.getType() == "cg"
            with pytest.raises(ValueError, match="matrix is not symmetric, so CG"):
                check_symmetric_pc(ksp)
            ksp.setType("gmres")
            check_symmetric_pc(ksp)  # a nonsymmetric method: nothing to refuse
    finally:
        A.destroy()


def test_a_stale_symmetry_flag_is_not_trusted():
    """Marked symmetric, then a value changed: the flag survives, the check measures."""
    A = matrix(convection=0.0)
    A.setOption(PETSc.Mat.Option.SYMMETRIC, True)
    lo, _ = A.getOwnershipRange()
    A.setValue(lo, lo + 1 if lo + 1 < N else lo - 1, 7.0)
    A.assemble()
    try:
        with ksp_from_options(A) as ksp:
            ksp.setType("cg")
            ksp.setFromOptions()
            with pytest.raises(ValueError, match="matrix is not symmetric"):
                check_symmetric_pc(ksp)
    finally:
        A.destroy()


def test_check_symmetric_pc_accepts_a_symmetric_problem_and_the_solve_converges():
    A = matrix(convection=0.0)
    try:
        with ksp_from_options(A) as ksp:
            ksp.setType("cg")
            ksp.setFromOptions()
            check_symmetric_pc(ksp)
            ksp.setUp()
            check_symmetric_pc(ksp, matrix=False)
            b, x = A.createVecs()
            b.set(1.0)
            ksp.setTolerances(rtol=1e-8)
            ksp.solve(b, x)
            assert ksp.getConvergedReason() > 0
            b.destroy(), x.destroy()
    finally:
        A.destroy()


def test_restricted_local_solves_are_refused_under_cg_from_options():
    """``restrict`` (RAS) is nonsymmetric even on a symmetric matrix."""
    A = matrix(convection=0.0)
    try:
        with ksp_from_options(A, ksp_type="cg", ddlearn_local_type="restrict") as ksp:
            ksp.setFromOptions()
            msg = setup_error(ksp)
            assert "preconditioner is not symmetric, so CG" in msg
            assert "-t_ddlearn_local_type basic" in msg  # the PC's own prefix
    finally:
        A.destroy()


def test_restricted_local_solves_under_cg_set_in_code_are_refused_by_check_symmetric_pc():
    A = matrix(convection=0.0)
    try:
        with ksp_from_options(A, ddlearn_local_type="restrict") as ksp:
            ksp.setType("cg")
            ksp.setFromOptions()
            ksp.setUp()  # the PC saw no -ksp_type: it cannot refuse
            with pytest.raises(ValueError, match="preconditioner is not symmetric, so CG"):
                check_symmetric_pc(ksp)
    finally:
        A.destroy()


def test_a_matrix_that_cannot_tell_its_symmetry_is_not_refused():
    """A shell matrix has no symmetry test: nothing is claimed about it."""

    class Identity:
        def mult(self, mat, x, y):
            x.copy(y)

    S = PETSc.Mat().createPython([N, N], Identity(), comm=PETSc.COMM_WORLD)
    S.setUp()
    ksp = PETSc.KSP().create(comm=S.getComm())
    try:
        ksp.setOperators(S)
        ksp.setType("cg")
        ksp.getPC().setType("none")
        check_symmetric_pc(ksp)
    finally:
        ksp.destroy()
        S.destroy()


@pytest.mark.mpi(min_size=2)
def test_cg_set_in_code_is_refused_on_every_rank():
    A = matrix(convection=50.0)
    try:
        with ksp_from_options(A) as ksp:
            ksp.setType("cg")
            ksp.setFromOptions()
            try:
                check_symmetric_pc(ksp)
                msg = None
            except ValueError as e:
                msg = str(e)
            msgs = MPI.COMM_WORLD.allgather(msg)
            assert all(m and "matrix is not symmetric" in m for m in msgs), msgs
    finally:
        A.destroy()
