"""The harmonic coarse space (GDSW enriched by sampled A-harmonic traces), from the assembled
matrix alone: it contains GDSW's space, it is reproducible, it restores the iterations GDSW
loses to stiff inclusions on many subdomains, and the PC builds it from options on any rank
count (the regions sampled over the ranks give the serial basis), refusing bad settings on
every rank."""
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from petsc4py import PETSc

from ddlearn.harness import fem
from conftest import (client_matrix, gathered_csr, load_script, pc_from_options, raised_everywhere,
                      span_gap)
from ddlearn.classical.coarse.gdsw import gdsw_basis
from ddlearn.classical.coarse.harmonic import Harmonic, harmonic_basis
from ddlearn.classical.coarse.interface import extension_galerkin, node_matrix
from ddlearn.classical.reference import coarse_matrix
from ddlearn.decomposition.problems import make_problem
from ddlearn.decomposition.serial_partition import grow_overlap, metis_partition

ex = load_script("examples/elasticity.py", "elasticity_example")


def _inclusions(cells: int, N: int):
    """2D P1 elasticity with the example's stiff inclusions (1e6): the matrix, the load, the
    rigid-body modes, the dofs' parts (METIS on the node graph) and the overlapping
    subdomains (one node layer)."""
    p = fem.build(2, cells, contrast=1e6, seed=0)
    G = node_matrix(p.A, 2)
    G = sp.csr_matrix((np.ones(G.nnz), G.indices, G.indptr), shape=G.shape)
    G.setdiag(0)
    G.eliminate_zeros()
    nodes = metis_partition(G, N)
    S = grow_overlap(G, nodes, N, 1)
    subs = [(2 * S[:, i].indices[:, None] + np.arange(2)).ravel() for i in range(N)]
    return p.A, p.b, fem.rigid_body_modes(p.points), np.repeat(nodes, 2), subs


def _cg_iterations(A, b, subs, Phi) -> int:
    """CG iterations to 1e-8 with additive two-level Schwarz on ``subs`` and ``Phi``."""
    lus = [spla.splu(sp.csc_matrix(A[I][:, I])) for I in subs]
    lu0 = spla.splu(sp.csc_matrix(coarse_matrix(A, Phi)))

    def apply(x):
        x = np.ravel(x)
        y = Phi @ lu0.solve(Phi.T @ x)
        for I, lu in zip(subs, lus):
            y[I] += lu.solve(x[I])
        return y

    count = []
    x, info = spla.cg(A, b, M=spla.LinearOperator(A.shape, matvec=apply, dtype=float),
                      rtol=1e-8, maxiter=2000, callback=lambda _: count.append(1))
    assert info == 0
    return len(count)


@pytest.fixture(scope="module")
def inclusions():
    return _inclusions(40, 32)


def _channels(n: int, N: int):
    """2D channels of contrast 1e6 (a signed M-matrix, block size 1) and METIS parts."""
    A = sp.csr_matrix(make_problem("random_channels", n, contrast=1e6, seed=0).matrix())
    G = abs(A).tolil()
    G.setdiag(0)
    return A, None, None, metis_partition(sp.csr_matrix(G), N), None


@pytest.mark.parametrize("case", ["elasticity", "scalar"])
def test_contains_gdsw_and_is_reproducible(case, inclusions):
    A, b, Z, part, subs = inclusions if case == "elasticity" else _channels(31, 16)
    bs = 2 if case == "elasticity" else 1
    G, _ = gdsw_basis(A, part, Z, bs, split_ratio=100)
    H, info = harmonic_basis(A, part, Z, bs)
    # the sampled traces add columns (those already in GDSW's span are dropped)
    assert info["enriched"] > 0 and G.shape[1] < H.shape[1] == info["n0"]
    assert H.shape[1] <= G.shape[1] + info["enriched"]
    # GDSW's functions are in the span: the least-squares residual vanishes
    Hd, Gd = H.toarray(), G.toarray()
    coef = np.linalg.lstsq(Hd, Gd, rcond=None)[0]
    assert np.abs(Hd @ coef - Gd).max() <= 1e-8 * np.abs(Gd).max()
    H2, _ = harmonic_basis(A, part, Z, bs)
    assert abs(H - H2).max() == 0.0


@pytest.mark.parametrize("regions", ["part", "touch"])
def test_restores_the_iterations_gdsw_loses_to_stiff_inclusions(inclusions, regions):
    A, b, Z, part, subs = inclusions
    gdsw = _cg_iterations(A, b, subs, gdsw_basis(A, part, Z, 2, split_ratio=100)[0])
    Phi, info = harmonic_basis(A, part, Z, 2, regions=regions)
    harmonic = _cg_iterations(A, b, subs, Phi)
    # at contrast 1e6 the sampled traces carry the inclusions' own rigid motions
    assert harmonic <= 0.6 * gdsw, (harmonic, gdsw)
    # a region per part, or one per touch set (more of them: every edge and vertex too)
    assert info["regions"] == 32 if regions == "part" else info["regions"] > 32


@pytest.mark.parametrize("family", ["gdsw", "harmonic"])
def test_coarse_matrix_from_the_interface_rows_is_the_galerkin_product(inclusions, family):
    """An energy-minimal extension is discrete-harmonic inside the parts, so the interface
    rows of A Phi carry all of Phi^T A Phi."""
    A, b, Z, part, subs = inclusions
    build = gdsw_basis if family == "gdsw" else harmonic_basis
    Phi = build(A, part, Z, 2, split_ratio=100)[0]
    A0, full = extension_galerkin(A, Phi, part, 2), (Phi.T @ A @ Phi).toarray()
    assert abs(A0 - A0.T).max() == 0.0
    assert np.abs(A0.toarray() - full).max() <= 1e-12 * np.abs(full).max()


@pytest.mark.parametrize("value,option", [(1.5, "tol"), (0.0, "tol"), (-1, "samples"),
                                          (-2, "layers"), ("faces", "regions")])
def test_bad_settings_name_their_option(value, option):
    with pytest.raises(ValueError, match=f"-ddlearn_harmonic_{option}"):
        opts = PETSc.Options()
        opts.setValue(f"ddlearn_harmonic_{option}", value)
        try:
            Harmonic().set_from_options("ddlearn_")
        finally:
            opts.delValue(f"ddlearn_harmonic_{option}")


PC = ["-pc_type", "python", "-pc_python_type", "ddlearn.pc.TwoLevelSchwarzPC"]


@pytest.mark.mpi
def test_the_pc_builds_it_from_options_on_any_rank_count():
    common = ("-dim", 2, "-cells", 16, "-contrast", 1e6, *PC, "-ddlearn_subdomains", 8)
    harmonic = ex.main([str(a) for a in (*common, "-ddlearn_coarse_space", "harmonic")])
    gdsw = ex.main([str(a) for a in (*common, "-ddlearn_coarse_space", "gdsw")])
    assert harmonic["converged"] and harmonic["rnorm_true"] < 1e-6
    assert harmonic["n0"] > gdsw["n0"]
    msgs = raised_everywhere(lambda: ex.main([str(a) for a in (
        *common, "-ddlearn_coarse_space", "harmonic", "-ddlearn_harmonic_tol", 2)]), PETSc.Error)
    assert all(m and "-ddlearn_harmonic_tol must lie in (0, 1)" in m for m in msgs), msgs


@pytest.mark.mpi
def test_regions_sampled_over_the_ranks_give_the_serial_basis():
    """The PC samples each part's region on the part's holder, from the part's own seeded
    stream, so the gathered basis spans the serial one of the same matrix and parts (the
    trace subspace as stable as its singular-value gap: 1e-7)."""
    from mpi4py import MPI
    A = client_matrix(23, 1e6)
    pc = pc_from_options(A, "hm_", pc="TwoLevelSchwarzPC", subdomains=9,
                         coarse_space="harmonic")
    ctx = pc.getPythonContext()
    As, Phi = gathered_csr(A), gathered_csr(ctx.Phi)
    part = MPI.COMM_WORLD.bcast(ctx.subdomains.gather_part(), root=0)
    H, info = harmonic_basis(As, part)
    assert info["enriched"] > 0 and info["regions"] > 1
    assert ctx.space.found["enriched"] == info["enriched"] and Phi.shape == H.shape
    assert span_gap(Phi.toarray(), H.toarray()) < 1e-7
    pc.destroy(), A.destroy()
