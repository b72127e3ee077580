"""GDSW, RGDSW and harmonic built from each rank's own rows (nothing gathered) against the serial
build on the gathered matrix, on 1-4 ranks: 2D and 3D elasticity (block sizes 2 and 3,
rigid-body modes, stiff inclusions split by coefficient), scalar channels without a near-null
space, METIS (irregular), RCB and box partitions. The two bases span the same space column group
by column group (to round-off), with the same counts."""
import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

from ddlearn.classical.coarse.gdsw import GDSW
from ddlearn.classical.coarse.harmonic import Harmonic
from ddlearn.classical.coarse.interface import on_rank0
from ddlearn.classical.coarse.rgdsw import RGDSW
from ddlearn.classical.coarse_space import CoarseInput, coarse_basis
from ddlearn.decomposition.nullspace import near_null_space
from ddlearn.decomposition.petsc_rows import take_galerkin
from ddlearn.decomposition.subdomains import Subdomains
from ddlearn.decomposition.problems import make_problem
from ddlearn.harness import fem

from conftest import gathered_csr, natural_matrix_of, span_gap

pytestmark = pytest.mark.mpi
COMM = MPI.COMM_WORLD


def _gathered(v, n: int) -> sp.csr_matrix:
    """The coarse vectors of every rank as one scipy matrix on every rank."""
    parts = COMM.allgather((v.rows, v.cols, v.vals))
    cat = np.concatenate
    return sp.csr_matrix((cat([p[2] for p in parts]),
                          (cat([p[0] for p in parts]), cat([p[1] for p in parts]))),
                         shape=(n, v.n0))


def _elasticity(dim: int, cells: int):
    p = fem.build(dim, cells, contrast=1e6, seed=0)
    A, _, _ = fem.to_petsc(p)
    lo, hi = A.getOwnershipRange()
    return A, p.points[lo // dim:hi // dim], near_null_space(A, "auto", None, dim), dim


def _channels(n: int):
    p = make_problem("channels", n, contrast=1e4)
    A = natural_matrix_of(p)
    return A, p.coordinates(np.arange(*A.getOwnershipRange())), None, 1


CASES = {
    "elasticity2d-metis": (lambda: _elasticity(2, 14), "metis", 7),
    "elasticity3d-rcb": (lambda: _elasticity(3, 6), "rcb", 9),
    "elasticity3d-metis": (lambda: _elasticity(3, 5), "metis", 6),
    "channels-boxes": (lambda: _channels(29), "boxes", 9),
    "channels-metis": (lambda: _channels(29), "metis", 11),
}


#: how far each basis may leave the other's span: harmonic's sampled traces are kept as the
#: leading singular subspace of the traces, as stable under round-off as its gap to the first
#: singular value dropped (each region draws the same random data in both builds)
SPAN = {GDSW: 1e-9, RGDSW: 1e-9, Harmonic: 1e-7}
SPACES = pytest.mark.parametrize("space", [GDSW, RGDSW, Harmonic],
                                 ids=["gdsw", "rgdsw", "harmonic"])


@pytest.mark.parametrize("case", sorted(CASES))
@SPACES
def test_gather_free_basis_is_the_serial_one(case, space):
    make, partitioner, N = CASES[case]
    A, points, Z, bs = make()
    s = Subdomains.from_matrix(A, N, 1, points if partitioner != "metis" else None,
                               partitioner=partitioner, block_size=bs)
    inp = CoarseInput(A, s, null_space=Z, block_size=bs)
    built = space()
    parallel = built.vectors(inp)
    found = dict(built.found)
    serial, expected = on_rank0(inp, space())
    assert found == expected
    n = A.getSize()[0]
    P, S = _gathered(parallel, n), _gathered(serial, n)
    assert P.shape == S.shape and P.shape[1] > 0
    # each entry once (the COO assembly would add repeats)
    assert len(np.unique(P.tocoo().row * P.shape[1] + P.tocoo().col)) == P.nnz
    assert span_gap(P.toarray(), S.toarray()) < SPAN[space]
    # the coarse matrices agree as well: the same Galerkin operator on the common span
    As = gathered_csr(A)
    c = np.linalg.lstsq(P.toarray(), S.toarray(), rcond=None)[0]
    A0p, A0s = (P.T @ As @ P).toarray(), (S.T @ As @ S).toarray()
    assert np.abs(c.T @ A0p @ c - A0s).max() <= 10 * SPAN[space] * np.abs(A0s).max()
    A.destroy()


@SPACES
def test_coarse_matrix_from_the_interface_rows_is_the_galerkin_product(space):
    """The coarse matrix handed over with the gather-free basis, from its interface rows alone,
    equals PETSc's triple product over every row (to the extension's round-off)."""
    A, points, Z, bs = _elasticity(3, 5)
    s = Subdomains.from_matrix(A, 6, 1, None, partitioner="metis", block_size=bs)
    inp = CoarseInput(A, s, null_space=Z, block_size=bs)
    Phi = coarse_basis(inp, space().vectors(inp))
    given = take_galerkin(Phi)
    assert given is not None
    full = A.ptap(Phi)
    G, F = gathered_csr(given).toarray(), gathered_csr(full).toarray()
    assert np.abs(G - F).max() <= 1e-10 * np.abs(F).max()
    # symmetric as the product is (the assembled elasticity matrix is, to its round-off)
    scale = np.abs(F).max()
    assert np.abs(G - G.T).max() <= np.abs(F - F.T).max() + 1e-13 * scale
    for M in (A, Phi, given, full):
        M.destroy()
