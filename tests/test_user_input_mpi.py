"""What a PETSc user hands a DD preconditioner, on 1-4 ranks: their own subdomains (overlapping,
or parts grown by the PC), each rank's rows as one subdomain, local Neumann matrices, the block
size and the near-null space; the coarse correction's forms; bad input refused on every rank."""
import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI
from petsc4py import PETSc

from conftest import (apply_gathered, client_matrix, gathered_csr, pc_from_options,
                      raised_everywhere, solve_with_pc_options)
from ddlearn.classical import reference
from ddlearn.decomposition.subdomains import Subdomains
from ddlearn.pc import set_auxiliary_matrices, set_subdomains

pytestmark = pytest.mark.mpi
COMM = MPI.COMM_WORLD
PC = "TwoLevelSchwarzPC"
#: the 2 x 2 coupling of the vector test problem kron(L, C): SPD, not an M-matrix
C = np.array([[2.0, 1.0], [1.0, 2.0]])


def _vector_matrix(n: int):
    """``kron(L, C)``: the 5-point Laplacian ``L`` coupling two components by ``C`` at every
    node (block size 2, node-wise dofs, whole nodes per rank). Its exact Neumann matrices are
    ``kron(L_i^N, C)``; the algebraic approximation is indefinite."""
    L = gathered_csr(client_matrix(n, 1.0))
    K = sp.kron(L, C, format="csr")
    A = PETSc.Mat().createAIJ(((PETSc.DECIDE, K.shape[0]), (PETSc.DECIDE, K.shape[0])), bsize=2,
                              comm=PETSc.COMM_WORLD)
    A.setUp()
    lo, hi = A.getOwnershipRange()
    rows = K[lo:hi]
    A.setPreallocationCSR((rows.indptr, rows.indices, rows.data))
    A.assemble()
    return A, L


def _sets(ctx):
    s = ctx.subdomains
    return [I.copy() for I in s.overlapping], [O.copy() for O in s.owned]


def test_user_subdomains_give_the_same_operator():
    n = 31
    A = client_matrix(n, 1e6)
    own = pc_from_options(A, "us_own_", pc=PC, subdomains=8, partition="metis",
                          coarse_space="nicolaides")
    overlapping, owned = _sets(own.getPythonContext())
    x = np.random.default_rng(0).standard_normal(n * n)
    y = apply_gathered(own, A, x)
    rng = np.random.default_rng(COMM.rank)
    for k, (sets, flag) in enumerate(((overlapping, True), (owned, False))):
        B = client_matrix(n, 1e6)
        set_subdomains(B, [rng.permutation(s) for s in sets], overlapping=flag)
        pc = pc_from_options(B, f"us_{k}_", pc=PC, coarse_space="nicolaides")
        ctx = pc.getPythonContext()
        # parts grown here by graph layers (in parallel) are the PC's own overlapping subdomains
        assert all(np.array_equal(a, b) for a, b in zip(ctx.subdomains.overlapping, overlapping))
        assert ctx.subdomains.partitioner == "user"
        np.testing.assert_allclose(apply_gathered(pc, B, x), y, rtol=0,
                                   atol=1e-12 * np.abs(y).max())
        pc.destroy(), B.destroy()
    own.destroy(), A.destroy()


def test_local_partition_is_one_subdomain_per_rank():
    n = 31
    A = client_matrix(n, 1.0)
    b = A.createVecLeft()
    b.set(1.0)
    res = solve_with_pc_options(A, b, "loc_", pc=PC, partition="local", coarse_space="gdsw")
    assert res.converged and res.rnorm_true < 1e-8
    pc = pc_from_options(A, "loc2_", pc=PC, partition="local", coarse_space="nicolaides")
    s = pc.getPythonContext().subdomains
    lo, hi = A.getOwnershipRange()
    assert s.N == COMM.size and len(s.overlapping) == 1
    assert set(range(lo, hi)) <= set(s.overlapping[0].tolist())
    np.testing.assert_array_equal(s.owned[0], np.arange(lo, hi))
    pc.destroy(), A.destroy(), b.destroy()


def test_block_size_keeps_nodes_whole_and_uses_the_near_null_space():
    A, _ = _vector_matrix(15)
    for k, coarse in enumerate(("nicolaides", "gdsw", "rgdsw")):
        pc = pc_from_options(A, f"bs_{k}_", pc=PC, subdomains=4, coarse_space=coarse)
        ctx = pc.getPythonContext()
        for I in ctx.subdomains.overlapping:
            assert len(I) % 2 == 0 and np.array_equal(I[0::2] + 1, I[1::2])
        n0 = ctx.Phi.getSize()[1]
        if coarse == "nicolaides":  # the constants of each component: 2 per subdomain
            assert n0 == 2 * 4, n0
        Phi = gathered_csr(ctx.Phi).toarray()
        # each component's constant is in the span away from the boundary's influence
        one = np.zeros(Phi.shape[0])
        one[0::2] = 1.0
        coef, *_ = np.linalg.lstsq(Phi, one, rcond=None)
        assert np.linalg.norm(Phi @ coef - one) < np.linalg.norm(one)
        pc.destroy()
    A.destroy()


def test_spectral_refuses_an_indefinite_algebraic_neumann_matrix_and_takes_the_exact_one():
    n, N = 31, 16
    A, L = _vector_matrix(n)
    msgs = raised_everywhere(lambda: pc_from_options(A, "ind_", pc=PC, subdomains=N,
                                                     coarse_space="spectral").destroy(),
                             exc=Exception)
    assert all(m and "is indefinite on subdomain" in m and "set_auxiliary_matrices" in m
               for m in msgs), msgs
    # the same subdomains handed back with their exact Neumann matrices kron(L_i^N, C), in a
    # shuffled numbering of each subdomain
    probe = pc_from_options(A, "ind_probe_", pc=PC, subdomains=N, coarse_space="nicolaides")
    overlapping, _ = _sets(probe.getPythonContext())
    probe.destroy()
    rng = np.random.default_rng(10 + COMM.rank)
    shuffled = [rng.permutation(I) for I in overlapping]
    mats = []
    for I, S in zip(overlapping, shuffled):
        nodes = I[0::2] // 2
        exact = sp.kron(reference.neumann_matrix(L, nodes), C, format="csr")
        where = np.searchsorted(I, S)  # position of each shuffled index in sorted I
        mats.append(exact[where][:, where])
    B, _ = _vector_matrix(n)
    set_subdomains(B, shuffled)
    set_auxiliary_matrices(B, mats)
    b = B.createVecLeft()
    b.set(1.0)
    res = solve_with_pc_options(B, b, "aux_", pc=PC, coarse_space="spectral", spectral_nev=6)
    one = solve_with_pc_options(B, b, "aux1_", pc=PC, coarse_space="none")
    assert res.converged and res.rnorm_true < 1e-8, res
    assert res.iterations < one.iterations, (res.iterations, one.iterations)
    for o in (A, B, b):
        o.destroy()


def test_coarse_correction_forms():
    n, N = 31, 16
    A = client_matrix(n, 1e6)
    b = A.createVecLeft()
    b.set(1.0)
    its = {}
    for form in ("additive", "balanced"):
        r = solve_with_pc_options(A, b, f"cf_{form}_", pc=PC, subdomains=N,
                                  coarse_space="nicolaides", coarse_correction=form)
        assert r.converged and r.rnorm_true < 1e-8
        its[form] = r.iterations
    assert its["balanced"] <= its["additive"], its
    r = solve_with_pc_options(A, b, "cf_def_", ksp="gmres", pc=PC, subdomains=N,
                              coarse_space="nicolaides", coarse_correction="deflated")
    assert r.converged and r.rnorm_true < 1e-8
    # balanced is symmetric: <M x, y> = <x, M y>
    pc = pc_from_options(A, "cf_sym_", pc=PC, subdomains=N, coarse_space="nicolaides",
                         coarse_correction="balanced")
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal(n * n), rng.standard_normal(n * n)
    Mx, My = apply_gathered(pc, A, x), apply_gathered(pc, A, y)
    assert abs(Mx @ y - x @ My) <= 1e-10 * abs(Mx @ y)
    pc.destroy()
    msgs = raised_everywhere(lambda: solve_with_pc_options(
        A, b, "cf_bad_", pc=PC, subdomains=N, coarse_correction="deflated"), exc=Exception)
    assert all(m and "not symmetric, so CG does not apply" in m for m in msgs), msgs
    A.destroy(), b.destroy()


def test_bad_user_input_is_refused_on_every_rank():
    n = 15
    rank, size = COMM.rank, COMM.size

    def with_sets(prefix, sets, overlapping=True, mats=None, matrix=None, **opts):
        def run():
            M = matrix() if matrix else client_matrix(n, 1.0)
            try:
                set_subdomains(M, sets, overlapping)
                if mats is not None:
                    set_auxiliary_matrices(M, mats)
                pc_from_options(M, prefix, pc=PC, coarse_space="spectral", **opts).destroy()
            finally:
                M.destroy()
        return run

    lo = rank * (n * n // size)
    mine = np.arange(lo, (rank + 1) * (n * n // size) if rank < size - 1 else n * n)
    cases = [
        (with_sets("bi0_", [mine + n * n]), "reach outside the"),
        (with_sets("bi1_", [mine[: len(mine) // 2]]), "rows in no subdomain"),
        (with_sets("bi2_", [mine], mats=[sp.identity(3, format="csr")]),
         "do not match their subdomains' sizes"),
        (with_sets("bi3_", [mine], mats=[sp.identity(len(mine))] * 2), "auxiliary matrices for"),
        (with_sets("bi4_", [mine], overlapping=False, mats=[sp.identity(len(mine))]),
         "without the overlapping subdomains"),
    ]

    def wrong_null_space():
        A, _ = _vector_matrix(7)
        v = PETSc.Vec().createMPI((3, PETSc.DECIDE), comm=PETSc.COMM_WORLD)
        v.set(1.0)
        A.setNearNullSpace(PETSc.NullSpace().create(vectors=[v]))
        try:
            pc_from_options(A, "bi6_", pc=PC, subdomains=4, coarse_space="nicolaides").destroy()
        finally:
            A.destroy()

    def learned_on_blocks():
        A, _ = _vector_matrix(15)
        try:
            pc_from_options(A, "bi7_", pc=PC, subdomains=4, coarse_space="learned").destroy()
        finally:
            A.destroy()

    def blocks_that_do_not_divide():
        A = client_matrix(n, 1.0)  # 225 rows: some rank owns an odd number of them
        try:
            Subdomains.from_matrix(A, 4, 1, block_size=2)
        finally:
            A.destroy()

    cases += [(wrong_null_space, "local entries but the matrix has"),
              (learned_on_blocks, "trained on scalar diffusion (block size 1)"),
              (blocks_that_do_not_divide, "does not divide this rank's")]
    for run, expected in cases:
        msgs = raised_everywhere(run, exc=Exception)
        assert all(m and expected in m for m in msgs), (expected, msgs)
