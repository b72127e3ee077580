"""The spectral coarse space's pencil and partition of unity (-ddlearn_spectral_pencil,
-ddlearn_spectral_partition_of_unity) on 1-4 ranks: each choice equals a dense reference built
from its definition, the Boolean one gives non-overlapping coarse vectors, bad values are
refused on every rank; the 3D reference benchmark's quick run writes its JSON."""
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
from mpi4py import MPI

from conftest import apply_gathered, client_matrix, gathered_csr, pc_from_options, \
    raised_everywhere
from ddlearn.classical import reference

COMM = MPI.COMM_WORLD
PC = "TwoLevelSchwarzPC"
ROOT = Path(__file__).resolve().parents[1]


def _gathered(ctx):
    """Every subdomain's (I_i, owned part) in subdomain order, on every rank."""
    s = ctx.subdomains
    sets = sum(COMM.allgather([(int(i), I, O) for i, I, O in zip(s.ids, s.overlapping,
                                                                 s.owned)]), [])
    sets.sort(key=lambda t: t[0])
    return [t[1] for t in sets], [t[2] for t in sets]


def _unity(A: sp.csr_matrix, sets, owned, kind: str):
    """The partitions of unity by their definitions (see ddlearn.classical.coarse.spectral)."""
    n = A.shape[0]
    if kind == "boolean":
        return [np.isin(I, O).astype(float) for I, O in zip(sets, owned)]
    if kind == "multiplicity":
        chis = [np.ones(len(I)) for I in sets]
    else:  # interior: rows of I_i with no coupling leaving I_i
        chis = []
        for I in sets:
            outside = np.ones(n, bool)
            outside[I] = False
            chis.append((abs(A[I][:, outside]).sum(axis=1).A.ravel() == 0).astype(float))
    total = np.zeros(n)
    for I, chi in zip(sets, chis):
        total[I] += chi
    return [chi / np.where(total[I] > 0, total[I], 1.0) for I, chi in zip(sets, chis)]


def _basis(A: sp.csr_matrix, sets, weights, nev: int, pencil: str) -> sp.csr_matrix:
    r"""Per subdomain the ``nev`` largest :math:`\mu` of :math:`DA^RDv = \mu(A^N + 10^{-9}
    \mathrm{diag}A^N)v`, :math:`A^R` the Neumann or the Dirichlet block; columns
    :math:`R_i^TDv`."""
    cols = []
    for I, D in zip(sets, weights):
        AN = reference.neumann_matrix(A, I).toarray()
        AR = AN if pencil == "neumann" else A[I][:, I].toarray()
        mu, V = sla.eigh(D[:, None] * AR * D[None, :], AN + np.diag(1e-9 * np.abs(np.diag(AN))))
        V = V[:, np.argsort(mu)[::-1][:nev]]
        col = np.zeros((A.shape[0], nev))
        col[I] = D[:, None] * V
        cols.append(col)
    return sp.csr_matrix(np.hstack(cols))


@pytest.mark.mpi
@pytest.mark.parametrize("pencil,unity", [("dirichlet", "boolean"),
                                          ("dirichlet", "multiplicity"),
                                          ("neumann", "interior")])
def test_pencil_and_partition_of_unity_equal_their_dense_reference(pencil, unity):
    n, N, nev = 23, 9, 3
    A = client_matrix(n, 1e6)
    pc = pc_from_options(A, f"pp_{pencil}_{unity}_", pc=PC, subdomains=N,
                         coarse_space="spectral", spectral_nev=nev, spectral_pencil=pencil,
                         spectral_partition_of_unity=unity)
    ctx = pc.getPythonContext()
    assert ctx.meta["spectral"]["pencil"] == pencil
    assert ctx.meta["spectral"]["partition_of_unity_used"] == unity
    sets, owned = _gathered(ctx)
    As = gathered_csr(A)
    Phi = _basis(As, sets, _unity(As, sets, owned, unity), nev, pencil)
    assert ctx.Phi.getSize() == Phi.shape
    ref = reference.two_level(As, type("dec", (), {"subdomains": sets, "owned": sets})(), Phi)
    x = np.random.default_rng(5).standard_normal(n * n)
    y, y_ref = apply_gathered(pc, A, x), ref @ x
    assert np.abs(y - y_ref).max() <= 1e-9 * np.abs(y_ref).max()
    pc.destroy(), A.destroy()


@pytest.mark.mpi
def test_boolean_partition_of_unity_gives_coarse_vectors_on_the_owned_rows_only():
    """With the Boolean partition of unity no two subdomains' coarse vectors share a row, and
    each lives on its own subdomain's owned rows."""
    n, N, nev = 19, 6, 2
    A = client_matrix(n, 1e6)
    pc = pc_from_options(A, "pb_", pc=PC, subdomains=N, coarse_space="spectral",
                         spectral_nev=nev, spectral_partition_of_unity="boolean")
    ctx = pc.getPythonContext()
    _, owned = _gathered(ctx)
    Phi = gathered_csr(ctx.Phi).tocsc()
    for i, O in enumerate(owned):
        rows = np.unique(Phi[:, i * nev:(i + 1) * nev].tocoo().row)
        assert len(rows) and np.isin(rows, O).all()
    pc.destroy(), A.destroy()


@pytest.mark.mpi
def test_bad_pencil_and_partition_of_unity_are_refused_on_every_rank():
    A = client_matrix(15, 1e6)
    # the options are named with the PC's prefix
    for k, (extra, expected) in enumerate([
            ({"spectral_pencil": "lanczos"},
             "unknown -pbad0_ddlearn_spectral_pencil 'lanczos'; choose one of neumann, "
             "dirichlet"),
            ({"spectral_partition_of_unity": "uniform"},
             "unknown -pbad1_ddlearn_spectral_partition_of_unity 'uniform'; choose one of "
             "auto, multiplicity, boolean, interior")]):
        msgs = raised_everywhere(lambda: pc_from_options(
            A, f"pbad{k}_", pc=PC, subdomains=4, coarse_space="spectral", **extra).destroy(),
            exc=Exception)
        assert all(m and expected in m for m in msgs), (expected, msgs)
    A.destroy()
