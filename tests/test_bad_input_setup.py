"""Bad input found during the set-up stops every rank with the same error, naming the problem
and the fix, instead of leaving some ranks in a collective: a singular local block (a zero
pivot) in one subdomain, a near-null space with dependent or zero vectors, user subdomains that
split a node. Each check runs serially and (``-m mpi``) on 2 or more ranks, where only the last
rank's subdomain is bad.

The subdomains are the user's bands of grid rows (``ddlearn.pc.set_subdomains``), so which one
holds the bad row is known."""
import re

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI
from petsc4py import PETSc

from conftest import apply_gathered, pc_from_options, petsc_options, raised_everywhere
from ddlearn.decomposition.nullspace import dependent_columns, near_null_space
from ddlearn.pc import set_subdomains

COMM = MPI.COMM_WORLD
PC = "TwoLevelSchwarzPC"
N = 16  # grid side: 256 rows, each rank a band of whole grid rows or more
#: the set-up of a singular block must end, not hang: a bound far above its seconds
pytestmark = pytest.mark.timeout(120)


def _laplacian(n: int = N) -> sp.csr_matrix:
    e = np.ones(n)
    T = sp.diags([-e[:-1], 2 * e, -e[:-1]], [-1, 0, 1])
    K = (sp.kron(T, sp.identity(n)) + sp.kron(sp.identity(n), T)).tocsr()
    K.sort_indices()
    return K


def _distributed(K: sp.csr_matrix, bs: int = 1) -> PETSc.Mat:
    """``K`` as an AIJ matrix on every rank of COMM_WORLD (PETSc's row split, whole nodes),
    stored entries kept as they are (explicit zeros too)."""
    A = PETSc.Mat().createAIJ(((PETSc.DECIDE, K.shape[0]), (PETSc.DECIDE, K.shape[0])),
                              bsize=bs, comm=PETSc.COMM_WORLD)
    A.setUp()
    lo, hi = A.getOwnershipRange()
    rows = K[lo:hi]
    A.setPreallocationCSR((rows.indptr.astype(PETSc.IntType), rows.indices.astype(PETSc.IntType),
                           rows.data))
    A.assemble()
    return A


def _zeroed(K: sp.csr_matrix, r: int, structural: bool) -> sp.csr_matrix:
    """``K`` with row and column ``r`` zero: the entries stored as zeros (a numerically zero
    pivot) or removed (a missing diagonal entry)."""
    K = K.copy()
    for j in range(K.indptr[r], K.indptr[r + 1]):
        c = K.indices[j]
        K.data[j] = 0.0
        K.data[K.indptr[c] + np.searchsorted(K.indices[K.indptr[c]:K.indptr[c + 1]], r)] = 0.0
    if structural:
        K.eliminate_zeros()
    return K


def _bands(lo: int, hi: int) -> list[np.ndarray]:
    """Rows ``lo .. hi - 1`` as contiguous bands: 4 subdomains in all on 1 or 2 ranks, one a
    rank on more."""
    return np.array_split(np.arange(lo, hi), max(1, 4 // COMM.size))


def _singular_row() -> tuple[int, int, int]:
    """A row in the middle of the last rank's last band (PETSc's split of ``N * N`` rows), more
    than one graph layer away from every other band, that band's subdomain id and its rank."""
    last = COMM.size - 1
    lo = sum(N * N // COMM.size + (k < N * N % COMM.size) for k in range(last))
    band = _bands(lo, N * N)[-1]
    r = (band[0] + band[-1]) // 2 // N * N + N // 2
    assert r - band[0] >= N and band[-1] - r >= N  # more than one grid row inside
    return r, COMM.size * len(_bands(lo, N * N)) - 1, last


def _bands_as_subdomains(A: PETSc.Mat) -> None:
    """Each rank's rows in bands, the non-overlapping parts the PC grows (numbered rank by
    rank)."""
    lo, hi = A.getOwnershipRange()
    set_subdomains(A, _bands(lo, hi), overlapping=False)


def _deepest(message: str) -> str:
    """The last message of the chain :func:`raised_everywhere` joins (a Python PC's error
    reaches the caller wrapped in PETSc's)."""
    return message.split(" <- ")[-1]


def _check_zero_pivot(structural: bool, prefix: str) -> None:
    r, sub, rank = _singular_row()
    K = _zeroed(_laplacian(), r, structural)
    A = _distributed(K)
    _bands_as_subdomains(A)
    try:
        msgs = raised_everywhere(lambda: pc_from_options(
            A, prefix, pc=PC, coarse_space="nicolaides").destroy(), exc=Exception)
    finally:
        A.destroy()
    assert all(m is not None for m in msgs), msgs
    deepest = {_deepest(m) for m in msgs}
    assert len(deepest) == 1, deepest  # the same error on every rank
    text = deepest.pop()
    assert f"subdomain {sub} (rank {rank}," in text, text
    assert f"row {r} (a zero row) of the matrix has a zero or missing diagonal entry" in text
    assert "zero pivot" in text and "check the matrix" in text
    assert f"-{prefix}ddlearn_local_sub_pc_factor_shift_type nonzero" in text
    # only that subdomain's block is singular
    assert "factorisation of 1 local block " in text


@pytest.mark.parametrize("structural", [False, True], ids=["zero", "missing"])
def test_zero_pivot_in_one_subdomain_raises_naming_it(structural):
    _check_zero_pivot(structural, f"zp_{int(structural)}_")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("structural", [False, True], ids=["zero", "missing"])
def test_zero_pivot_on_one_rank_raises_on_every_rank(structural):
    """Only the last rank's block is singular; every rank raises the same error (before the
    check, that rank raised alone and the others waited in the coarse set-up)."""
    _check_zero_pivot(structural, f"zpm_{int(structural)}_")


def _check_singular_without_zero_diagonal() -> None:
    """A singular 2 x 2 coupling (rows r, r + 1: [[1, 1], [1, 1]], cut off the grid) has no
    zero diagonal: the row comes from PETSc's LU, mapped back to the matrix's numbering."""
    r, sub, rank = _singular_row()
    K = _laplacian().tolil()
    for q in (r, r + 1):
        K[q, :] = 0.0
        K[:, q] = 0.0
    K[r, r] = K[r + 1, r + 1] = K[r, r + 1] = K[r + 1, r] = 1.0
    A = _distributed(K.tocsr())
    _bands_as_subdomains(A)
    try:
        msgs = raised_everywhere(lambda: pc_from_options(
            A, "zp2_", pc=PC, coarse_space="none", local_solver="lu").destroy(), exc=Exception)
    finally:
        A.destroy()
    assert all(m is not None for m in msgs), msgs
    text = _deepest(msgs[0])
    assert all(_deepest(m) == text for m in msgs)
    assert f"subdomain {sub} (rank {rank}," in text
    assert "PETSc's LU met the zero pivot" in text
    assert any(f"at row {q} of the matrix" in text for q in (r, r + 1)), text


def test_singular_block_without_zero_diagonal_names_petsc_pivot_row():
    _check_singular_without_zero_diagonal()


@pytest.mark.mpi(min_size=2)
def test_singular_block_without_zero_diagonal_on_one_rank():
    _check_singular_without_zero_diagonal()


def test_shift_option_named_in_the_error_lets_the_setup_through():
    """The last resort the error names (with the local solver this build picks) works: the
    options it gives reach the blocks' factorisation."""
    r, _, _ = _singular_row()
    A = _distributed(_zeroed(_laplacian(), r, structural=False))
    _bands_as_subdomains(A)
    msgs = raised_everywhere(lambda: pc_from_options(
        A, "zps_", pc=PC, coarse_space="nicolaides").destroy(), exc=Exception)
    fix = _deepest(msgs[0]).split("shift the local pivots")[-1]
    named = dict(re.findall(r"-(zps_\w+) (\w+)", fix))
    assert "zps_ddlearn_local_sub_pc_factor_shift_type" in named, fix
    with petsc_options(named):
        pc = pc_from_options(A, "zps_", pc=PC, coarse_space="nicolaides")
    y = apply_gathered(pc, A, np.ones(N * N))
    assert np.all(np.isfinite(y))
    pc.destroy(), A.destroy()


# -- near-null space ------------------------------------------------------------------------

def _vector_matrix() -> PETSc.Mat:
    """``kron(L, C)``: two components per node (block size 2), SPD."""
    return _distributed(sp.kron(_laplacian(), np.array([[2.0, 1.0], [1.0, 2.0]]), format="csr"),
                        bs=2)


def _with_null_space(A: PETSc.Mat, columns, constant: bool = False) -> None:
    """Set the near-null space of ``A`` from functions of the global row index."""
    lo, hi = A.getOwnershipRange()
    rows = np.arange(lo, hi)
    vecs = []
    for f in columns:
        v = A.createVecLeft()
        v.setArray(f(rows))
        vecs.append(v)
    ns = PETSc.NullSpace().create(constant=constant, vectors=vecs, comm=A.getComm())
    A.setNearNullSpace(ns)
    ns.destroy()
    for v in vecs:
        v.destroy()


COMPONENT = [lambda g: (g % 2 == 0).astype(float), lambda g: (g % 2 == 1).astype(float)]
#: (columns, has_constant, what the error says)
BAD_NULL_SPACES = {
    "repeated": ([COMPONENT[0], COMPONENT[1], COMPONENT[0]], False,
                 "vector 2 is a linear combination of vector 0"),
    "zero": ([COMPONENT[0], lambda g: np.zeros(len(g))], False, "vector 1 is zero"),
    "constant_twice": ([lambda g: 2.0 * np.ones(len(g))], True,
                       "vector 0 is a linear combination of the constant (has_constant=True)"),
    "sum": ([COMPONENT[0], COMPONENT[1], lambda g: COMPONENT[0](g) - 3.0 * COMPONENT[1](g)],
            False, "vector 2 is a linear combination of vector 0, vector 1"),
}


def _check_null_space(case: str) -> None:
    columns, constant, expected = BAD_NULL_SPACES[case]
    prefix = f"nn_{case}_"
    A = _vector_matrix()
    _with_null_space(A, columns, constant)
    try:
        msgs = raised_everywhere(lambda: pc_from_options(
            A, prefix, pc=PC, subdomains=4, coarse_space="nicolaides").destroy(), exc=Exception)
    finally:
        A.destroy()
    assert all(m is not None for m in msgs), msgs
    text = _deepest(msgs[0])
    assert all(_deepest(m) == text for m in msgs)
    assert f"-{prefix}ddlearn_near_null_space auto" in text, text
    assert "linearly dependent" in text and expected in text, text
    assert "Give linearly independent vectors" in text


@pytest.mark.parametrize("case", sorted(BAD_NULL_SPACES))
def test_dependent_near_null_space_is_refused(case):
    _check_null_space(case)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("case", sorted(BAD_NULL_SPACES))
def test_dependent_near_null_space_is_refused_on_every_rank(case):
    _check_null_space(case)


def test_independent_near_null_space_is_accepted():
    """Independent vectors pass, whatever their scale (a column of tiny entries is not taken
    for zero: the test scales the Gram matrix)."""
    A = _vector_matrix()
    _with_null_space(A, [COMPONENT[0], lambda g: 1e-12 * COMPONENT[1](g)])
    Z = near_null_space(A, "matrix", block_size=2)
    assert Z.shape[1] == 2
    _with_null_space(A, COMPONENT)
    pc = pc_from_options(A, "nn_ok_", pc=PC, subdomains=4, coarse_space="nicolaides")
    assert pc.getPythonContext().meta["n0"] == 8
    pc.destroy(), A.destroy()


def test_dependent_columns_names_the_first_dependent_column_and_what_it_depends_on():
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((50, 3))
    Z = np.column_stack([Z, Z[:, 0] - 2 * Z[:, 2], np.zeros(50), 1e-9 * Z[:, 1]])
    assert dependent_columns(MPI.COMM_SELF, Z) == [(3, [0, 2]), (4, []), (5, [1])]
    assert dependent_columns(MPI.COMM_SELF, Z[:, :3]) == []


# -- user subdomains that split a node ------------------------------------------------------

def _check_split_node() -> None:
    """Every rank gives its own nodes' rows; the last rank leaves out the second dof of one of
    its nodes (and puts it in a second set, so every row is still covered)."""
    A = _vector_matrix()
    lo, hi = A.getOwnershipRange()
    rows = np.arange(lo, hi)
    last = COMM.rank == COMM.size - 1
    node = (lo + hi) // 4  # a node of this rank (rows 2a, 2a + 1)
    sets = [rows[rows != 2 * node + 1], np.array([2 * node + 1])] if last else [rows]
    set_subdomains(A, sets, overlapping=False)
    node = COMM.bcast(node, root=COMM.size - 1)
    try:
        msgs = raised_everywhere(lambda: pc_from_options(
            A, "sn_", pc=PC, coarse_space="nicolaides").destroy(), exc=Exception)
    finally:
        A.destroy()
    assert all(m is not None for m in msgs), msgs
    text = _deepest(msgs[0])
    assert all(_deepest(m) == text for m in msgs)
    first = COMM.size - 1  # one set on every rank before the last
    assert f"subdomain {first} (index set 0 of this rank) splits node {node}" in text, text
    assert f"holds row {2 * node} of the node's rows {2 * node}, {2 * node + 1}" in text
    assert "with block size 2 a subdomain holds whole nodes" in text and \
        "MatSetBlockSize" in text


def test_user_subdomains_splitting_a_node_are_refused():
    _check_split_node()


@pytest.mark.mpi(min_size=2)
def test_user_subdomains_splitting_a_node_are_refused_on_every_rank():
    _check_split_node()
