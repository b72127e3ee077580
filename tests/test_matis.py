"""The PC on what PETSc programs hand a domain-decomposition preconditioner besides AIJ: an
unassembled ``MATIS`` (each process its own elements' Neumann matrix), BAIJ, SBAIJ and dense
Pmats (converted), and a matrix-free one (refused). Serially and (``-m mpi``) on 2 or more
ranks: a MATIS has one subdomain per process.

The client is the 2D P1 elasticity problem with stiff inclusions
(:func:`ddlearn.harness.fem.to_matis` and :func:`~ddlearn.harness.fem.to_petsc`)."""
import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI
from petsc4py import PETSc

from conftest import apply_gathered, gathered_csr, pc_from_options, petsc_options, \
    raised_everywhere
from ddlearn.classical.coarse import Spectral
from ddlearn.classical.krylov import solve
from ddlearn.decomposition.petsc_rows import assembled_aij
from ddlearn.harness import fem
from ddlearn.pc import TwoLevelSchwarzPC, set_auxiliary_matrices, set_coordinates, set_subdomains
from ddlearn.pc.unassembled import local_neumann, local_rows

COMM = MPI.COMM_WORLD
PC = "TwoLevelSchwarzPC"
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def problem():
    return fem.build(dim=2, cells=10, contrast=1e6, seed=2, count=4)


@pytest.fixture(scope="module")
def matis(problem):
    A, b, coords = fem.to_matis(problem)
    yield A, b
    for o in (A, b, coords):
        o.destroy()


def _gathered_neumann(I: np.ndarray, AN: sp.csr_matrix, n: int) -> sp.csr_matrix:
    """:math:`\\sum_p R_p^T A_p^N R_p` over the ranks' ``(I, AN)``, on every rank."""
    total = sp.csr_matrix((n, n))
    for I_p, AN_p in COMM.allgather((I, AN.tocoo())):
        total = total + sp.csr_matrix((AN_p.data, (I_p[AN_p.row], I_p[AN_p.col])), shape=(n, n))
    return total


def test_the_local_matrices_are_the_neumann_matrices_of_the_grown_subdomains(matis, problem):
    """Each process's subdomain is its local rows grown by one layer of the graph, and its
    Neumann matrices sum to the matrix: :math:`\\sum_p R_p^T A_p^N R_p = A`."""
    A, _ = matis
    P = assembled_aij(A)
    I, AN = local_neumann(A, P, 1)
    L = local_rows(A)
    whole = gathered_csr(P)
    assert np.all(np.diff(I) > 0) and np.isin(L, I).all()
    nodes = np.unique(L // 2)
    graph = (abs(whole) != 0).astype(int)
    reach = np.unique(sp.csr_matrix(graph[2 * nodes]).indices // 2)  # one layer on nodes
    assert np.array_equal(I, (2 * reach[:, None] + np.arange(2)).ravel())
    assert np.array_equal(AN[np.isin(I, L, invert=True)].nnz, 0)  # zero on the added layers
    total = _gathered_neumann(I, AN, whole.shape[0])
    assert abs(total - whole).max() <= 1e-12 * abs(whole).max()
    P.destroy()


def test_matis_default_is_spectral_on_the_processes_and_converges(matis):
    A, b = matis
    with petsc_options({"mis_pc_type": "python", "mis_pc_python_type": f"ddlearn.pc.{PC}"}):
        r = solve(A, b, lambda pc: None, prefix="mis_")
    assert r.converged and r.rnorm_true < 1e-6, r  # round-off in A x at contrast 1e6
    pc = pc_from_options(A, "mis_", PC)
    ctx = pc.getPythonContext()
    assert ctx.space.name == "spectral" and ctx.subdomains.N == COMM.size
    # the adaptive setting: a threshold, the count per subdomain capped
    assert (ctx.space.settings.threshold, ctx.space.settings.nev) == \
        (Spectral.ADAPTIVE["threshold"], Spectral.ADAPTIVE["nev"])
    pc.destroy()


def test_matis_equals_the_assembled_matrix_with_the_same_neumann_matrices(matis):
    """The MATIS path is the documented user path on an assembled matrix: the same overlapping
    subdomains (set_subdomains) and Neumann matrices (set_auxiliary_matrices) give the same
    preconditioner, to the eigensolver's tolerance."""
    A, _ = matis
    P = assembled_aij(A)
    I, AN = local_neumann(A, P, 1)
    set_subdomains(P, [I], overlapping=True)
    set_auxiliary_matrices(P, [AN])
    x = np.random.default_rng(5).standard_normal(A.getSize()[0])
    opts = dict(spectral_tol=1e-12)
    y = apply_gathered(pc := pc_from_options(A, "mis_", PC, **opts), A, x)
    opts.update({f"spectral_{k}": v for k, v in Spectral.ADAPTIVE.items()})
    pc.destroy()
    z = apply_gathered(pc := pc_from_options(P, "aux_", PC, coarse_space="spectral", **opts),
                       P, x)
    pc.destroy(), P.destroy()
    assert np.linalg.norm(y - z) <= 1e-7 * np.linalg.norm(z)


def test_new_values_in_the_local_matrices_reach_the_coarse_space(problem):
    """A values-only update (rank 0's local matrix scaled by 3, the same objects) gives the
    preconditioner a fresh set-up on the new values gives."""
    A, b, coords = fem.to_matis(problem)
    x = np.random.default_rng(6).standard_normal(A.getSize()[0])
    opts = dict(spectral_tol=1e-12)
    pc = pc_from_options(A, "upd_", PC, **opts)
    old = apply_gathered(pc, A, x)
    local = A.getISLocalMat()
    if COMM.rank == 0:
        local.scale(3.0)
    A.setISLocalMat(local)
    A.assemble()
    pc.setOperators(A, A)
    pc.setUp()
    updated = apply_gathered(pc, A, x)
    fresh = apply_gathered(other := pc_from_options(A, "new_", PC, **opts), A, x)
    assert np.linalg.norm(updated - fresh) <= 1e-7 * np.linalg.norm(fresh)
    if COMM.size > 1:  # the values changed somewhere, and so did the preconditioner
        assert np.linalg.norm(updated - old) > 1e-3 * np.linalg.norm(fresh)
    for o in (pc, other, A, b, coords):
        o.destroy()


@pytest.mark.parametrize("family", ["baij", "sbaij"])
def test_a_pmat_stored_otherwise_is_its_aij_form(problem, family):
    """BAIJ and SBAIJ Pmats give the preconditioner of the same AIJ matrix (block size and
    near-null space kept) to round-off."""
    A, b, coords = fem.to_petsc(problem)
    other = A.convert(family, PETSc.Mat())
    other.setNearNullSpace(A.getNearNullSpace())
    set_coordinates(other, A.query("ddlearn_coordinates").getArray().reshape(-1, 2))
    if family == "sbaij":
        other.setOption(PETSc.Mat.Option.SYMMETRIC, True)
    x = np.random.default_rng(7).standard_normal(A.getSize()[0])
    y = apply_gathered(pc := pc_from_options(A, "aij_", PC, subdomains=4), A, x)
    pc.destroy()
    ctx_pc = pc_from_options(other, "oth_", PC, subdomains=4)
    z = apply_gathered(ctx_pc, other, x)
    assert ctx_pc.getPythonContext().space.name == "harmonic"  # a symmetric system's default
    ctx_pc.destroy()
    assert np.linalg.norm(y - z) <= 1e-8 * np.linalg.norm(y)  # contrast 1e6 amplifies round-off
    for o in (other, A, b, coords):
        o.destroy()


def test_a_nonsymmetric_system_defaults_to_gdsw(problem):
    """The harmonic default for systems compresses traces in the energy norm, which needs
    symmetry: the same elasticity matrix with its upper triangle scaled by 1.1 gets ``gdsw``,
    and the preconditioner it builds makes GMRES converge."""
    A, b, coords = fem.to_petsc(problem)
    ai, aj, av = A.getValuesCSR()
    lo = A.getOwnershipRange()[0]
    rows = lo + np.repeat(np.arange(len(ai) - 1), np.diff(ai))
    C = PETSc.Mat().createAIJ(A.getSizes(), bsize=A.getBlockSize(), comm=A.getComm(),
                              csr=(ai, aj, np.where(aj > rows, 1.1 * av, av)))
    C.setNearNullSpace(A.getNearNullSpace())
    pc = pc_from_options(C, "nonsym_", PC, subdomains=4)
    assert pc.getPythonContext().space.name == "gdsw"
    ksp = PETSc.KSP().create(comm=C.getComm())
    ksp.setOperators(C, C)
    ksp.setType("gmres")
    ksp.setPC(pc)
    ksp.setTolerances(rtol=1e-8, max_it=500)
    x = C.createVecLeft()
    ksp.solve(b, x)
    assert ksp.getConvergedReason() > 0
    for o in (ksp, pc, C, A, b, coords, x):
        o.destroy()


def test_a_dense_pmat_preconditions_its_matrix(problem):
    """A dense Pmat (block size 1: PETSc's dense conversion keeps none) is converted and the
    PC built on it preconditions CG on the matrix to 1e-8."""
    A, b, coords = fem.to_petsc(problem)
    dense = A.convert("dense", PETSc.Mat())
    ksp = PETSc.KSP().create(comm=A.getComm())
    ksp.setOperators(A, dense)
    ksp.setType("cg")
    ksp.setTolerances(rtol=1e-8)
    ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
    ksp.getPC().setType("python")
    ksp.getPC().setPythonContext(TwoLevelSchwarzPC(subdomains=4))
    x = b.duplicate()
    ksp.solve(b, x)
    assert ksp.getConvergedReason() > 0
    for o in (ksp, x, dense, A, b, coords):
        o.destroy()


def _shell_pc(A: PETSc.Mat):
    shell = PETSc.Mat().createPython(A.getSizes(), context=_Mult(A), comm=A.getComm())
    shell.setUp()
    return lambda: pc_from_options(shell, "sh_", PC)


class _Mult:
    def __init__(self, A):
        self.A = A

    def mult(self, mat, x, y):
        self.A.mult(x, y)


def test_a_matrix_free_pmat_is_refused_on_every_rank(problem):
    A, b, coords = fem.to_petsc(problem)
    messages = raised_everywhere(_shell_pc(A), exc=Exception)
    assert all(m is not None and "stores no entries" in m and "Pmat" in m for m in messages)
    for o in (A, b, coords):
        o.destroy()


def _non_square_matis(problem):
    """A MATIS whose column map differs from its row map (the rows reversed)."""
    A, b, coords = fem.to_matis(problem)
    rows = A.getLGMap()[0].getIndices()
    cmap = PETSc.LGMap().create(rows[::-1].copy(), comm=A.getComm())
    B = PETSc.Mat().createIS(A.getSizes(), lgmapr=A.getLGMap()[0], lgmapc=cmap,
                             comm=A.getComm())
    B.setISLocalMat(A.getISLocalMat())
    B.assemble()
    cmap.destroy()
    for o in (A, b, coords):
        o.destroy()
    return B


@pytest.mark.parametrize("bad, expected", [
    (dict(subdomains=COMM.size + 1), f"-bad_ddlearn_subdomains {COMM.size + 1} with a MATIS"),
    (dict(partition="metis"), "-bad_ddlearn_partition metis with a MATIS"),
    (dict(overlap=0), "-bad_ddlearn_overlap 0 with a MATIS"),
    (dict(coarse_space="hats"), "the hats coarse space serves scalar problems only"),
    ("non-square", "on one local-to-global map for rows and columns"),
])
def test_bad_matis_input_is_refused_on_every_rank(problem, matis, bad, expected):
    if bad == "non-square":
        A, options = _non_square_matis(problem), {}
    else:
        (A, _), options = matis, bad
    messages = raised_everywhere(lambda: pc_from_options(A, "bad_", PC, **options),
                                 exc=Exception)
    assert all(m is not None and expected in m for m in messages), messages
    if bad == "non-square":
        A.destroy()
