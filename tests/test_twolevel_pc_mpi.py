"""ddlearn.pc.TwoLevelSchwarzPC on the user's own matrix, in its own ordering and row
distribution, selected purely from options, on 1-4 ranks: a plain petsc4py client, a
scikit-fem P1 client on an unstructured mesh, re-setup, reuse, bad input."""
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from mpi4py import MPI
from petsc4py import PETSc

import fem_diffusion
import petsc_client
from conftest import (apply_gathered, client_matrix, pc_from_options, petsc_options,
                      raised_everywhere, solve_with_pc_options, view_text)
from ddlearn.decomposition import Decomposition
from ddlearn.decomposition.petsc_rows import RowLayout
from ddlearn.decomposition.problems import make_problem
from ddlearn.pc import set_coordinates, two_level

pytestmark = pytest.mark.mpi
COMM = MPI.COMM_WORLD
PC = "TwoLevelSchwarzPC"


def _ddlearn_ordering(problem, N):
    """The same problem assembled in ddlearn's subdomain ordering, with coordinates."""
    layout = RowLayout(Decomposition(problem.grid, N, 1))
    A = layout.matrix(problem)
    set_coordinates(A, problem.coordinates()[layout.local_natural()])
    return layout, A


@pytest.mark.parametrize("coarse,partition", [("nicolaides", "boxes"), ("hats", "boxes"),
                                              ("none", "boxes"), ("nicolaides", "rcb")])
def test_client_natural_ordering_matches_ddlearn_ordering(coarse, partition):
    """Coordinate partitions are the same sets in any numbering, so the operator is the same
    up to the permutation (METIS's answer depends on the numbering: see the metis test)."""
    n, N = 31, 16
    problem = make_problem("channels", n, contrast=1e4)
    A_nat = client_matrix(n, 1e4)
    layout, A_dd = _ddlearn_ordering(problem, N)
    # the client's matrix is the problem's matrix in natural ordering
    x = np.random.default_rng(2).standard_normal(problem.n)
    X, Y = A_nat.createVecs()
    lo, hi = X.getOwnershipRange()
    X.setArray(x[lo:hi]), A_nat.mult(X, Y)
    np.testing.assert_allclose(Y.getArray(), (problem.matrix() @ x)[lo:hi], rtol=1e-13)
    opts = dict(pc=PC, subdomains=N, coarse_space=coarse, partition=partition)
    pcs = [pc_from_options(A_nat, "nat_", **opts), pc_from_options(A_dd, "dd_", **opts)]
    y_nat = apply_gathered(pcs[0], A_nat, x)
    Xd, Yd = layout.from_natural(x), layout.vec()
    pcs[1].apply(Xd, Yd)
    y_dd = layout.to_natural(Yd)
    np.testing.assert_allclose(y_nat, y_dd, rtol=0, atol=1e-12 * np.abs(y_dd).max())
    b_nat, b_dd = A_nat.createVecLeft(), layout.from_natural(np.ones(problem.n))
    b_nat.set(1.0)
    r_nat = solve_with_pc_options(A_nat, b_nat, "snat_", **opts)
    r_dd = solve_with_pc_options(A_dd, b_dd, "sdd_", **opts)
    assert r_nat.converged and r_nat.rnorm_true < 1e-8, r_nat
    # the same operator to 1e-12 (above): CG converges alike; the last iteration can still
    # land on either side of the tolerance, a tie that round-off decides
    assert r_dd.converged and abs(r_nat.iterations - r_dd.iterations) <= 1, (r_nat, r_dd)
    for o in (*pcs, X, Y, Xd, Yd, b_nat, b_dd, A_nat, A_dd):
        o.destroy()


def test_petsc_client_selects_the_pc_from_options_alone():
    base = ["-n", "31", "-ksp_type", "cg", "-pc_type", "python",
            "-pc_python_type", "ddlearn.pc.TwoLevelSchwarzPC", "-ddlearn_subdomains", "16"]
    one = petsc_client.main(base + ["-ddlearn_coarse_space", "none"])
    two = petsc_client.main(base + ["-with_coordinates", "1"])
    for r in (one, two):
        assert r["reason"] > 0 and r["rnorm_true"] < 1e-8
    assert two["iterations"] < one["iterations"]


@pytest.mark.parametrize("coefficient", ["constant", "channels"])
def test_fem_client(coefficient):
    """The unstructured P1 client on its own numbering, with coordinates; on channels of
    contrast 1e6 that cross the subdomains only convergence is asked (the coarse spaces here are
    not contrast-robust: that is the spectral coarse space's job)."""
    base = ["-m", "40", "-coefficient", coefficient, "-contrast", "1e6", "-ksp_type", "cg",
            "-pc_type", "python", "-pc_python_type", "ddlearn.pc.TwoLevelSchwarzPC",
            "-ddlearn_subdomains", "16"]
    runs = {c: fem_diffusion.main(base + ["-ddlearn_coarse_space", c])
            for c in ("none", "nicolaides", "hats")}
    runs["metis"] = fem_diffusion.main(base + ["-ddlearn_partition", "metis",
                                               "-ddlearn_coarse_space", "nicolaides"])
    for r in runs.values():
        assert r["reason"] > 0 and r["rnorm_true"] < 1e-8, runs
    if coefficient == "constant":
        for coarse in ("nicolaides", "hats", "metis"):
            assert runs[coarse]["iterations"] < runs["none"]["iterations"], runs


def _set_values(A, B):
    """New values into ``A`` from ``B`` (same pattern), the way an application updates its
    matrix: setValues + assembly, which PETSc's state tracking sees."""
    A.setValuesCSR(*B.getValuesCSR())
    A.assemble()


def _ksp(A, prefix):
    ksp = PETSc.KSP().create(comm=A.getComm())
    ksp.setOptionsPrefix(prefix)
    ksp.setType("cg")
    ksp.setTolerances(rtol=1e-8)
    ksp.setOperators(A)
    ksp.setFromOptions()
    return ksp


def test_same_matrix_new_values_rebuilds_values_keeps_structure():
    n, N = 23, 9
    A = petsc_client.assemble(n, 1.0)
    values = {c: petsc_client.assemble(n, c) for c in (1.0, 1e5)}  # same pattern
    b = A.createVecLeft()
    b.set(1.0)
    x = b.duplicate()
    options = {f"{p}{k}": v for p in ("rs_", "fresh_") for k, v in (
        ("pc_type", "python"), ("pc_python_type", "ddlearn.pc." + PC),
        ("ddlearn_subdomains", str(N)), ("ddlearn_partition", "metis"))}
    with petsc_options(options):
        ksp = _ksp(A, "rs_")
        ksp.solve(b, x)
        first = ksp.getIterationNumber()
        ctx = ksp.getPC().getPythonContext()
        parts = ctx.subdomains
        _set_values(A, values[1e5])
        ksp.solve(b, x)  # the KSP sees new values and sets the PC up again
        again = ksp.getIterationNumber()
        assert ctx.subdomains is parts  # partition and overlap reused
        assert ctx.timing["partition_s"] == 0.0
        fresh = _ksp(values[1e5], "fresh_")
        fresh.solve(b, x)
        assert again == fresh.getIterationNumber() != first
        # PCSetReusePreconditioner (KSPSetReusePreconditioner) keeps the preconditioner of the 1e5 values on purpose
        _set_values(A, values[1.0])
        ksp.getPC().setReusePreconditioner(True)
        ksp.solve(b, x)
        stale = ksp.getIterationNumber()
        ksp.getPC().setReusePreconditioner(False)
        ksp.solve(b, x)
        assert ksp.getIterationNumber() == first != stale
    for o in (ksp, fresh, A, *values.values(), b, x):
        o.destroy()


def test_ksp_view_shows_nested_solvers(tmp_path):
    A = client_matrix(15, 1.0)
    pc = pc_from_options(A, "v_", pc=PC, subdomains=4)
    out = view_text(pc, tmp_path / "view.txt")
    for text in ("coarse space hats", "partition boxes", "N = 4 subdomains", "n_0 = 1 ",
                 "PC Object: (v_ddlearn_local_)", "type: asm",
                 "KSP Object: (v_ddlearn_coarse_)", "type: cholesky"):
        assert text in out, (text, out)
    pc.destroy(), A.destroy()


def test_python_api_one_call():
    p = make_problem("poisson2d", 31)
    A = p.matrix()
    b = np.ones(p.n)
    if COMM.Get_size() == 1:
        M = two_level(A, "hats", subdomains=16, coordinates=p.coordinates())
        its = {}
        for label, prec in (("none", None), ("two-level", M.aspreconditioner())):
            count = [0]
            x, info = spla.cg(A, b, rtol=1e-8, M=prec, callback=lambda _: count.__setitem__(
                0, count[0] + 1))
            assert info == 0
            its[label] = count[0]
        assert its["two-level"] < its["none"] / 3, its
        M.destroy()
    A_nat = petsc_client.assemble(31, 1.0)
    M = two_level(A_nat, "nicolaides", subdomains=16)
    assert M.context.subdomains.N == 16
    M.destroy(), A_nat.destroy()


def test_bad_input_raises_on_every_rank():
    n = 15
    A = petsc_client.assemble(n, 1.0)
    b = A.createVecLeft()
    b.set(1.0)
    rect = PETSc.Mat().createAIJ((n * n, n * n + 3), nnz=(1, 0), comm=PETSc.COMM_WORLD)
    rect.setUp(), rect.assemble()
    nonsym = A.duplicate(copy=True)
    lo, _ = nonsym.getOwnershipRange()
    nonsym.setValue(lo, lo + 1 if lo + 1 < n * n else lo - 1, 7.0)
    nonsym.assemble()

    def setup(M, prefix, **ddlearn):
        return lambda: pc_from_options(M, prefix, pc=PC, **ddlearn).destroy()

    cases = [
        (setup(rect, "e0_"), "needs a square"),
        (lambda: solve_with_pc_options(nonsym, b, "e1_", pc=PC, subdomains=4), "not symmetric"),
        (setup(A, "e2_", subdomains=10 ** 6), "is not between 1 and the number of rows"),
        (setup(A, "e3_", subdomains=max(2, COMM.Get_size()), overlap=40, partition="metis"),
         "the whole domain"),
        (setup(A, "e4_", subdomains=4, coarse_space="hats"), "needs coordinates"),
        (setup(A, "e5_", subdomains=4, coarse_space="spectral_typo"),
         "unknown -e5_ddlearn_coarse_space"),
        (setup(A, "e6_", subdomains=4, partition="boxes"), "needs coordinates"),
        (setup(A, "e7_", coarse_space="learned", learned_model="no-such-model.pt"),
         "no learned coarse-space model at no-such-model.pt"),
        (setup(A, "e8_", subdomains=4, coarse_correction="balancing"),
         "unknown -e8_ddlearn_coarse_correction 'balancing'"),
    ]
    for run, expected in cases:
        msgs = raised_everywhere(run, exc=Exception)
        assert all(m and expected in m for m in msgs), (expected, msgs)
    for o in (A, b, rect, nonsym):
        o.destroy()


def test_3d_box_partition_and_hats_by_default():
    """A 3D 7-point Laplacian with coordinates gets box subdomains and Q1 hats from the
    defaults: one hat per interior vertex of the box grid, (B - 1)^3 of them."""
    m = 12
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    I = sp.identity(m)
    L = (sp.kron(sp.kron(T, I), I) + sp.kron(sp.kron(I, T), I) + sp.kron(sp.kron(I, I), T)).tocsr()
    g = (np.arange(m) + 1.0) / (m + 1)
    z, y, x = np.meshgrid(g, g, g, indexing="ij")
    xyz = np.stack([x.ravel(), y.ravel(), z.ravel()], axis=1)
    A = PETSc.Mat().createAIJ((m ** 3, m ** 3), comm=PETSc.COMM_WORLD)
    A.setUp()
    lo, hi = A.getOwnershipRange()
    rows = L[lo:hi]
    A.setPreallocationCSR((rows.indptr, rows.indices, rows.data))
    A.assemble()
    set_coordinates(A, xyz[lo:hi])
    b = A.createVecLeft()
    b.set(1.0)
    for N in (8, 27):
        pc = pc_from_options(A, f"b3d{N}_", pc=PC, subdomains=N)
        ctx = pc.getPythonContext()
        assert ctx.meta["coarse_space"] == "hats" and ctx.subdomains.partitioner == "boxes"
        assert ctx.meta["n0"] == (round(N ** (1 / 3)) - 1) ** 3
        pc.destroy()
        r = solve_with_pc_options(A, b, f"b3ds{N}_", pc=PC, subdomains=N)
        assert r.converged and r.rnorm_true < 1e-8
    # a box grid with one box along an axis (4 = 1 x 2 x 2) has no interior vertex, so no hat:
    # the default is then nicolaides, never an empty space refused
    if A.getComm().getSize() <= 4:
        pc = pc_from_options(A, "b3d4_", pc=PC, subdomains=4)
        assert pc.getPythonContext().meta["coarse_space"] == "nicolaides"
        pc.destroy()
        r = solve_with_pc_options(A, b, "b3ds4_", pc=PC, subdomains=4)
        assert r.converged and r.rnorm_true < 1e-8
    A.destroy(), b.destroy()
