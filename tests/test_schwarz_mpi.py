"""Classical Schwarz on PETSc, compared with the scipy reference on any number of ranks."""
import numpy as np
import pytest
from mpi4py import MPI
from petsc4py import PETSc

from conftest import raised_everywhere
from ddlearn.decomposition.problems import make_problem
from ddlearn.classical import reference
from ddlearn.classical.krylov import solve
from ddlearn.harness.methods import LEARNED, MAIN_JOB, Case, parse_methods, run_methods
from ddlearn.classical.overlapping import configure_asm, exact_local_solves
from ddlearn.classical.twolevel import TwoLevelSchwarz

pytestmark = pytest.mark.mpi

CASES = [("poisson1d", 255, 8, 2, "hats"), ("poisson2d", 31, 16, 1, "hats"),
         ("channels", 23, 9, 1, "nicolaides"), ("poisson2d", 20, 6, 2, "nicolaides")]


def _pc(case, configure):
    pc = PETSc.PC().create(comm=case.A.getComm())
    pc.setOperators(case.A, case.A)
    configure(pc)
    pc.setUp()
    exact_local_solves(pc)
    return pc


def _apply(case, pc, x):
    X, Y = case.layout.from_natural(x), case.layout.vec()
    pc.apply(X, Y)
    y = case.layout.to_natural(Y)
    X.destroy(), Y.destroy()
    return y


@pytest.mark.parametrize("name,n,N,overlap,coarse", CASES)
def test_petsc_schwarz_equals_scipy_reference(name, n, N, overlap, coarse):
    case = Case.build(make_problem(name, n), N, overlap, coarse)
    A = case.problem.matrix()
    x = np.random.default_rng(7).standard_normal(A.shape[0])
    two = _pc(case, lambda pc: (pc.setType("python"),
                                pc.setPythonContext(TwoLevelSchwarz(case.layout, case.PhiP))))
    one = _pc(case, lambda pc: configure_asm(pc, case.layout))
    y2, y1 = _apply(case, two, x), _apply(case, one, x)
    ref2 = reference.two_level(A, case.dec, case.Phi) @ x
    ref1 = reference.one_level(A, case.dec) @ x
    assert np.linalg.norm(y2 - ref2) <= 1e-12 * np.linalg.norm(ref2)
    assert np.linalg.norm(y1 - ref1) <= 1e-12 * np.linalg.norm(ref1)
    one.destroy(), two.destroy(), case.destroy()


def test_iteration_bounds_1d():
    """1D n = 1023, N = 8, n_delta = 2 (docs/design.md §1: one-level 17, two-level 6)."""
    case = Case.build(make_problem("poisson1d", 1023), 8, 2)
    b = case.rhs(0)
    res = {r.method: r for r in run_methods(case, ["asm", "twolevel"], b)}
    for r in res.values():
        assert r.converged and r.rnorm_true < 1e-8
    assert res["twolevel"].iterations <= 8
    assert 12 <= res["asm"].iterations <= 22
    b.destroy(), case.destroy()


def test_all_methods_converge_2d():
    case = Case.build(make_problem("poisson2d", 31), 16, 1)
    b = case.rhs(3)
    # the learned methods (training, cache) are tested in test_learned_mpi and test_example;
    # the pretrained learned coarse spaces need subdomains of their training resolution (~32²),
    # so they run at 127² and up in test_learned_coarse, test_schwarz_attention_coarse and
    # test_example
    pretrained = ("learned", "schwarz_attention")
    results = run_methods(case, [m for m in MAIN_JOB if m not in LEARNED + pretrained], b)
    for r in results:
        assert r.converged, (r.method, r.reason)
        assert r.rnorm_true < 1e-8, (r.method, r.rnorm_true)
        assert r.history[0] == 1.0 and r.history[-1] < 1e-8
    it = {r.method: r.iterations for r in results}
    assert it["twolevel"] < it["asm"] < it["jacobi"]
    b.destroy(), case.destroy()


@pytest.mark.mpi(min_size=2)
def test_more_ranks_than_subdomains_raises_everywhere():
    size = MPI.COMM_WORLD.Get_size()
    msgs = raised_everywhere(lambda: Case.build(make_problem("poisson1d", 63), size - 1, 1))
    assert all(m and f"{size} MPI ranks but only {size - 1} subdomains" in m for m in msgs), msgs


def test_nonsymmetric_matrix_with_cg_raises_everywhere():
    case = Case.build(make_problem("poisson1d", 63), 4, 1)
    A = case.A.duplicate(copy=True)
    lo, hi = A.getOwnershipRange()
    if lo <= 1 < hi:
        A.setValue(1, 2, 5.0, addv=True)
    A.assemble()
    A.setOption(PETSc.Mat.Option.SYMMETRIC, False)
    b = case.rhs(0)
    msgs = raised_everywhere(lambda: solve(A, b, lambda pc: pc.setType("none")))
    assert all(m and "not symmetric" in m for m in msgs), msgs
    A.destroy(), b.destroy(), case.destroy()


@pytest.mark.parametrize("N,overlap,match", [(64, 1, "N must not exceed"),
                                              (4, -1, "non-negative"),
                                              (4, 9, "wider than the smallest subdomain")])
def test_bad_decomposition_raises_everywhere(N, overlap, match):
    msgs = raised_everywhere(lambda: Case.build(make_problem("poisson1d", 31), N, overlap))
    assert all(m and match in m for m in msgs), msgs


def test_unknown_names_raise_everywhere():
    msgs = raised_everywhere(lambda: parse_methods("asm,multigrid"))
    assert all(m and "unknown method" in m and "twolevel" in m for m in msgs)
    msgs = raised_everywhere(lambda: make_problem("heat", 10))
    assert all(m and "unknown problem 'heat'" in m for m in msgs)


def test_phi_columns_live_on_coarse_rank():
    case = Case.build(make_problem("poisson2d", 15), 9, 1, coarse_rank=MPI.COMM_WORLD.Get_size() - 1)
    xc = case.PhiP.createVecRight()
    n_local = xc.getLocalSize()
    assert n_local == (case.Phi.shape[1] if case.layout.rank == case.layout.coarse_rank else 0)
    # The distributed Phi is the scipy Phi in PETSc ordering.
    x = np.arange(case.Phi.shape[1], dtype=float)
    y = case.layout.vec()
    xc.setArray(x[:n_local] if n_local else np.zeros(0))
    case.PhiP.mult(xc, y)
    np.testing.assert_allclose(case.layout.to_natural(y), case.Phi @ x, rtol=1e-14)
    xc.destroy(), y.destroy(), case.destroy()


def test_restricted_asm_with_gmres():
    case = Case.build(make_problem("poisson2d", 31), 16, 2)
    b = case.rhs(1)
    r = solve(case.A, b, lambda pc: configure_asm(pc, case.layout, "restrict"),
              ksp_type="gmres", method="ras")
    basic = run_methods(case, ["asm"], b)[0]
    assert r.converged and r.rnorm_true < 1e-8
    # RAS is the better one-level method (Cai & Sarkis); it needs a nonsymmetric Krylov method.
    assert r.iterations <= basic.iterations
    b.destroy(), case.destroy()
