"""The elasticity client (examples/elasticity.py) on tiny meshes, serially and on the test ranks:
the assembled operator, its rigid-body modes, the PETSc layout, the client's subdomains, and the
solvers it is meant to be run with; the benchmark's quick run."""
import json
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI
from petsc4py import PETSc

from ddlearn.harness import fem
from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]

ex = load_script("examples/elasticity.py", "elasticity_example")

PC = ["-pc_type", "python", "-pc_python_type", "ddlearn.pc.TwoLevelSchwarzPC"]


def _main(*args):
    argv = [str(a) for a in args]
    return ex.main(argv)


@pytest.mark.parametrize("dim,cells", [(2, 6), (3, 3)])
def test_operator_symmetric_clamped_and_node_blocked(dim, cells):
    p = fem.build(dim, cells, contrast=1e3, seed=1)
    scale = abs(p.K).max()
    assert abs(p.K - p.K.T).max() <= 1e-12 * scale
    assert abs(p.A - p.A.T).max() <= 1e-12 * scale
    # clamping removed whole nodes, all of them on x = 0, and nothing else
    nodes = p.nodes_free
    assert np.array_equal(p.free, (dim * nodes[:, None] + np.arange(dim)).ravel())
    clamped = np.setdiff1d(np.arange(p.mesh.p.shape[1]), nodes)
    assert len(clamped) == (cells + 1) ** (dim - 1) and np.all(p.mesh.p[0, clamped] == 0)
    # the clamped operator is positive definite
    assert np.linalg.eigvalsh(p.A.toarray()).min() > 0
    # the inclusions are in the coefficient: a stiffer one makes a stiffer operator
    soft = fem.build(dim, cells, contrast=1.0, seed=1)
    assert abs(p.A).max() > 10 * abs(soft.A).max()
    # gravity pulls along the last axis only
    b = p.b.reshape(-1, dim)
    assert np.all(b[:, :-1] == 0) and np.all(b[:, -1] <= 0) and b[:, -1].sum() < 0


@pytest.mark.parametrize("dim,cells", [(2, 5), (3, 3)])
def test_rigid_body_modes_are_the_kernel_of_the_unclamped_stiffness(dim, cells):
    p = fem.build(dim, cells, contrast=1e6, seed=2)
    Z = fem.rigid_body_modes(p.mesh.p.T)
    assert Z.shape[1] == {2: 3, 3: 6}[dim] and np.linalg.matrix_rank(Z) == Z.shape[1]
    KZ = p.K @ Z
    assert np.linalg.norm(KZ) <= 1e-10 * abs(p.K).max() * np.linalg.norm(Z)
    # and nothing else: the next eigenvalue is well away from zero
    ev = np.linalg.eigvalsh(p.K.toarray())
    assert abs(ev[:Z.shape[1]]).max() < 1e-8 * ev[-1] < ev[Z.shape[1]]


def _near_null_space_columns(A):
    ns = A.getNearNullSpace()
    vecs = ns.getVecs()
    lo, hi = A.getOwnershipRange()
    cols = np.stack([v.getArray(readonly=True).copy() for v in vecs], axis=1)
    return cols, lo, hi


@pytest.mark.mpi
def test_petsc_layout_whole_nodes_and_near_null_space():
    """PETSc's rows in whole nodes, block size dim, this rank's rows equal to the scipy rows, and
    the near-null space PETSc built from the coordinate Vec is the rigid-body modes."""
    for dim, cells in ((2, 7), (3, 3)):
        p = fem.build(dim, cells, contrast=1e3)
        A, b, coords = fem.to_petsc(p)
        lo, hi = A.getOwnershipRange()
        assert A.getBlockSize() == dim and lo % dim == 0 and hi % dim == 0
        assert coords.getBlockSize() == dim
        assert MPI.COMM_WORLD.allreduce(hi - lo) == p.A.shape[0]
        indptr, indices, values = A.getValuesCSR()
        rows = p.A[lo:hi]
        assert np.array_equal(indptr, rows.indptr) and np.array_equal(indices, rows.indices)
        assert np.allclose(values, rows.data, rtol=0, atol=1e-14 * abs(p.A).max())
        cols, lo, hi = _near_null_space_columns(A)
        Z = fem.rigid_body_modes(p.points)[lo:hi]
        assert cols.shape[1] == Z.shape[1]
        # same span: the projection of the rigid-body modes on PETSc's (orthonormal) vectors
        ZtC = MPI.COMM_WORLD.allreduce(Z.T @ cols)
        ZtZ = MPI.COMM_WORLD.allreduce(Z.T @ Z)
        assert np.allclose(np.trace(ZtC @ ZtC.T @ np.linalg.inv(ZtZ)), Z.shape[1], rtol=1e-10)
        assert np.allclose(MPI.COMM_WORLD.allreduce(cols.T @ cols), np.eye(Z.shape[1]), atol=1e-12)
        for o in (A, b, coords):
            o.destroy()


@pytest.mark.mpi
def test_gamg_needs_and_uses_the_near_null_space():
    with_rbm = _main("-dim", 2, "-cells", 24, "-contrast", 1, "-pc_type", "gamg")
    without = _main("-dim", 2, "-cells", 24, "-contrast", 1, "-pc_type", "gamg",
                    "-rigid_body_modes", 0)
    assert with_rbm["converged"] and with_rbm["rnorm_true"] < 1e-7
    assert with_rbm["iterations"] < without["iterations"], (with_rbm, without)
    res3 = _main("-dim", 3, "-cells", 6, "-contrast", 1, "-pc_type", "gamg")
    assert res3["converged"] and res3["rnorm_true"] < 1e-7 and res3["iterations"] < 40


@pytest.mark.mpi
def test_plain_petsc_preconditioners_run_the_example(tmp_path):
    out = MPI.COMM_WORLD.bcast(str(tmp_path / "asm.json"), root=0)
    res = _main("-dim", 3, "-cells", 3, "-contrast", 1e3, "-pc_type", "asm", "-pc_asm_type",
                "basic", "-sub_pc_type", "lu", "-o", out)
    assert res["converged"] and res["rnorm_true"] < 1e-7 and res["pc"] == "asm"
    MPI.COMM_WORLD.Barrier()
    saved = json.loads(Path(out).read_text())
    assert saved["iterations"] == res["iterations"] and saved["unknowns"] == 3 * 4 ** 2 * 3


@pytest.mark.mpi
@pytest.mark.parametrize("method", ["metis", "rcb"])
def test_client_subdomains_and_neumann_matrices(method):
    """Every free dof in some subdomain; subdomain = part + one element layer; the Neumann
    matrices are symmetric positive semidefinite, singular for a floating subdomain with
    exactly the rigid-body modes as kernel (one mode where it touches the clamp at one node),
    equal to A in the rows of nodes inside the subdomain's elements and not on its boundary;
    every rank holds at least one subdomain."""
    comm = MPI.COMM_WORLD
    dim = 2
    p = fem.build(dim, 8, contrast=1e3)
    A, b, coords = fem.to_petsc(p)
    N = 2 * comm.Get_size() + 1
    part = fem.element_parts(p, N, method)
    assert set(np.unique(part)) == set(range(N))
    sizes = np.bincount(part)
    assert sizes.max() <= 2 * sizes.min(), sizes
    subs = fem.overlapping_subdomains(p, part)
    covered = np.zeros(p.A.shape[0], bool)
    for elements, rows in subs:
        covered[rows] = True
        assert np.all(np.diff(rows) > 0) and len(rows) % dim == 0
    assert covered.all()
    sets, mats = fem.auxiliary(p, A, N, method)
    assert len(sets) >= 1
    assert comm.allreduce(len(sets)) == N
    floating = 0
    for rows, M in zip(sets, mats):
        assert M.shape == (len(rows),) * 2
        assert abs(M - M.T).max() <= 1e-12 * abs(M).max()
        ev = np.linalg.eigvalsh(M.toarray())
        assert ev.min() > -1e-10 * ev.max()
        zero = int((ev < 1e-10 * ev.max()).sum())
        # 0: clamped along an edge; 1: touching the clamp at one node (rotation about it left)
        assert zero in (0, 1, 3)
        if zero == 3:
            floating += 1
            Z = fem.rigid_body_modes(p.points[rows[::dim] // dim])
            assert np.linalg.norm(M @ Z) <= 1e-10 * ev.max() * np.linalg.norm(Z)
        # the rows of nodes all of whose elements are the subdomain's are rows of A (rows that
        # merely couple only inside the subdomain need not be: an element outside it may have
        # all its nodes in it)
        elements = next(e for e, r in subs if np.array_equal(r, rows))
        mine = np.zeros(p.mesh.t.shape[1], bool)
        mine[elements] = True
        outside = np.unique(p.mesh.t[:, ~mine])
        inner = np.flatnonzero(~np.isin(p.free[rows] // dim, outside))
        assert len(inner) > 0
        assert abs(M[inner] - p.A[rows[inner]][:, rows]).max() <= 1e-10 * abs(M).max()
        boundary = np.setdiff1d(np.arange(len(rows)), inner)
        assert abs(M[boundary] - p.A[rows[boundary]][:, rows]).max() > 1e-3 * abs(M).max()
    # with the clamp at x = 0 some subdomains float, some do not
    assert comm.allreduce(floating) > 0
    for o in (A, b, coords):
        o.destroy()


def test_assign_gives_every_rank_a_subdomain():
    ranges = np.array([0, 10, 20, 30])
    rows = [np.arange(0, 5), np.arange(5, 10), np.arange(8, 15), np.arange(0, 3)]
    owner = fem.assign(rows, ranges)
    assert sorted(set(owner)) == [0, 1, 2]
    with pytest.raises(ValueError, match="every rank needs one"):
        fem.assign(rows[:2], ranges)


@pytest.mark.mpi
def test_spectral_with_auxiliary_matrices_beats_one_level_at_high_contrast():
    common = ("-dim", 2, "-cells", 24, "-contrast", 1e6, *PC, "-ksp_max_it", 2000)
    one = _main(*common, "-ddlearn_coarse_space", "none", "-aux", 1, "-parts", 8)
    spec = _main(*common, "-ddlearn_coarse_space", "spectral", "-ddlearn_spectral_nev", 8,
                 "-aux", 1, "-parts", 8)
    assert spec["converged"] and spec["rnorm_true"] < 1e-6
    assert spec["n0"] == 8 * 8
    assert spec["iterations"] < one["iterations"], (spec, one)


@pytest.mark.mpi
def test_ddlearn_coarse_spaces_with_the_rigid_body_modes_run():
    res = {cs: _main("-dim", 3, "-cells", 3, "-contrast", 1e3, *PC, "-ddlearn_coarse_space", cs,
                     "-ddlearn_subdomains", 4)
           for cs in ("none", "nicolaides", "gdsw")}
    assert all(r["converged"] and r["rnorm_true"] < 1e-7 for r in res.values()), res
    # nicolaides with the near-null space: the six rigid-body modes per subdomain
    assert res["nicolaides"]["n0"] == 6 * 4


@pytest.mark.mpi
def test_spectral_without_neumann_matrices_is_refused_on_every_rank():
    from conftest import raised_everywhere
    msgs = raised_everywhere(lambda: _main("-dim", 2, "-cells", 8, *PC, "-ddlearn_coarse_space",
                                           "spectral", "-ddlearn_subdomains", 4), PETSc.Error)
    assert all(m and "set_auxiliary_matrices" in m for m in msgs), msgs


def test_benchmark_quick_writes_its_json(tmp_path):
    bench = load_script("benchmarks/elasticity.py", "elasticity_benchmark")
    out = tmp_path / "elasticity.json"
    methods = ["gamg", "asm", "mg-gdsw", "one-level", "spectral aux"]
    bench.main(["--quick", "--out", str(tmp_path), "--methods", *methods])
    data = json.loads(out.read_text())
    assert data["quick"] and data["contrasts"] == [1.0, 1e6] and data["Ns"] == [4]
    got = {(r["dim"], r["contrast"], r["method"]) for r in data["rows"]}
    assert got == {(d, c, m) for d in (2, 3) for c in (1.0, 1e6) for m in methods}
    for r in data["rows"]:
        assert "error" in r or {"iterations", "reason_name", "setup_s", "solve_s"} <= set(r)
        assert r["method"] != "gamg" or r["contrast"] != 1.0 or r["converged"]
    assert "| 2D |" in bench.summary(data)
    assert (tmp_path / "elasticity.png").stat().st_size > 10_000
