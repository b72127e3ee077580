"""The factorisation of the local blocks, ``-<prefix>ddlearn_local_solver``: what ``auto`` picks
on this PETSc build, the same preconditioner from every factorisation the build has, LU where
the blocks are not symmetric, the user's ``-<prefix>ddlearn_local_sub_pc_*`` options first, a
package the build lacks refused on every rank with this build's choices, the choice shown by
``-ksp_view`` and kept by a re-setup. Serial, and (``-m mpi``) on 2 or more ranks."""
import numpy as np
import pytest
from mpi4py import MPI
from petsc4py import PETSc

from conftest import apply_gathered, client_matrix, pc_from_options, raised_everywhere, view_text
from ddlearn.classical.overlapping import (LOCAL_SOLVERS, available_local_solvers,
                                           local_factorisation)

COMM = MPI.COMM_WORLD
PC = "TwoLevelSchwarzPC"
N = 15
#: the names PETSc's package list may give each package (a SuiteSparse PETSc downloaded is
#: "suitesparse"; one configured from the system's libraries lists "cholmod", "umfpack", ...)
PACKAGES = {"cholmod": ("cholmod", "suitesparse"), "mumps": ("mumps",)}
WORDS = {"cholmod": "CHOLMOD (SuiteSparse)", "mumps": "MUMPS"}


def _has(name: str) -> bool:
    return any(PETSc.Sys.hasExternalPackage(p) for p in PACKAGES[name])


def _expected_auto() -> tuple[str, str]:
    """(PC type, package) that ``auto`` must pick on this build."""
    for name in ("cholmod", "mumps"):
        if _has(name):
            return "cholesky", name
    return "lu", "petsc"


def _sub_pcs(pc) -> list:
    return [k.getPC() for k in pc.getPythonContext().two_level.local.getASMSubKSP()]


def _kinds(pc) -> set:
    return {(p.getType(), p.getFactorSolverType()) for p in _sub_pcs(pc)}


def test_available_solvers_follow_the_build():
    have = available_local_solvers()
    assert set(have) <= set(LOCAL_SOLVERS) and {"auto", "lu", "cholesky"} <= set(have)
    for name in PACKAGES:
        assert (name in have) == _has(name)
    auto = local_factorisation("auto")
    assert (auto.pc_type, auto.package) == _expected_auto()
    # Cholesky needs symmetric blocks: every request falls back to LU without them
    for name in have:
        f = local_factorisation(name, symmetric=False)
        assert f.pc_type == "lu" and f.package in ("petsc", "mumps")
        assert bool(f.note) == (local_factorisation(name).pc_type == "cholesky")


def _check_same_preconditioner_from_every_solver() -> None:
    A = client_matrix(N, 1e4)
    x = np.random.default_rng(0).standard_normal(N * N)
    ref = pc_from_options(A, "ls_ref_", pc=PC, subdomains=4, coarse_space="nicolaides",
                          local_solver="lu")
    assert _kinds(ref) == {("lu", "petsc")}
    y = apply_gathered(ref, A, x)
    for name in available_local_solvers():
        pc = pc_from_options(A, f"ls_{name}_", pc=PC, subdomains=4, coarse_space="nicolaides",
                             local_solver=name)
        want = _expected_auto() if name == "auto" else \
            ("lu", "petsc") if name == "lu" else ("cholesky", "petsc" if name == "cholesky"
                                                  else name)
        assert _kinds(pc) == {want}, (name, _kinds(pc))
        assert pc.getPythonContext().meta["local_solves"] == f"{want[0]} ({want[1]})"
        np.testing.assert_allclose(apply_gathered(pc, A, x), y, rtol=0,
                                   atol=1e-10 * np.abs(y).max())
        pc.destroy()
    ref.destroy(), A.destroy()


def test_every_available_solver_gives_the_same_preconditioner():
    _check_same_preconditioner_from_every_solver()


@pytest.mark.mpi(min_size=2)
def test_every_available_solver_gives_the_same_preconditioner_mpi():
    _check_same_preconditioner_from_every_solver()


def _check_refused() -> None:
    A = client_matrix(N, 1.0)
    have = ", ".join(available_local_solvers())
    cases = [("superlu", f"unknown -lsr_superlu_ddlearn_local_solver 'superlu'; choose one of "
                         f"{have}")]
    cases += [(name, f"-lsr_{name}_ddlearn_local_solver {name}: this PETSc build has no "
                     f"{WORDS[name]}") for name in PACKAGES if not _has(name)]
    for name, expected in cases:
        msgs = raised_everywhere(lambda: pc_from_options(
            A, f"lsr_{name}_", pc=PC, subdomains=4, coarse_space="nicolaides",
            local_solver=name).destroy(), exc=Exception)
        assert all(m and expected in m and f"choose one of {have}" in m for m in msgs), \
            (expected, msgs)
    A.destroy()


def test_a_package_the_build_lacks_is_refused():
    _check_refused()


@pytest.mark.mpi(min_size=2)
def test_a_package_the_build_lacks_is_refused_on_every_rank():
    _check_refused()


def _nonsymmetric(contrast: float = 1.0):
    """The client's matrix plus a skew-symmetric (convection-like) coupling between every
    seventh row and its east neighbour: nonsymmetric blocks."""
    A = client_matrix(N, contrast)
    lo, hi = A.getOwnershipRange()
    for r in (r for r in range(lo, hi - 1, 7) if r % N != N - 1):  # r + 1: its east neighbour
        A.setValue(r, r + 1, 0.3, addv=PETSc.InsertMode.ADD_VALUES)
        A.setValue(r + 1, r, -0.3, addv=PETSc.InsertMode.ADD_VALUES)
    A.assemble()
    A.setOption(PETSc.Mat.Option.SYMMETRIC, False)
    return A


def _check_nonsymmetric_falls_back_to_lu() -> None:
    A = _nonsymmetric()
    x = np.random.default_rng(1).standard_normal(N * N)
    ref = pc_from_options(A, "lsn_lu_", pc=PC, subdomains=4, coarse_space="nicolaides",
                          local_type="restrict", local_solver="lu")
    y = apply_gathered(ref, A, x)
    for name in ("cholesky", "auto"):
        pc = pc_from_options(A, f"lsn_{name}_", pc=PC, subdomains=4, coarse_space="nicolaides",
                             local_type="restrict", local_solver=name)
        assert {t for t, _ in _kinds(pc)} == {"lu"}
        solves = pc.getPythonContext().two_level.local_solves
        if name == "cholesky" or _expected_auto()[0] == "cholesky":
            assert "blocks not symmetric: LU instead of Cholesky" in str(solves)
        np.testing.assert_allclose(apply_gathered(pc, A, x), y, rtol=0,
                                   atol=1e-10 * np.abs(y).max())
        pc.destroy()
    ref.destroy(), A.destroy()


def test_nonsymmetric_blocks_fall_back_to_lu():
    _check_nonsymmetric_falls_back_to_lu()


@pytest.mark.mpi(min_size=2)
def test_nonsymmetric_blocks_fall_back_to_lu_mpi():
    _check_nonsymmetric_falls_back_to_lu()


def test_restricted_variant_of_a_symmetric_matrix_keeps_cholesky():
    """RAS changes which rows of A_i^{-1} R_i x are added back, not the blocks."""
    A = client_matrix(N, 1.0)
    pc = pc_from_options(A, "lsras_", pc=PC, subdomains=4, coarse_space="nicolaides",
                         local_type="restrict", local_solver="cholesky")
    assert _kinds(pc) == {("cholesky", "petsc")}
    pc.destroy(), A.destroy()


def test_user_block_options_win():
    A = client_matrix(N, 1.0)
    pc = pc_from_options(A, "lsu1_", pc=PC, subdomains=4, coarse_space="nicolaides",
                         local_solver="lu", local_sub_pc_type="cholesky")
    assert _kinds(pc) == {("cholesky", "petsc")}
    assert "from the options: -lsu1_ddlearn_local_sub_pc_type cholesky" in \
        pc.getPythonContext().meta["local_solves"]
    pc.destroy()
    pc = pc_from_options(A, "lsu2_", pc=PC, subdomains=4, coarse_space="nicolaides",
                         local_solver="cholesky", local_sub_pc_type="icc")
    assert {t for t, _ in _kinds(pc)} == {"icc"}
    pc.destroy()
    pc = pc_from_options(A, "lsu3_", pc=PC, subdomains=4, coarse_space="nicolaides",
                         local_solver="cholesky", local_sub_pc_factor_mat_solver_type="petsc")
    assert _kinds(pc) == {("cholesky", "petsc")}
    pc.destroy(), A.destroy()


def test_ksp_view_and_resetup_keep_the_choice(tmp_path):
    """``-ksp_view`` names the blocks' factorisation; new values of the same matrix refactor
    the blocks with it (the preconditioner of a fresh set-up)."""
    A = client_matrix(N, 1.0)
    pc = pc_from_options(A, "lsv_", pc=PC, subdomains=4, coarse_space="nicolaides",
                         local_solver="cholesky")
    text = view_text(pc, tmp_path / "view.txt")
    assert "local solves: cholesky (petsc) (asked for: cholesky)" in text
    B = client_matrix(N, 1e3)  # same structure, other values
    A.zeroEntries()
    A.axpy(1.0, B, structure=PETSc.Mat.Structure.SAME_NONZERO_PATTERN)
    pc.setUp()
    assert _kinds(pc) == {("cholesky", "petsc")}
    fresh = pc_from_options(B, "lsv2_", pc=PC, subdomains=4, coarse_space="nicolaides",
                            local_solver="lu")
    x = np.random.default_rng(2).standard_normal(N * N)
    y = apply_gathered(fresh, B, x)
    np.testing.assert_allclose(apply_gathered(pc, A, x), y, rtol=0, atol=1e-10 * np.abs(y).max())
    pc.destroy(), fresh.destroy(), A.destroy(), B.destroy()
