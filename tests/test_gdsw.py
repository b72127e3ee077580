"""GDSW and RGDSW coarse functions, serial: an interface partition of unity (an indicator per
component for GDSW, per coarse node for RGDSW), discrete-harmonic inside the parts, the
near-null space reproduced in the parts away from the Dirichlet boundary (the constants for
diffusion, the rigid-body modes for elasticity), RGDSW with fewer functions than GDSW."""
import numpy as np
import pytest
import scipy.sparse as sp

from ddlearn.classical.coarse.gdsw import gdsw_basis
from ddlearn.classical.coarse.interface import interface_components
from ddlearn.classical.coarse.rgdsw import rgdsw_basis
from ddlearn.decomposition import Decomposition
from ddlearn.decomposition.problems import make_problem


def _box_parts(grid, N):
    dec = Decomposition(grid, N, 0)
    part = np.empty(int(np.prod(grid)), dtype=np.int64)
    for i, o in enumerate(dec.owned):
        part[o] = i
    return part


@pytest.mark.parametrize("build", [gdsw_basis, rgdsw_basis], ids=["gdsw", "rgdsw"])
def test_harmonic_extensions_of_an_interface_partition_of_unity(build):
    p = make_problem("channels", 31, contrast=1e4)
    A = p.matrix()
    part = _box_parts(p.grid, 16)
    Phi, info = build(A, part)
    gamma, component, _ = interface_components(A, part)
    on_gamma = Phi[gamma].toarray()
    np.testing.assert_allclose(on_gamma.sum(axis=1), 1.0, rtol=1e-12)
    if build is gdsw_basis:
        np.testing.assert_array_equal(on_gamma, np.eye(Phi.shape[1])[component])
    else:  # a coarse node's function is 1 on the node itself and between 0 and 1 around it
        assert on_gamma.min() >= 0 and on_gamma.max() == 1.0
    interior = np.setdiff1d(np.arange(p.n), gamma)
    assert np.abs((A @ Phi)[interior]).max() <= 1e-9 * abs(A).max()
    # the 4 central parts of the 4 x 4 box grid touch no Dirichlet boundary
    central = np.isin(part, [5, 6, 9, 10])
    np.testing.assert_allclose(np.asarray(Phi.sum(axis=1)).ravel()[central], 1.0, rtol=1e-10)
    assert info["n0"] == Phi.shape[1]


def test_rgdsw_is_smaller_than_gdsw():
    p = make_problem("poisson2d", 47)
    A = p.matrix()
    part = _box_parts(p.grid, 16)
    (G, gi), (R, ri) = gdsw_basis(A, part), rgdsw_basis(A, part)
    assert R.shape[1] < G.shape[1] and ri["coarse_nodes"] < gi["components"], (ri, gi)


def _elasticity_2d(m: int):
    """P1 plane-strain elasticity on an m x m-cell square, clamped at x = 0 (scikit-fem),
    node-wise dofs; returns (K, free dofs' coordinates, rigid-body modes on the free dofs)."""
    import skfem
    from skfem.models.elasticity import lame_parameters, linear_elasticity
    mesh = skfem.MeshTri.init_tensor(np.linspace(0, 1, m + 1), np.linspace(0, 1, m + 1))
    basis = skfem.Basis(mesh, skfem.ElementVector(skfem.ElementTriP1()))
    K = skfem.asm(linear_elasticity(*lame_parameters(1.0, 0.3)), basis)
    clamped = basis.get_dofs(lambda x: np.isclose(x[0], 0.0)).all()
    free = np.setdiff1d(np.arange(basis.N), clamped)
    x, y = mesh.p[0], mesh.p[1]
    Z = np.zeros((basis.N, 3))
    Z[0::2, 0] = 1.0
    Z[1::2, 1] = 1.0
    Z[0::2, 2], Z[1::2, 2] = -y, x
    return sp.csr_matrix(K[free][:, free]), mesh.p.T, Z[free], free


@pytest.mark.parametrize("build", [gdsw_basis, rgdsw_basis], ids=["gdsw", "rgdsw"])
def test_rigid_body_modes_are_reproduced_away_from_the_clamped_side(build):
    K, points, Z, free = _elasticity_2d(16)
    nodes = free[0::2] // 2  # clamping removes whole nodes: the free dofs stay node-wise
    # 4 x 4 box parts of the free nodes (x in (0, 1], y in [0, 1]), dofs node-wise
    x, y = points[nodes, 0], points[nodes, 1]
    part_nodes = np.minimum((x * 4 - 1e-9).astype(int), 3) + 4 * np.minimum((y * 4).astype(int), 3)
    part = np.repeat(part_nodes, 2)
    Phi, info = build(K, part, Z, 2)
    # on every part off the clamped side, the rigid-body modes lie in the span of the (fewer)
    # coarse functions that reach it; on the clamped parts they cannot
    P = Phi.toarray()
    for p in range(16):
        rows = part == p
        cols = np.abs(P[rows]).sum(axis=0) > 0
        assert cols.sum() < rows.sum()
        coef, *_ = np.linalg.lstsq(P[rows][:, cols], Z[rows], rcond=None)
        err = np.abs(P[rows][:, cols] @ coef - Z[rows]).max()
        assert (err <= 1e-8) if p % 4 else (err > 0.1), (p, err)
    assert info["n0"] == Phi.shape[1]
