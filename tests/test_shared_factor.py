"""One symbolic factorisation per subdomain for the spectral pencil and the local solve
(ddlearn.classical.shared_factor): counted by PETSc's own log events, the same preconditioner
as with two factorisations, none at all on a values-only re-setup; not shared where the
options configure the spectral transform's solver or the eigensolver is scipy's, nor where the
pencil's matrix cannot be factored; 1 and 2 ranks."""
import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI
from petsc4py import PETSc

from conftest import (natural_matrix_of, petsc_options, smooth_channels_field,
                      two_level_ksp, view_text)
from ddlearn.classical.coarse.spectral import Spectral
from ddlearn.classical.overlapping import asm_pc, factor_blocks
from ddlearn.classical.shared_factor import LocalBlocks

COMM = MPI.COMM_WORLD
N, NEV = 16, 4
SYMBOLIC = "MatCholFctrSym"  # PETSc's event for a symbolic Cholesky factorisation


def _symbolic() -> int:
    """Symbolic Cholesky factorisations on this rank so far (PETSc's log)."""
    return int(PETSc.Log.Event(SYMBOLIC).getPerfInfo()["count"])


def _ksp(A: PETSc.Mat, space) -> tuple[PETSc.KSP, int]:
    """A set-up CG + two-level PC with ``space``, and the symbolic factorisations its set-up
    ran on this rank."""
    ksp = two_level_ksp(A, space, N)
    before = _symbolic()
    ksp.setUp()
    return ksp, _symbolic() - before


def _applied(ksp: PETSc.KSP, x: PETSc.Vec) -> np.ndarray:
    y = x.duplicate()
    ksp.getPC().apply(x, y)
    out = y.getArray().copy()
    y.destroy()
    return out


def _check_shared(tmp_path):
    PETSc.Log.begin()
    A = natural_matrix_of(smooth_channels_field(63))
    shared, unshared = Spectral(nev=NEV), Spectral(nev=NEV, share_factor=False)
    ksp, symbolic = _ksp(A, shared)
    ksp_off, symbolic_off = _ksp(A, unshared)
    mine = len(ksp.getPC().getPythonContext().subdomains.ids)

    # one symbolic factorisation per subdomain saved on every rank; all N shared
    assert symbolic_off - symbolic == mine, (symbolic, symbolic_off, mine)
    assert shared.found["shared_factorisations"] == N
    assert unshared.found["shared_factorisations"] == 0
    assert shared.describe()["share_factor"] and not unshared.describe()["share_factor"]
    assert f"{N} pencils factored on the local blocks' symbolic factorisation" in view_text(
        ksp, tmp_path / "shared.txt")

    # the same preconditioner: the same pencils, eigenvectors to the eigensolver's tolerance
    x = A.createVecLeft()
    x.setRandom()
    y, y_off = _applied(ksp, x), _applied(ksp_off, x)
    scale = COMM.allreduce(float(np.abs(y_off).max()), op=MPI.MAX)
    assert COMM.allreduce(float(np.abs(y - y_off).max()), op=MPI.MAX) <= 1e-7 * scale

    # new values, same matrix: the pencils and the blocks refactored numerically only (at
    # most the coarse matrix, on its one rank, factored anew)
    natural_matrix_of(smooth_channels_field(63, 0.1), A)
    ksp.setOperators(A)
    before = _symbolic()
    ksp.setUp()
    assert COMM.allreduce(_symbolic() - before) <= 1
    assert shared.found["shared_factorisations"] == N
    b = A.createVecLeft()
    b.set(1.0)
    u = b.duplicate()
    ksp.solve(b, u)
    assert ksp.getConvergedReason() > 0
    for o in (ksp, ksp_off, A, x, b, u):
        o.destroy()


def test_shared_symbolic_factorisation(tmp_path):
    _check_shared(tmp_path)


@pytest.mark.mpi(min_size=2)
def test_shared_symbolic_factorisation_distributed(tmp_path):
    _check_shared(tmp_path)


@pytest.mark.parametrize("options,space", [
    ({"ddlearn_spectral_st_pc_factor_mat_solver_type": "petsc"}, {}),
    ({}, {"eigensolver": "scipy"}),
])
def test_not_shared_where_the_transform_is_configured(options, space):
    """An option for the spectral transform's own solver, or scipy's eigensolver: each pencil
    factored on its own, and the preconditioner converges as before."""
    A = natural_matrix_of(smooth_channels_field(31))
    with petsc_options(options):
        s = Spectral(nev=3, **space)
        ksp, _ = _ksp(A, s)
    assert s.found["shared_factorisations"] == 0
    b = A.createVecLeft()
    b.set(1.0)
    u = b.duplicate()
    ksp.solve(b, u)
    assert ksp.getConvergedReason() > 0
    for o in (ksp, A, b, u):
        o.destroy()


class _WholeBlock:
    """The whole matrix as the one subdomain of a sequential PCASM."""

    def __init__(self, n: int):
        self.n = n

    def index_sets(self, overlapping: bool) -> list:
        return [PETSc.IS().createStride(self.n, comm=PETSc.COMM_SELF)]


def test_a_pencil_matrix_that_cannot_be_factored_falls_back():
    """A right-hand matrix CHOLMOD cannot factor (singular: an empty row) is not lent (the
    eigensolve then factors it on its own and reports its own failure), and the block it was
    tried on is factored right afterwards: A_i solved to round-off."""
    A = natural_matrix_of(smooth_channels_field(15))
    whole = _WholeBlock(A.getSize()[0])
    asm = asm_pc(A, whole, solver="auto", factor=False)
    blocks = LocalBlocks(asm)
    M = blocks.csr(0).tolil()
    M[0, :] = 0.0
    M[:, 0] = 0.0
    M = sp.csr_matrix(M)
    M.eliminate_zeros()
    with blocks.factored(0, M) as (Mp, ksp):
        assert Mp is None and ksp is None
    assert blocks.shared == 0
    factor_blocks(asm, whole)
    b = A.createVecLeft()
    b.setRandom()
    x, r = b.duplicate(), b.duplicate()
    asm.getASMSubKSP()[0].solve(b, x)
    A.mult(x, r)
    r.axpy(-1.0, b)
    assert r.norm() <= 1e-10 * b.norm()
    for o in (asm, A, b, x, r):
        o.destroy()
