"""The value-dependent coarse spaces of TwoLevelSchwarzPC on 1-4 ranks: spectral (GenEO-type)
equal to a dense scipy reference with either eigensolver, contrast-robust where hats are not,
rebuilt when the matrix values change, bad settings refused on every rank; GDSW equal to its
serial construction."""
import numpy as np
import pytest
from mpi4py import MPI

from conftest import (apply_gathered, client_matrix, gathered_csr, pc_from_options,
                      raised_everywhere, solve_with_pc_options)
from ddlearn.classical import reference
from ddlearn.classical.gdsw import gdsw_basis

pytestmark = pytest.mark.mpi
COMM = MPI.COMM_WORLD
PC = "TwoLevelSchwarzPC"


def _gathered_sets(ctx):
    """Every subdomain's (I_i, D_i) in subdomain order, on every rank."""
    s = ctx.subdomains
    sets = sum(COMM.allgather([(int(i), I, D) for i, I, D in zip(s.ids, s.overlapping,
                                                                 s.weights)]), [])
    sets.sort(key=lambda t: t[0])
    return [t[1] for t in sets], [t[2] for t in sets]


def _reference(As, sets, Phi):
    return reference.two_level(As, type("dec", (), {"subdomains": sets, "owned": sets})(), Phi)


@pytest.mark.parametrize("eigensolver", ["slepc", "scipy"])
def test_spectral_equals_dense_reference(eigensolver):
    n, N, nev = 23, 9, 3
    A = client_matrix(n, 1e6)
    pc = pc_from_options(A, f"sp_{eigensolver}_", pc=PC, subdomains=N, coarse_space="spectral",
                         spectral_nev=nev, spectral_eigensolver=eigensolver)
    ctx = pc.getPythonContext()
    sets, weights = _gathered_sets(ctx)
    As = gathered_csr(A)
    Phi = reference.spectral_basis(As, sets, weights, nev)
    assert ctx.Phi.getSize() == Phi.shape
    ref = _reference(As, sets, Phi)
    x = np.random.default_rng(4).standard_normal(n * n)
    y, y_ref = apply_gathered(pc, A, x), ref @ x
    assert np.abs(y - y_ref).max() <= 1e-10 * np.abs(y_ref).max()
    pc.destroy(), A.destroy()


def test_spectral_is_contrast_robust_where_hats_are_not():
    n, N = 47, 16
    its = {}
    for contrast in (1.0, 1e6):
        A = client_matrix(n, contrast)
        b = A.createVecLeft()
        b.set(1.0)
        for coarse, extra in (("hats", {}), ("spectral", {"spectral_nev": 6})):
            r = solve_with_pc_options(A, b, f"cr_{coarse}_", pc=PC, subdomains=N,
                                      coarse_space=coarse, **extra)
            assert r.converged and r.rnorm_true < 1e-8
            its[coarse, contrast] = r.iterations
        A.destroy(), b.destroy()
    # hats lose a factor two to the channels, the spectral space much less (the full contrast
    # and N sweep with its targets is benchmarks/coarse_spaces.py)
    assert its["hats", 1e6] >= 2 * its["hats", 1.0], its
    assert its["spectral", 1e6] <= 1.6 * its["spectral", 1.0], its
    assert its["spectral", 1e6] < 0.7 * its["hats", 1e6], its


def test_spectral_basis_follows_new_values():
    n, N = 23, 9
    A = client_matrix(n, 1.0)
    pc = pc_from_options(A, "nv_", pc=PC, subdomains=N, coarse_space="spectral", spectral_nev=3)
    new = client_matrix(n, 1e6)
    A.setValuesCSR(*new.getValuesCSR())
    A.assemble()
    pc.setUp()
    fresh = pc_from_options(new, "nvf_", pc=PC, subdomains=N, coarse_space="spectral",
                            spectral_nev=3)
    x = np.random.default_rng(5).standard_normal(n * n)
    y, y_fresh = apply_gathered(pc, A, x), apply_gathered(fresh, new, x)
    assert np.abs(y - y_fresh).max() <= 1e-10 * np.abs(y_fresh).max()
    for o in (pc, fresh, A, new):
        o.destroy()


def test_bad_spectral_settings_raise_on_every_rank():
    A = client_matrix(31, 1e6)
    cases = [({"spectral_nev": 0}, "must be a positive integer"),
             ({"spectral_threshold": -1}, "must be positive"),
             ({"spectral_eigensolver": "lapack"}, "unknown -ddlearn_spectral_eigensolver"),
             ({"spectral_with_hats": 1, "partition": "metis"}, "hats coarse space lives on a box"),
             # an eigensolve that stops early: named, never a silently partial coarse space
             ({"spectral_eps_max_it": 1, "spectral_eps_ncv": 9, "spectral_nev": 8},
              "eigensolve failed on subdomain")]
    for k, (extra, expected) in enumerate(cases):
        msgs = raised_everywhere(lambda: pc_from_options(
            A, f"bs{k}_", pc=PC, subdomains=4, coarse_space="spectral", **extra).destroy(),
            exc=Exception)
        assert all(m and expected in m for m in msgs), (expected, msgs)
    A.destroy()


def test_gdsw_equals_serial_construction():
    n, N = 23, 9
    A = client_matrix(n, 1e4)
    pc = pc_from_options(A, "gd_", pc=PC, subdomains=N, coarse_space="gdsw")
    ctx = pc.getPythonContext()
    sets, _ = _gathered_sets(ctx)
    As = gathered_csr(A)
    part = COMM.bcast(ctx.subdomains.part, root=0)
    Phi = gdsw_basis(As, part)
    assert ctx.Phi.getSize() == Phi.shape
    x = np.random.default_rng(6).standard_normal(n * n)
    y, y_ref = apply_gathered(pc, A, x), _reference(As, sets, Phi) @ x
    assert np.abs(y - y_ref).max() <= 1e-12 * np.abs(y_ref).max()
    pc.destroy(), A.destroy()
