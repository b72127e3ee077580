"""The spectral coarse space's warm start (-ddlearn_spectral_warm_start): a values-only re-setup
of the same matrix starts every subdomain's eigensolve from the previous eigenvectors, finds the
eigenvalues of a cold solve of the new matrix with fewer SLEPc iterations, and says so; another
size or another partition restarts cold and says that; off, nothing changes; 1 and 2 ranks."""
import numpy as np
import pytest
from mpi4py import MPI
from petsc4py import PETSc

from conftest import natural_matrix_of as _matrix
from conftest import natural_matrix_of, petsc_options, two_level_ksp, view_text
from conftest import smooth_channels_field as _field
from ddlearn.classical.coarse import spectral as spectral_module
from ddlearn.classical.coarse.spectral import Spectral

COMM = MPI.COMM_WORLD
N, NEV = 16, 4


def _new_values(A: PETSc.Mat, problem) -> None:
    """``problem``'s values into ``A`` in place: the same object and nonzero pattern."""
    natural_matrix_of(problem, A)


def _ksp(A: PETSc.Mat, space, subdomains: int = N) -> PETSc.KSP:
    ksp = two_level_ksp(A, space, subdomains)
    ksp.setUp()
    return ksp


@pytest.fixture
def eigenvalues(monkeypatch):
    """Every local eigensolve's eigenvalues, in call order (subdomain order on this rank)."""
    calls = []
    solve = spectral_module.local_eigenvectors

    def recording(*args, **kwargs):
        lam, V = solve(*args, **kwargs)
        calls.append(lam)
        return lam, V
    monkeypatch.setattr(spectral_module, "local_eigenvectors", recording)
    return calls


def _iterations(ksp, b) -> int:
    x = b.duplicate()
    ksp.solve(b, x)
    assert ksp.getConvergedReason() > 0
    x.destroy()
    return ksp.getIterationNumber()


def _check_values_only_resetup_is_warm(eigenvalues, tmp_path):
    """(One or more ranks.) New values in the same matrix: every subdomain warm, the cold
    solve's eigenvalues, fewer SLEPc iterations, the same CG iterations."""
    n = 63
    A = _matrix(_field(n, 0.0))
    space = Spectral(nev=NEV, warm_start=True)
    ksp = _ksp(A, space)
    first = dict(space.found)
    assert first["warm_start_result"] == "first set-up"
    assert (first["warm_subdomains"], first["cold_subdomains"]) == (0, N)
    assert f"warm start: first set-up, all {N} subdomains cold" in view_text(
        ksp, tmp_path / "first.txt")

    _new_values(A, _field(n, 0.1))
    del eigenvalues[:]
    ksp.setOperators(A)
    ksp.setUp()
    warm_lams, warm = list(eigenvalues), dict(space.found)
    ctx = ksp.getPC().getPythonContext()
    assert ctx.meta["spectral"]["warm_start"] is True
    assert ctx.meta["spectral"]["warm_subdomains"] == N
    assert warm["warm_start_result"] == "warm", warm
    assert (warm["warm_subdomains"], warm["cold_subdomains"]) == (N, 0)
    text = view_text(ksp, tmp_path / "warm.txt")
    assert f"warm start: {N} subdomains from the previous eigenvectors, 0 cold" in text, text
    assert f"{warm['eps_iterations']} SLEPc iterations" in text

    del eigenvalues[:]
    fresh = _matrix(_field(n, 0.1))
    cold_space = Spectral(nev=NEV)
    cold_ksp = _ksp(fresh, cold_space)
    cold_lams, cold = list(eigenvalues), dict(cold_space.found)
    assert "warm_subdomains" not in cold and cold_space.describe()["warm_start"] is False
    assert "warm start" not in view_text(cold_ksp, tmp_path / "cold.txt")

    assert len(warm_lams) == len(cold_lams) == len(ctx.subdomains.ids)
    for w, c in zip(warm_lams, cold_lams):
        assert len(w) == len(c) == NEV
        assert np.abs(w - c).max() <= 1e-8 * np.abs(c).max(), (w, c)
    assert 0 < warm["eps_iterations"] < cold["eps_iterations"], (warm, cold)
    b = A.createVecLeft()
    b.set(1.0)
    # the same eigenvalues (above), so CG converges alike; whether the last iteration lands on
    # this side of the tolerance is a tie that round-off decides
    assert abs(_iterations(ksp, b) - _iterations(cold_ksp, b)) <= 1
    for o in (ksp, cold_ksp, A, fresh, b):
        o.destroy()
    return warm, cold


def test_values_only_resetup_starts_warm(eigenvalues, tmp_path):
    warm, cold = _check_values_only_resetup_is_warm(eigenvalues, tmp_path)
    print(f"eps iterations, {N} subdomains, nev {NEV}: warm {warm['eps_iterations']}, "
          f"cold {cold['eps_iterations']}")


@pytest.mark.mpi(min_size=2)
def test_values_only_resetup_starts_warm_distributed(eigenvalues, tmp_path):
    _check_values_only_resetup_is_warm(eigenvalues, tmp_path)


def test_changed_size_or_partition_restarts_cold(tmp_path):
    """The same Spectral in a new PC: a matrix of another size, or the same matrix cut into
    other subdomains, matches no previous subdomain: a cold restart, said in found and view.
    A new matrix object of the same size and partition matches every subdomain (the
    fingerprint is the index sets, not the matrix object)."""
    space = Spectral(nev=NEV, warm_start=True)
    A = _matrix(_field(63, 0.0))
    _ksp(A, space).destroy()
    for k, (matrix, subdomains) in enumerate([(_matrix(_field(62, 0.0)), N),
                                              (_matrix(_field(63, 0.0)), 9)]):
        ksp = _ksp(matrix, space, subdomains)
        m = dict(space.found)
        assert m["warm_start_result"] == "cold restart", m
        assert (m["warm_subdomains"], m["cold_subdomains"]) == (0, subdomains)
        assert m["eps_iterations"] > 0
        text = view_text(ksp, tmp_path / f"cold{k}.txt")
        assert (f"warm start: cold restart, no subdomain matched the previous set-up's (all "
                f"{subdomains} cold: subdomains changed)") in text, text
        for o in (ksp, matrix):
            o.destroy()
        _ksp(A, space).destroy()  # back to the first partition for the next case
    again = _matrix(_field(63, 0.0))
    ksp = _ksp(again, space)
    assert space.found["warm_start_result"] == "warm"
    for o in (ksp, again, A):
        o.destroy()


def test_warm_start_from_the_options_database():
    """-ddlearn_spectral_warm_start turns it on; off (the default) stores nothing and reports
    the SLEPc iterations alone."""
    A = _matrix(_field(31, 0.0))
    for flag in ("1", "0"):
        with petsc_options({"wo_pc_type": "python",
                            "wo_pc_python_type": "ddlearn.pc.TwoLevelSchwarzPC",
                            "wo_ddlearn_subdomains": "4", "wo_ddlearn_coarse_space": "spectral",
                            "wo_ddlearn_spectral_nev": "3",
                            "wo_ddlearn_spectral_warm_start": flag}):
            ksp = PETSc.KSP().create(comm=A.getComm())
            ksp.setOptionsPrefix("wo_")
            ksp.setOperators(A)
            ksp.setFromOptions()
            ksp.setUp()
            _new_values(A, _field(31, 0.05))
            ksp.setOperators(A)
            ksp.setUp()
        space = ksp.getPC().getPythonContext().space
        if flag == "1":
            assert space.settings.warm_start and space.found["warm_subdomains"] == 4
        else:
            assert not space.settings.warm_start and not space._previous
            assert "warm_subdomains" not in space.found and space.found["eps_iterations"] > 0
        ksp.destroy()
    A.destroy()


def test_scipy_warm_start_finds_the_cold_eigenvalues(eigenvalues):
    """ARPACK started from v0 = the sum of the previous eigenvectors: warm, same eigenvalues."""
    A = _matrix(_field(31, 0.0))
    space = Spectral(nev=NEV, eigensolver="scipy", warm_start=True)
    ksp = _ksp(A, space, 4)
    _new_values(A, _field(31, 0.1))
    del eigenvalues[:]
    ksp.setOperators(A)
    ksp.setUp()
    warm = list(eigenvalues)
    assert space.found["warm_subdomains"] == 4 and space.found["eps_iterations"] == 0
    del eigenvalues[:]
    fresh = _matrix(_field(31, 0.1))
    cold_ksp = _ksp(fresh, Spectral(nev=NEV, eigensolver="scipy"), 4)
    for w, c in zip(warm, eigenvalues, strict=True):
        assert np.abs(w - c).max() <= 1e-8 * np.abs(c).max(), (w, c)
    for o in (ksp, cold_ksp, A, fresh):
        o.destroy()
