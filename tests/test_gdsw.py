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


def _stiff_ball_2d(m: int, contrast: float):
    """Q1 plane elasticity on an m x m-cell square with a disc of radius 0.25 at the centre of
    modulus ``contrast`` (the example's ``-ball``), clamped at x = 0; returns the problem, the
    free nodes' coordinates and their rigid-body modes."""
    from ddlearn.harness import fem
    p = fem.build(2, m, contrast=contrast, element="q1", ball=True)
    return p, fem.rigid_body_modes(p.points)


def test_coefficient_split_gives_a_stiff_inclusion_its_own_rigid_motions():
    """With the split, a rigid motion of the stiff disc alone (zero on the soft interface
    nodes) lies in the span of the interface functions; without it, it does not: the face
    functions are rigid on whole faces, soft and stiff parts together."""
    from ddlearn.classical.coarse.interface import coefficient_pieces, node_stiffness
    p, Z = _stiff_ball_2d(24, 1e6)
    A = p.A
    x, y = p.points[:, 0], p.points[:, 1]
    # 3 x 3 box parts: the disc crosses the faces around the central part
    part = np.repeat(np.minimum((x * 3 - 1e-9).astype(int), 2)
                     + 3 * np.minimum((y * 3).astype(int), 2), 2)
    gamma, component, _ = interface_components(A, part, 2)
    pieces = coefficient_pieces(A, gamma, component, 2, 100.0)
    assert pieces.max() > component.max()
    # the pieces refine the components
    assert all(len(np.unique(component[pieces == k])) == 1 for k in np.unique(pieces))
    # elements the disc cuts are of intermediate stiffness (E varies over their quadrature
    # points): they belong to it
    stiff = node_stiffness(A, 2) > 100 * np.median(node_stiffness(A, 2))
    dofs = (2 * gamma[:, None] + np.arange(2)).ravel()
    target = (Z[:, 2] * np.repeat(stiff, 2))[dofs]  # the disc's rotation, zero elsewhere
    for ratio, inside in ((0.0, False), (100.0, True)):
        Phi, _ = gdsw_basis(A, part, Z, 2, split_ratio=ratio)
        G = Phi[dofs].toarray()
        c = np.linalg.lstsq(G, target, rcond=None)[0]
        residual = np.linalg.norm(G @ c - target) / np.linalg.norm(target)
        assert (residual < 1e-8) == inside, (ratio, residual)


def test_coefficient_split_leaves_a_constant_coefficient_alone():
    p, Z = _stiff_ball_2d(16, 1.0)
    x, y = p.points[:, 0], p.points[:, 1]
    part = np.repeat(np.minimum((x * 3 - 1e-9).astype(int), 2)
                     + 3 * np.minimum((y * 3).astype(int), 2), 2)
    (G, gi), (S, si) = gdsw_basis(p.A, part, Z, 2), gdsw_basis(p.A, part, Z, 2, split_ratio=100)
    assert gi == si and (G != S).nnz == 0


def test_a_split_ratio_that_splits_nothing_sensible_is_refused():
    from ddlearn.classical.coarse.gdsw import GDSW
    with pytest.raises(ValueError, match="-ddlearn_gdsw_split_ratio must exceed 1"):
        GDSW(split_ratio=0.5)
