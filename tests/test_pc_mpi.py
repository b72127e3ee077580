"""SchwarzAttentionPC selected through PETSc options, on 1-4 ranks."""
import numpy as np
import scipy.sparse as sp
import pytest
import torch
from mpi4py import MPI
from petsc4py import PETSc

from conftest import pc_from_options, raised_everywhere, solve_with_pc_options
from ddlearn.learned.operators import checkpoint
from ddlearn.nn.operators import SchwarzAttention
from ddlearn.decomposition.petsc_rows import RowLayout
from ddlearn.decomposition.problems import make_problem
from ddlearn.classical import reference
from ddlearn.pc import set_coordinates

pytestmark = pytest.mark.mpi
COMM = MPI.COMM_WORLD


def _model_file(tmp_path, problem, N, overlap, r, symmetric=True, name="pc.pt"):
    path = COMM.bcast(str(tmp_path / name), root=0)
    model = SchwarzAttention(problem.grid, N, overlap, r, symmetric=symmetric).init_from_classical(problem.matrix())
    if COMM.Get_rank() == 0:
        checkpoint.save(path, model, problem=problem.describe())
    COMM.Barrier()
    return path, model


@pytest.mark.parametrize("name,n,N,overlap", [("poisson1d", 255, 8, 2), ("poisson2d", 23, 9, 1)])
def test_pc_from_options_solves_and_matches_reference(tmp_path, name, n, N, overlap):
    p = make_problem(name, n)
    path, model = _model_file(tmp_path, p, N, overlap, 2)
    layout = RowLayout(model.dec)
    A = layout.matrix(p)
    b = layout.from_natural(np.random.default_rng(0).uniform(-1, 1, p.n))
    res = solve_with_pc_options(A, b, "pctest_", model=path, mode="additive")
    assert res.converged and res.rnorm_true < 1e-8, res
    # the same PC built directly: apply equals the serial reference, symmetric and positive
    pc = pc_from_options(A, "pcapply_", model=path)
    rng = np.random.default_rng(3)
    xs, ys = rng.standard_normal(p.n), rng.standard_normal(p.n)
    X, Y, MX, MY = layout.from_natural(xs), layout.from_natural(ys), layout.vec(), layout.vec()
    pc.apply(X, MX), pc.apply(Y, MY)
    ref = reference.one_level(p.matrix(), model.dec) @ xs + model(torch.from_numpy(xs)).detach().numpy()
    np.testing.assert_allclose(layout.to_natural(MX), ref, rtol=0, atol=1e-12 * np.abs(ref).max())
    assert abs(MX.dot(Y) - X.dot(MY)) <= 1e-12 * abs(MX.dot(Y))
    assert MX.dot(X) > 0 and MY.dot(Y) > 0
    for o in (pc, A, b, X, Y, MX, MY):
        o.destroy()


def test_pc_view_describes_model(tmp_path):
    p = make_problem("poisson1d", 63)
    path, model = _model_file(tmp_path, p, 4, 2, 2, name="view.pt")
    from ddlearn.learned.operators.distributed import DistributedSchwarzAttention
    from ddlearn.pc import SchwarzAttentionPC
    d = DistributedSchwarzAttention(model)
    A = d.layout.matrix(p)
    pc = PETSc.PC().create(comm=PETSc.COMM_WORLD)
    pc.setOperators(A, A)
    pc.setType("python")
    pc.setPythonContext(SchwarzAttentionPC(model=d, mode="attention"))
    pc.setUp()
    text = PETSc.Viewer().createASCII(str(tmp_path / "v.txt") if COMM.Get_size() == 1 else
                                      COMM.bcast(str(tmp_path / "v.txt"), root=0), comm=PETSc.COMM_WORLD)
    pc.view(text)
    text.destroy()
    COMM.Barrier()
    out = open(COMM.bcast(str(tmp_path / "v.txt"), root=0)).read()
    assert "mode attention" in out and "N = 4" in out and f"{model.num_parameters()} parameters" in out
    pc.destroy(), A.destroy(), d.destroy()


def test_pc_bad_inputs_on_every_rank(tmp_path):
    p = make_problem("poisson1d", 63)
    path, model = _model_file(tmp_path, p, 4, 2, 2, name="bad.pt")
    other = RowLayout(SchwarzAttention((127,), 4, 2, 2).dec).matrix(make_problem("poisson1d", 127))
    b = other.createVecLeft()
    b.set(1.0)

    def run(opts):
        return solve_with_pc_options(other, b, "bad_", **opts)

    msgs = raised_everywhere(lambda: run({"model": path}), exc=Exception)
    assert all(m and "the model's decomposition needs" in m for m in msgs), msgs
    msgs = raised_everywhere(lambda: run({"model": str(tmp_path / "missing.pt")}), exc=Exception)
    assert all(m and "no checkpoint" in m for m in msgs), msgs
    msgs = raised_everywhere(lambda: run({"model": path, "mode": "magic"}), exc=Exception)
    assert all(m and "unknown -bad_ddlearn_mode 'magic'" in m for m in msgs), msgs
    b.destroy(), other.destroy()
    # a 2D 8 x 8 model on a 3D 4 x 4 x 4 matrix: the same 64 rows, another dimension
    p2 = make_problem("poisson2d", 8)
    path2, model2 = _model_file(tmp_path, p2, 4, 1, 2, name="flat.pt")
    cube = make_problem("poisson3d", 4)
    L = RowLayout(model2.dec)
    rows = cube.rows(L.local_natural())
    A3 = L.aij(sp.csr_matrix((rows.data, L.iperm[rows.indices], rows.indptr), shape=rows.shape))
    set_coordinates(A3, cube.coordinates()[L.local_natural()])
    b3 = A3.createVecLeft()
    b3.set(1.0)
    msgs = raised_everywhere(lambda: solve_with_pc_options(A3, b3, "dim_", model=path2),
                             exc=Exception)
    assert all(m and "coordinates are 3D but the model was trained on the 2D grid" in m
               for m in msgs), msgs
    b3.destroy(), A3.destroy()
