"""The native export: a PETSc binary file any PETSc program can read, round-tripped through
petsc4py on 1-4 ranks and checked against the scipy adapter."""
import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI
from petsc4py import PETSc

from ddlearn.pc import export
from ddlearn.decomposition import Decomposition
from ddlearn.learned.coarse.basis import LearnedBasis, aslinearoperator, basis_correction_model, perturb_
from ddlearn.decomposition.problems import make_problem
from ddlearn.classical import reference

pytestmark = pytest.mark.mpi
COMM = MPI.COMM_WORLD


def _dense(mat: PETSc.Mat) -> np.ndarray:
    """A distributed PETSc matrix as a dense array on every rank."""
    lo, hi = mat.getOwnershipRange()
    indptr, indices, data = mat.getValuesCSR()
    local = sp.csr_matrix((data, indices, indptr), shape=(hi - lo, mat.getSize()[1])).toarray()
    return np.vstack(COMM.allgather(local))


@pytest.mark.parametrize("mode", ["learned", "learned_restricted"])
def test_export_round_trip_rebuilds_the_preconditioner(tmp_path, mode):
    p = make_problem("poisson2d", 15)
    dec = Decomposition(p.grid, 4, 1)
    S = basis_correction_model(dec, 3, seed=2)
    perturb_(S, 0.2, 4)
    omega = np.array([0.1, -0.2, 0.5, 0.3])
    path = COMM.bcast(str(tmp_path / "model.petsc"), root=0)
    if COMM.Get_rank() == 0:
        export.export(path, LearnedBasis.serial(S, p, omega=omega), mode)
    COMM.Barrier()
    got = export.read(path)
    assert (got.n, got.N, got.n0, got.mode, got.overlap) == (p.n, 4, 1, mode, 1)
    for a, b in zip(got.subdomains, dec.subdomains):
        np.testing.assert_array_equal(a, np.sort(b))
    for a, b in zip(got.owned, dec.owned):
        np.testing.assert_array_equal(a, np.sort(b))
    Phi = _dense(got.Phi)
    np.testing.assert_allclose(Phi, LearnedBasis.serial(S, p, omega=omega).to_scipy().toarray(),
                               rtol=0, atol=1e-15)
    # a reader that knows only the file and A builds the same operator
    x = np.random.default_rng(1).standard_normal(p.n)
    rebuilt = reference.two_level(p.matrix(), dec, sp.csr_matrix(Phi), got.variant) @ x
    np.testing.assert_allclose(rebuilt, aslinearoperator(S, p, mode=mode, omega=omega) @ x,
                               rtol=0, atol=1e-12 * np.abs(rebuilt).max())
    got.Phi.destroy()


def test_export_bad_files_raise_everywhere(tmp_path):
    from conftest import raised_everywhere

    bad = COMM.bcast(str(tmp_path / "bad.petsc"), root=0)
    if COMM.Get_rank() == 0:
        viewer = PETSc.Viewer().createBinary(bad, "w", comm=PETSc.COMM_SELF)
        v = PETSc.Vec().createWithArray(np.array([export.MAGIC, 99.0, 1, 1, 1, 0, 1, 0]),
                                        comm=PETSc.COMM_SELF)
        v.view(viewer)
        v.destroy(), viewer.destroy()
    COMM.Barrier()
    msgs = raised_everywhere(lambda: export.read(bad), exc=Exception)
    assert all(m and "export version 99" in m for m in msgs), msgs
    with pytest.raises(ValueError, match="unknown mode"):
        export.export(bad, None, "magic")
