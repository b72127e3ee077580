"""Distributed assembly of the elasticity client (examples/elasticity.py ``assemble_rows``):
each rank assembles the elements touching its own rows only and keeps those rows, which equal
the rows of the matrix every rank assembles whole (up to the order of the floating-point sums),
and the symmetrised matrix is bitwise symmetric across ranks."""
import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

from ddlearn.harness import fem
from conftest import load_script

ex = load_script("examples/elasticity.py", "elasticity_example")

CASES = [dict(dim=2, cells=7), dict(dim=3, cells=3, element="q1", intorder=3),
         dict(dim=3, cells=3, element="p1")]


def _rows(A):
    lo, hi = A.getOwnershipRange()
    indptr, indices, values = A.getValuesCSR()
    return sp.csr_matrix((values, indices, indptr), shape=(hi - lo, A.getSize()[1])), lo, hi


def _same(local: sp.csr_matrix, serial: sp.csr_matrix) -> None:
    """Equal values to round-off; an entry only one of them stores is a round-off zero (a
    coupling that cancels exactly in one order of summation)."""
    scale = abs(serial).max()
    assert abs(local - serial).max() <= 1e-14 * scale
    only = (local != 0).astype(int) - (serial != 0).astype(int)
    r, c = only.nonzero()
    for M in (local, serial):
        assert np.all(abs(M.toarray()[r, c]) <= 1e-14 * scale)


@pytest.mark.parametrize("case", CASES)
def test_all_rows_assembled_at_once_are_the_serial_matrix(case):
    serial = fem.build(contrast=1e6, seed=3, count=6, **case)
    lazy = fem.build(contrast=1e6, seed=3, count=6, assemble=False, **case)
    assert lazy.K is None and lazy.A is None and lazy.b is None
    assert np.array_equal(lazy.free, serial.free) and lazy.unknowns == serial.A.shape[0]
    K, b = fem.assemble_rows(lazy, 0, lazy.unknowns)
    _same(K, serial.K[serial.free][:, serial.free])
    _same(fem._symmetrised(K), serial.A)
    assert np.allclose(b, serial.b, rtol=1e-14, atol=0)
    with pytest.raises(ValueError, match="split a node"):
        fem.assemble_rows(lazy, 1, lazy.unknowns)


def test_the_chunks_cover_the_elements_once():
    p = fem.build(dim=3, cells=4, element="q1", assemble=False)
    chunks = p.chunks()
    assert len(chunks) == 1 and np.array_equal(chunks[0], np.arange(p.mesh.t.shape[1]))
    old = fem.CHUNK_POINTS
    try:
        fem.CHUNK_POINTS = 64 * 5  # 5 elements of 4^3 points
        chunks = p.chunks()
        assert all(len(c) <= 5 for c in chunks) and len(chunks) > 1
        assert np.array_equal(np.concatenate(chunks), np.arange(p.mesh.t.shape[1]))
        serial = fem.build(dim=3, cells=4, element="q1")
        _same(p.stiffness(), serial.K)
    finally:
        fem.CHUNK_POINTS = old


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("case", CASES)
def test_distributed_rows_equal_the_serial_rows(case):
    comm = MPI.COMM_WORLD
    serial = fem.build(contrast=1e6, seed=3, count=6, **case)
    lazy = fem.build(contrast=1e6, seed=3, count=6, assemble=False, **case)
    A, b, coords = fem.to_petsc(lazy)
    A0, b0, coords0 = fem.to_petsc(serial)
    try:
        local, lo, hi = _rows(A)
        assert A.getBlockSize() == lazy.dim and lo % lazy.dim == 0
        assert (lo, hi) == A0.getOwnershipRange()
        _same(local, serial.A[lo:hi])
        assert np.allclose(b.getArray(), serial.b[lo:hi], rtol=1e-14, atol=0)
        assert np.array_equal(coords.getArray(), coords0.getArray())
        assert A.getNearNullSpace().getVecs() and A.isSymmetric(0.0)  # bitwise
        # a rank assembles only the elements touching its own rows: fewer than all of them
        own = fem.touching(lazy, lazy.free[lo:hi:lazy.dim] // lazy.dim)
        assert 0 < len(own) < lazy.mesh.t.shape[1]
        assert comm.allreduce(len(own)) >= lazy.mesh.t.shape[1]
    finally:
        for o in (A, b, coords, A0, b0, coords0):
            o.destroy()


@pytest.mark.mpi(min_size=2)
def test_the_example_solves_with_its_distributed_matrix_and_client_subdomains():
    common = ["-dim", "3", "-cells", "4", "-element", "q1", "-intorder", "3", "-contrast", "1e6",
              "-pc_type", "python", "-pc_python_type", "ddlearn.pc.TwoLevelSchwarzPC",
              "-ddlearn_coarse_space", "spectral", "-ddlearn_spectral_nev", "8",
              "-aux", "1", "-parts", "8"]
    whole = ex.main(common)
    split = ex.main(common + ["-distributed", "1"])
    assert split["distributed"] and not whole["distributed"]
    assert split["converged"] and split["rnorm_true"] < 1e-6
    assert split["unknowns"] == whole["unknowns"] == 3 * 4 * 5 ** 2
    assert split["n0"] == whole["n0"]
