"""A spectral coarse level below a spectral level (multilevel GenEO): the level above's Neumann
matrices projected onto A_0 = Phi^T A Phi (ddlearn.classical.splitting) bound A_0 from above
and below, the nested PC builds its Neumann matrices from them, converges under CG, follows a
values-only re-setup, and refuses a coarse level too narrow for them. Serial and on 2-4 ranks
(the pieces travel to the coarse ranks)."""
import numpy as np
import pytest
from mpi4py import MPI

from conftest import (apply_gathered, channels_system, converged_iterations, load_script,
                      pc_from_options, pc_options, petsc_options, raised_everywhere)
from ddlearn.classical.neumann import neumann_matrices
from ddlearn.classical.splitting import galerkin_splitting
from ddlearn.harness.systems import natural_matrix
from ddlearn.decomposition.problems import make_problem

pytestmark = pytest.mark.mpi
COMM = MPI.COMM_WORLD
SIZE = COMM.Get_size()
PC = "TwoLevelSchwarzPC"
N = 16
FINE = dict(subdomains=N, coarse_space="spectral", spectral_nev=4)
NESTED = dict(coarse_ranks=min(2, SIZE), coarse_ksp_type="preonly", coarse_pc_type="python",
              coarse_pc_python_type="ddlearn.pc.TwoLevelSchwarzPC", coarse_ddlearn_subdomains=4,
              coarse_ddlearn_coarse_space="spectral", coarse_ddlearn_spectral_nev=4)
#: a fixed number of Chebyshev iterations on the coarse level: still a fixed linear map
CHEBYSHEV = dict(coarse_ksp_type="chebyshev", coarse_ksp_norm_type="none", coarse_ksp_max_it=2)


@pytest.fixture(scope="module")
def problem():
    """2D channels of contrast 1e6 (63², 16 subdomains), b = 1."""
    A, b = channels_system(63)
    yield A, b
    A.destroy(), b.destroy()


def _solve(problem, prefix, **ddlearn):
    return converged_iterations(*problem, prefix, PC, **ddlearn)


def _nested(pc):
    """The coarse level's PC context's meta, from the first coarse rank (every rank)."""
    coarse = pc.getPythonContext().two_level.coarse
    meta = coarse.ksp.getPC().getPythonContext().meta if coarse.is_coarse else None
    return COMM.bcast(meta, root=coarse.ranks[0])


def test_the_pieces_bound_the_coarse_matrix(problem):
    r"""A_0 <= sum_i (R_i Phi)^T A_i^N (R_i Phi) <= k A_0, k the largest number of subdomains
    sharing a row: what carries the GenEO estimate to the level below."""
    A, _ = problem
    pc = pc_from_options(A, "split_", pc=PC, **FINE)
    ctx = pc.getPythonContext()
    s = ctx.subdomains
    pieces = galerkin_splitting(ctx.Phi, s, neumann_matrices(A, s))
    k = COMM.allreduce(max(float((1.0 / w).max()) for w in s.weights), op=MPI.MAX)
    coarse = ctx.two_level.coarse
    A0 = coarse.A0.getValuesCSR() if coarse.is_coarse else None
    everything = COMM.gather((pieces, A0), root=0)
    if COMM.rank == 0:
        n0 = ctx.Phi.getSize()[1]
        S, A0 = np.zeros((n0, n0)), np.zeros((n0, n0))
        for part, csr in everything:
            for J, B in zip(part.rows, part.blocks):
                S[np.ix_(J, J)] += B
            if csr is not None:  # one coarse rank: the whole A_0, sequential
                indptr, indices, values = csr
                A0[np.repeat(np.arange(n0), np.diff(indptr)), indices] = values
        assert np.allclose(S, S.T, rtol=0, atol=1e-12 * np.abs(S).max())
        # the Loewner order as semidefinite differences, diagonally scaled: their rounding is
        # eps relative to the scaled A_0 (a generalised eigensolve's would be cond(A_0) eps,
        # 1e-8 at this contrast, the size of the margin itself)
        d = 1.0 / np.sqrt(np.diag(A0))
        scaled = d[:, None] * d[None, :]
        top = np.linalg.eigvalsh(A0 * scaled).max()
        above = np.linalg.eigvalsh((S - A0) * scaled).min()
        below = np.linalg.eigvalsh((k * A0 - S) * scaled).min()
        assert above > -1e-12 * top and below > -1e-12 * top, (above, below, top, k)
    pc.destroy()


def test_three_levels_with_a_spectral_coarse_level(problem):
    """The nested PC builds its spectral space from the level above's Neumann matrices (its
    interior partition of unity, as with a user's), CG converges, and with two Chebyshev
    iterations on the coarse level the iterations stay near two levels'."""
    A, _ = problem
    pc = pc_from_options(A, "ml_", pc=PC, **FINE, **NESTED)
    meta = _nested(pc)
    assert meta["neumann_from_level_above"] is True
    assert meta["spectral"]["auxiliary"] is True
    assert meta["spectral"]["partition_of_unity_used"] == "interior"
    assert pc.getPythonContext().symmetric
    pc.destroy()
    two = _solve(problem, "ml2_", **FINE)
    three = _solve(problem, "ml3_", **FINE, **NESTED)
    chebyshev = _solve(problem, "ml3c_", **FINE, **{**NESTED, **CHEBYSHEV})
    assert three > 0 and chebyshev <= 1.3 * two, (two, three, chebyshev)


def test_a_values_only_resetup_projects_the_new_values():
    """New values in the same matrix: the pieces are projected again, so the re-set-up PC
    applies what a PC built on the new values applies (the options stay in the database, as
    in a program: the spectral space is rebuilt, and with it the coarse solver)."""
    first = make_problem("random_channels", 47, contrast=1e6, seed=1)
    second = make_problem("random_channels", 47, contrast=1e6, seed=2)
    A, B = natural_matrix(first), natural_matrix(second)
    x = np.random.default_rng(0).standard_normal(A.getSize()[0])
    with petsc_options(pc_options("rv_", PC, {**FINE, **NESTED})):
        pc = pc_from_options(A, "rv_", pc=PC)
        A.setValuesCSR(*B.getValuesCSR())
        A.assemble()
        pc.setOperators(A, A)
        pc.setUp()
        assert _nested(pc)["neumann_from_level_above"] is True
        y = apply_gathered(pc, A, x)
    fresh = pc_from_options(B, "rf_", pc=PC, **FINE, **NESTED)
    expected = apply_gathered(fresh, B, x)
    np.testing.assert_allclose(y, expected, rtol=0, atol=1e-10 * np.abs(expected).max())
    for o in (pc, fresh, A, B):
        o.destroy()


def test_a_coarse_level_too_narrow_for_the_pieces_is_refused_on_every_rank(problem):
    """Without overlap on the coarse level a piece reaches outside the subdomain owning it: every
    rank says so and names the nested overlap option."""
    A, _ = problem
    msgs = raised_everywhere(lambda: pc_from_options(
        A, "nw_", pc=PC, **FINE, **NESTED, coarse_ddlearn_overlap=0).destroy(), exc=Exception)
    assert all(m and "-nw_ddlearn_coarse_ddlearn_overlap 2" in m for m in msgs), msgs


def test_a_level_above_without_semidefinite_neumann_matrices_is_refused_on_every_rank():
    """Elasticity from a program that hands no Neumann matrices: the level above has none to
    project (its algebraic ones are indefinite), and every rank says what to hand over."""
    example = load_script("examples/elasticity.py", "elasticity_example")
    args = ["-dim", "2", "-cells", "8", "-pc_type", "python", "-pc_python_type",
            "ddlearn.pc.TwoLevelSchwarzPC", "-ddlearn_subdomains", "4",
            "-ddlearn_coarse_space", "gdsw", "-ddlearn_coarse_ksp_type", "preonly",
            "-ddlearn_coarse_pc_type", "python", "-ddlearn_coarse_pc_python_type",
            "ddlearn.pc.TwoLevelSchwarzPC", "-ddlearn_coarse_ddlearn_subdomains", "2",
            "-ddlearn_coarse_ddlearn_coarse_space", "spectral"]
    msgs = raised_everywhere(lambda: example.main(args), exc=Exception)
    assert all(m and "multilevel GenEO" in m and "set_auxiliary_matrices" in m
               for m in msgs), msgs
