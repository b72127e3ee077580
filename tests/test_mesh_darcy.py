"""Darcy flow on an unstructured mesh (L-shape with a hole): a real triangulation, real P1
solves by PETSc CG with ddlearn's PC, stored in the dataset format with its record."""
import numpy as np
import pytest
import scipy.sparse.linalg as sla
from skfem import Basis, ElementTriP1, asm

from ddlearn.harness import mesh_darcy as md
from ddlearn.nn.data import load_dataset


def _opts(**kw):
    return md.options(**{"h": 0.0625, "train": 3, "test": 1, **kw})


def test_the_mesh_fills_the_domain_with_no_grid_and_no_slivers():
    m = md.mesh(_opts())
    p, t = m.p.T, m.t.T
    area = 0.5 * np.abs((p[t[:, 1], 0] - p[t[:, 0], 0]) * (p[t[:, 2], 1] - p[t[:, 0], 1])
                        - (p[t[:, 2], 0] - p[t[:, 0], 0]) * (p[t[:, 1], 1] - p[t[:, 0], 1]))
    exact = 0.75 - np.pi * md.RADIUS ** 2
    assert area.min() > 0 and abs(area.sum() - exact) < 0.01 * exact  # the hole's polygon
    assert md.inside(p[t].mean(axis=1)).all()
    # not a tensor grid: the interior points take many distinct coordinates
    assert len(np.unique(np.round(p[:, 0], 9))) > 2 * len(p) ** 0.5
    assert np.array_equal(md.mesh(_opts()).p, m.p)  # deterministic


def test_samples_solve_the_p1_problem_and_regenerate_bit_for_bit(tmp_path):
    opts = _opts()
    path = md.generate(opts, str(tmp_path / "a"), progress=False)
    data = load_dataset(path)
    assert data.mesh and data.dim == 2 and len(data.train) == 3 and len(data.test) == 1
    assert set(np.unique(data.coefficient)) <= set(opts["values"])
    m = md.mesh(opts)
    basis = Basis(m, ElementTriP1())
    interior = basis.complement_dofs(m.boundary_nodes())
    for a, u in zip(data.coefficient, data.solution):
        K = asm(md._diffusion, basis, a=basis.interpolate(a))
        f = asm(md._one, basis)
        exact = np.zeros(basis.N)
        exact[interior] = sla.spsolve(K[interior][:, interior].tocsc(), f[interior])
        assert np.linalg.norm(u - exact) <= 1e-8 * np.linalg.norm(exact)
    assert data.record["true_relative_residual"]["max"] < 1e-9
    again = load_dataset(md.generate(opts, str(tmp_path / "b"), progress=False))
    assert again.record["sha256"] == data.record["sha256"]
    # the cache reuses a verified dataset
    assert md.ensure(opts, str(tmp_path / "a"), progress=False) == path


@pytest.mark.parametrize("kw,match", [({"h": 0.5}, "--h 0.5"), ({"jitter": 0.7}, "--jitter"),
                                      ({"train": 0}, "--train 0"), ({"values": (3.0,)}, "--values")])
def test_bad_options_name_the_option(kw, match):
    with pytest.raises(ValueError, match=match):
        _opts(**kw)
