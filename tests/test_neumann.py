"""The semidefiniteness test of algebraic Neumann matrices (ddlearn.classical.neumann): the
Gershgorin bound on diag(A)^{-1} A decides at once where it proves the tolerance, the smallest
eigenvalue of the scaled matrix decides otherwise, and both agree with a dense eigensolve."""
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from ddlearn.classical import neumann
from ddlearn.classical.neumann import SEMIDEFINITE_TOL, is_semidefinite


def _scaled_min(A) -> float:
    d = 1.0 / np.sqrt(A.diagonal())
    return float(np.linalg.eigvalsh((sp.diags(d) @ A @ sp.diags(d)).toarray())[0])


def _laplacian(n: int) -> sp.csr_matrix:
    """The 1D Neumann Laplacian: singular, zero row sums, dominant."""
    A = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1]).tolil()
    A[0, 0] = A[-1, -1] = 1.0
    return A.tocsr()


def test_gershgorin_decides_without_an_eigensolve(monkeypatch):
    """A row deficit within the tolerance (dominance lost to rounding, or a little more) is
    proven semidefinite by the discs alone: no eigensolver is called."""
    def fail(*args, **kwargs):
        raise AssertionError("an eigensolve where Gershgorin decides")
    monkeypatch.setattr(spla, "eigsh", fail)
    monkeypatch.setattr(np.linalg, "eigvalsh", fail)
    A = _laplacian(300)
    assert is_semidefinite(A)
    deficit = A.tolil()
    deficit[150, 150] *= 1 - 0.5 * SEMIDEFINITE_TOL
    assert is_semidefinite(deficit.tocsr())


@pytest.mark.parametrize("case", ["indefinite", "spd-not-dominant", "slightly-indefinite"])
def test_eigenvalue_decides_beyond_the_discs(case):
    """Where the discs prove nothing the scaled smallest eigenvalue decides, in agreement with
    a dense solve: a 2 x 2 block with eigenvalue -1 is refused, a strongly coupled SPD block
    accepted, a deficit of ten times the tolerance on a dominant matrix refused."""
    n = 300
    A = _laplacian(n).tolil()
    if case == "indefinite":
        A[10, 11] = A[11, 10] = -2.0 * A[10, 10]
    elif case == "spd-not-dominant":
        block = 0.9 * np.ones((3, 3)) + 0.1 * np.eye(3)
        A = sp.block_diag([A.tocsr(), sp.csr_matrix(block)]).tolil()
    else:
        A[0, 0] = A[0, 0] * (1 - 40 * SEMIDEFINITE_TOL)
    A = A.tocsr()
    expected = _scaled_min(A) >= -SEMIDEFINITE_TOL
    assert is_semidefinite(A) == expected
    assert expected == (case == "spd-not-dominant")


def test_contrast_rounding_is_within_the_discs():
    """The algebraic Neumann matrices of 3D inclusions of contrast 1e6 pass by Gershgorin: the
    rounding of their row sums stays far below the tolerance."""
    from ddlearn.decomposition.problems import make_problem
    p = make_problem("random_inclusions3d", 20, contrast=1e6, seed=0)
    A = p.matrix().tocsr()
    idx = np.arange(A.shape[0]).reshape(20, 20, 20)[:11, :11, :11].ravel()
    rows = A[idx]
    block = rows[:, idx].tocsr()
    leaving = np.asarray(abs(rows).sum(axis=1)).ravel() - np.asarray(abs(block).sum(axis=1)).ravel()
    AN = (block - sp.diags(leaving)).tocsr()
    d = AN.diagonal()
    off = np.asarray(abs(AN).sum(axis=1)).ravel() - d
    assert np.all(d - off >= -SEMIDEFINITE_TOL * d)
    assert neumann.is_semidefinite(AN)
