r"""PETSc row layouts: which rank owns which rows (and coarse columns) of a distributed matrix.

- :class:`RowLayout`: the PETSc row layout of a structured
  :class:`~ddlearn.decomposition.Decomposition`. Rank ``r`` owns the subdomains
  :func:`~ddlearn.decomposition.assign_ranks` gives it; unknowns are numbered in the *PETSc
  ordering* (subdomain by subdomain, see ``Decomposition.perm``), so rank ``r`` owns the
  contiguous block of rows that is the union of its subdomains' non-overlapping sets: overlap is
  the only thing that crosses ranks.
- Distributed AIJ matrices from each rank's rows (:func:`distributed_aij`,
  :func:`coarse_basis_matrix`), rows gathered on rank 0 and scattered back
  (:func:`~.parallel_partition.gather_rows`, :func:`scatter_rows`), and the ownership of a coarse vector (length
  :math:`n_0`) on the coarse rank or in contiguous blocks on the coarse ranks
  (:func:`coarse_owners`, :func:`coarse_ranges`), with what a coarse basis carries along
  (its column groups, its Galerkin matrix).
- The assembled AIJ form of whatever matrix a preconditioner is handed (:func:`assembled_aij`:
  BAIJ, SBAIJ, dense and unassembled ``MATIS`` converted, a matrix-free one refused).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from petsc4py import PETSc

from .parallel_partition import bits_float, exchange, float_bits, gather_rows
from .structured import Decomposition

__all__ = ["RowLayout", "distributed_aij", "sequential_aij", "coarse_basis_matrix",
           "coarse_owners", "coarse_ranges", "set_column_groups", "column_groups",
           "COLUMN_GROUPS", "GALERKIN", "schur_galerkin", "set_galerkin", "take_galerkin",
           "gather_matrix", "scatter_rows", "assembled_aij", "check_stored", "matrix_family",
           "CONVERTED"]

#: matrix families (type without its ``seq``/``mpi`` prefix) that :func:`assembled_aij`
#: converts to AIJ with ``MatConvert``: their entries are there, in another storage
CONVERTED = ("baij", "sbaij", "dense", "is")


def matrix_family(M: PETSc.Mat) -> str:
    """``M``'s type without its ``seq``/``mpi`` prefix (``mpibaij`` -> ``baij``; ``is``, ``shell``
    as they are); AIJ's GPU and storage variants (``aijcusparse``, ``aijperm``) -> ``aij``."""
    t = M.getType() or ""
    for head in ("seq", "mpi"):
        if t.startswith(head):
            t = t[len(head):]
    return "aij" if t.startswith("aij") else t


def check_stored(P: PETSc.Mat) -> None:
    """Refuse (``ValueError``, the same on every rank: the type is) a Pmat without stored
    entries (``shell``, ``python``, ``mffd``, ``nest``, ...): a Schwarz preconditioner factors
    blocks of entries, and forming them from products with ``P`` would cost a product per
    column."""
    if matrix_family(P) not in ("aij", *CONVERTED):
        raise ValueError(f"the matrix the preconditioner is built from (Pmat) has type "
                         f"{P.getType()!r}, which stores no entries to take subdomain blocks "
                         f"from: give the KSP an assembled Pmat (KSPSetOperators(ksp, A, P) "
                         f"with P of type aij, baij, sbaij or is), e.g. the matrix a shell "
                         f"operator approximates")


def assembled_aij(P: PETSc.Mat, out: PETSc.Mat | None = None) -> PETSc.Mat:
    r"""The matrix whose rows a set-up reads: ``P`` itself when it is AIJ, else ``P`` converted
    to AIJ (families :data:`CONVERTED`; same rows, block size and near-null space), into
    ``out`` when given (an earlier conversion of a matrix of ``P``'s structure: new values, same
    object). A type without stored entries is refused (:func:`check_stored`). Collective."""
    if matrix_family(P) == "aij":
        return P
    check_stored(P)
    if out is None:
        out = PETSc.Mat()  # a new matrix: petsc4py converts in place without one
    P.convert(PETSc.Mat.Type.AIJ, out)
    ns = P.getNearNullSpace()
    if ns:
        out.setNearNullSpace(ns)
    known, flag = P.isSymmetricKnown()
    if known:
        out.setOption(PETSc.Mat.Option.SYMMETRIC, flag)
    return out


def distributed_aij(rows: sp.csr_matrix, ncols: int, col_ranges, comm) -> PETSc.Mat:
    """Distributed AIJ matrix from this rank's rows (global column indices; a rank may have
    none), with column ownership ``col_ranges`` (one offset per rank, plus the end); collective
    (``MatCreateMPIAIJWithArrays``: exact preallocation, assembled)."""
    rows = sp.csr_matrix(rows)
    rows.sort_indices()
    rank = comm.getRank()
    clo, chi = int(col_ranges[rank]), int(col_ranges[rank + 1])
    return PETSc.Mat().createAIJ(((rows.shape[0], None), (chi - clo, ncols)),
                                 csr=(rows.indptr.astype(PETSc.IntType),
                                      rows.indices.astype(PETSc.IntType), rows.data),
                                 comm=comm)


def sequential_aij(S: sp.spmatrix) -> PETSc.Mat:
    """A scipy sparse matrix as an assembled sequential PETSc AIJ matrix (``COMM_SELF``)."""
    S = sp.csr_matrix(S, dtype=np.float64)
    S.sort_indices()
    M = PETSc.Mat().createAIJ(S.shape, csr=(S.indptr.astype(PETSc.IntType),
                                            S.indices.astype(PETSc.IntType), S.data),
                              comm=PETSc.COMM_SELF)
    M.assemble()
    return M


def coarse_basis_matrix(comm, nlocal_rows: int, n0: int, rows, cols, vals,
                        col_ranges) -> PETSc.Mat:
    r"""A coarse basis :math:`\Phi` (rows distributed with ``nlocal_rows`` here, columns owned
    as ``col_ranges`` says, see :func:`coarse_ranges`) from this rank's entries in coordinate
    form; rows may belong to other ranks, repeated entries are added (collective). The entries
    of other ranks' rows go to their owners in one all-to-all; each rank's rows are summed and
    sorted by scipy and handed to PETSc as CSR (PETSc's COO assembly sorts every entry in a
    global numbering: several times slower on a coarse basis of millions of entries)."""
    mpi = comm.tompi4py()
    rank = comm.getRank()
    ranges = np.concatenate([[0], np.cumsum(mpi.allgather(int(nlocal_rows)))])
    lo, hi = int(ranges[rank]), int(ranges[rank + 1])
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    vals = np.asarray(vals, dtype=np.float64)
    away = (rows < lo) | (rows >= hi)
    got, _ = exchange(mpi, np.searchsorted(ranges, rows[away], side="right") - 1,
                      np.column_stack([rows[away], cols[away], float_bits(vals[away])]))
    own = ~away
    cat = np.concatenate
    R = sp.csr_matrix((cat([vals[own], bits_float(got[:, 2])]),
                       (cat([rows[own], got[:, 0]]) - lo, cat([cols[own], got[:, 1]]))),
                      shape=(hi - lo, n0))
    R.sum_duplicates()  # sorted, distinct columns per row
    local_cols = int(col_ranges[rank + 1] - col_ranges[rank])
    M = PETSc.Mat().createAIJ(((hi - lo, None), (local_cols, n0)),
                              csr=(R.indptr.astype(PETSc.IntType), R.indices.astype(PETSc.IntType),
                                   R.data), comm=comm)
    M.assemble()
    return M


def coarse_owners(size: int, count: int = 1, first: int = 0) -> np.ndarray:
    r"""The ``count`` ranks of a ``size``-rank communicator that own the coarse problem, spread
    evenly from ``first``: :math:`(\text{first} + \lfloor j\,\text{size}/\text{count}
    \rfloor) \bmod \text{size}`, :math:`j = 0..\text{count}-1`, sorted. Spread rather than the
    first ``count``: MPI launchers fill nodes and sockets rank by rank, so spread ranks bring
    ``count`` memory buses to the coarse solve instead of sharing one; ``count = 1`` is the
    single coarse rank ``first``."""
    return np.sort((first + np.arange(count) * size // count) % size).astype(np.int64)


def coarse_ranges(size: int, owners, n0: int, breaks=None) -> np.ndarray:
    r"""Ownership offsets (one per rank, plus the end) of a length-``n0`` coarse vector split
    into contiguous blocks over the ranks ``owners`` (an int: one rank) in rank order, the
    others owning nothing. Block :math:`j` ends at the allowed cut nearest to
    :math:`(j+1)\,n_0/P`; ``breaks`` (sorted column offsets, from 0 to ``n0``) are the allowed
    cuts, e.g. where one subdomain's coarse functions end, so that a subdomain's functions stay
    on one rank; ``None``: anywhere. With fewer groups than owners the cuts fall anywhere.
    Needs ``n0 >= len(owners)``."""
    owners = np.atleast_1d(np.asarray(owners, dtype=np.int64))
    P = len(owners)
    cuts = np.arange(n0 + 1) if breaks is None or len(breaks) <= P else np.asarray(breaks)
    ends = [0]
    for j in range(1, P):
        # the cut nearest the even share that leaves at least one cut for each later block
        allowed = cuts[(cuts > ends[-1]) & (cuts <= cuts[-1 - (P - j)])]
        ends.append(int(allowed[np.argmin(np.abs(allowed - j * n0 / P))]))
    ends.append(n0)
    sizes = np.zeros(size, dtype=np.int64)
    sizes[owners] = np.diff(ends)
    return np.concatenate([[0], np.cumsum(sizes)])


def gather_matrix(A: PETSc.Mat) -> sp.csr_matrix | None:
    """The whole matrix on rank 0 as scipy CSR (``None`` elsewhere; collective)."""
    i, j, v = A.getValuesCSR()
    return gather_rows(A.getComm(), sp.csr_matrix((v, j, i), shape=(len(i) - 1, A.getSize()[1])))


def scatter_rows(comm, M: sp.csr_matrix | None, ranges) -> sp.csr_matrix:
    """Each rank's rows ``ranges[r]:ranges[r+1]`` of the matrix ``M`` held by rank 0."""
    mpi = comm.tompi4py()
    pieces = [M[ranges[r]:ranges[r + 1]] for r in range(len(ranges) - 1)] \
        if mpi.Get_rank() == 0 else None
    return mpi.scatter(pieces, root=0)


#: name under which a coarse basis (and the coarse matrix built on it) carries its column groups
COLUMN_GROUPS = "ddlearn_column_groups"
#: name under which a coarse basis carries the coarse matrix its coarse space computed
GALERKIN = "ddlearn_galerkin"


def schur_galerkin(A: PETSc.Mat, interface, blocks, n0: int, col_ranges) -> PETSc.Mat:
    r""":math:`A_0 = \Phi^TA\Phi` of a basis discrete-harmonic inside the parts in the Schur
    complement's form, :math:`A_0 = \Phi_\Gamma^T A_{\Gamma\Gamma}\Phi_\Gamma + C`:
    ``interface`` this rank's entries ``(rows, cols, vals)`` of :math:`\Phi` on the interface
    rows (a thin matrix: a triple product of a few entries per row) and ``blocks`` its entries
    of :math:`C` (any rank's, repeats added), both in the coarse numbering whose ownership is
    ``col_ranges``. Rows of :math:`A_0` where ``col_ranges`` puts them
    (collective)."""
    comm = A.getComm()
    rank = comm.getRank()
    Phi_gamma = coarse_basis_matrix(comm, A.getLocalSize()[0], n0, *interface, col_ranges)
    A0 = A.ptap(Phi_gamma)
    # this rank's blocks summed first (neighbouring parts share columns), symmetrised: PtAP's
    # product is symmetric to round-off, and a Cholesky factor reads one triangle
    r, c, v = blocks
    local = sp.coo_matrix((v, (r, c)), shape=(n0, n0)).tocsr()
    local = sp.coo_matrix((local + local.T) * 0.5)
    mine = int(col_ranges[rank + 1] - col_ranges[rank])
    C = coarse_basis_matrix(comm, mine, n0, local.row, local.col, local.data, col_ranges)
    A0.axpy(1.0, C)
    for M in (Phi_gamma, C):
        M.destroy()
    return A0


def set_galerkin(Phi: PETSc.Mat, A0: PETSc.Mat) -> None:
    r"""Attach to the coarse basis ``Phi`` its coarse matrix :math:`A_0 = \Phi^TA\Phi`,
    computed by the coarse space (rows where ``Phi``'s columns are), for the Galerkin
    correction to take instead of a product of its own."""
    Phi.compose(GALERKIN, A0)


def take_galerkin(Phi: PETSc.Mat) -> PETSc.Mat | None:
    """The coarse matrix :func:`set_galerkin` attached to ``Phi``, detached (``None``: none):
    it belongs to the values ``Phi`` was built from, so it serves one set-up."""
    A0 = Phi.query(GALERKIN)
    if A0 is not None:
        Phi.compose(GALERKIN, None)
    return A0


def set_column_groups(M: PETSc.Mat, breaks) -> None:
    """Attach to ``M`` the offsets where its column groups start and end (the same array on
    every rank; one group per subdomain's coarse functions)."""
    iset = PETSc.IS().createGeneral(np.asarray(breaks).astype(PETSc.IntType),
                                    comm=PETSc.COMM_SELF)
    M.compose(COLUMN_GROUPS, iset)
    iset.destroy()


def column_groups(M: PETSc.Mat) -> np.ndarray | None:
    """The group offsets :func:`set_column_groups` attached to ``M``, or ``None``."""
    iset = M.query(COLUMN_GROUPS)
    return None if iset is None else iset.getIndices().astype(np.int64)


class RowLayout:
    """The PETSc row layout of a structured decomposition on this rank: ownership, orderings
    and PETSc constructors.

    Parameters
    ----------
    dec : Decomposition
    comm : PETSc.Comm or mpi4py communicator, optional
        Defaults to ``PETSc.COMM_WORLD``.
    coarse_rank : int
        Rank that owns all coarse unknowns.
    """

    def __init__(self, dec: Decomposition, comm=None, coarse_rank: int = 0):
        self.dec = dec
        self.comm = PETSc.COMM_WORLD if comm is None else comm
        if not isinstance(self.comm, PETSc.Comm):
            self.comm = PETSc.Comm(self.comm)
        self.size, self.rank = self.comm.getSize(), self.comm.getRank()
        if not 0 <= coarse_rank < self.size:
            raise ValueError(f"coarse rank {coarse_rank} does not exist on {self.size} ranks")
        self.coarse_rank = coarse_rank
        self.owner = dec.ranks(self.size)
        self.local_subdomains = np.flatnonzero(self.owner == self.rank)
        self.perm = dec.perm
        self.iperm = np.empty_like(self.perm)
        self.iperm[self.perm] = np.arange(len(self.perm))
        owned_sizes = np.array([len(o) for o in dec.owned])
        rank_sizes = np.bincount(self.owner, weights=owned_sizes, minlength=self.size)
        self.ranges = np.concatenate([[0], np.cumsum(rank_sizes)]).astype(np.int64)
        self.lo, self.hi = int(self.ranges[self.rank]), int(self.ranges[self.rank + 1])

    @property
    def n(self) -> int:
        return self.dec.n

    @property
    def N(self) -> int:
        return self.dec.N

    @property
    def overlap(self) -> int:
        return self.dec.overlap

    @property
    def nlocal(self) -> int:
        return self.hi - self.lo

    def local_natural(self) -> np.ndarray:
        """Natural indices of the rows this rank owns, in PETSc order."""
        return self.perm[self.lo:self.hi]

    # -- vectors ---------------------------------------------------------------------------
    def vec(self) -> PETSc.Vec:
        """A zero global vector in the PETSc ordering."""
        v = PETSc.Vec().createMPI((self.nlocal, self.n), comm=self.comm)
        v.set(0.0)
        return v

    def from_natural(self, x: np.ndarray, out: PETSc.Vec | None = None) -> PETSc.Vec:
        """Global Vec from a replicated array in natural ordering."""
        out = self.vec() if out is None else out
        out.setArray(np.asarray(x)[self.local_natural()])
        return out

    def to_natural(self, v: PETSc.Vec) -> np.ndarray:
        """Replicated array in natural ordering from a global Vec (collective; for tests and
        small reports, not for hot paths)."""
        parts = self.comm.tompi4py().allgather(v.getArray(readonly=True).copy())
        x = np.empty(self.n)
        x[self.perm] = np.concatenate(parts)
        return x

    # -- matrices --------------------------------------------------------------------------
    def aij(self, rows: sp.csr_matrix, ncols: int | None = None, col_ranges=None) -> PETSc.Mat:
        """Distributed AIJ matrix from this rank's rows (PETSc ordering for rows and columns);
        ``col_ranges`` gives the column ownership (default: the row ownership)."""
        ncols = self.n if ncols is None else ncols
        return distributed_aij(rows, ncols, self.ranges if col_ranges is None else col_ranges,
                               self.comm)

    def matrix(self, problem) -> PETSc.Mat:
        """The problem's matrix ``A`` in the PETSc ordering, assembled from local rows only."""
        if tuple(problem.grid) != self.dec.grid:
            raise ValueError(f"problem grid {problem.grid} does not match the decomposition "
                             f"grid {self.dec.grid}")
        rows = problem.rows(self.local_natural())
        rows = sp.csr_matrix((rows.data, self.iperm[rows.indices], rows.indptr),
                             shape=rows.shape)
        A = self.aij(rows)
        A.setOption(PETSc.Mat.Option.SYMMETRIC, True)
        return A

    def fingerprint(self, A: PETSc.Mat, to_global: np.ndarray | None = None, probes: int = 64,
                    seed: int = 20261129) -> np.ndarray:
        """``(A v)`` at ``probes`` fixed natural indices for a fixed random ``v`` given in natural
        ordering: identifies the matrix *and* the ordering it is assembled in, the same on any
        rank count and row distribution (collective). ``to_global[j]`` is the row of ``A``
        holding natural unknown ``j`` (default: this layout's PETSc ordering). A model stores it
        so that a matrix of another problem, other coefficients or another ordering is refused
        instead of silently used."""
        to_global = self.iperm if to_global is None else np.asarray(to_global)
        rng = np.random.default_rng(seed)
        v = rng.standard_normal(self.n)
        idx = rng.choice(self.n, size=min(probes, self.n), replace=False)
        from_global = np.empty_like(to_global)
        from_global[to_global] = np.arange(self.n)
        x, y = A.createVecs()
        lo, hi = x.getOwnershipRange()
        x.setArray(v[from_global[lo:hi]])
        A.mult(x, y)
        pos = to_global[idx] - lo
        mine = (pos >= 0) & (pos < hi - lo)
        out = np.zeros(len(idx))
        out[mine] = y.getArray(readonly=True)[pos[mine]]
        for o in (x, y):
            o.destroy()
        return self.comm.tompi4py().allreduce(out)

    def coarse_ranges(self, n0: int) -> np.ndarray:
        """Ownership of a length-``n0`` coarse vector: everything on the coarse rank."""
        return coarse_ranges(self.size, self.coarse_rank, n0)

    def phi(self, Phi: sp.spmatrix) -> PETSc.Mat:
        r"""Distributed :math:`\Phi` (rows in PETSc ordering, all columns on the coarse rank), so
        that ``Phi.multTranspose`` lands the coarse vector on the coarse rank."""
        rows = sp.csr_matrix(Phi)[self.local_natural()]
        return self.aij(rows, ncols=Phi.shape[1], col_ranges=self.coarse_ranges(Phi.shape[1]))

    def index_sets(self, overlapping: bool = True) -> list[PETSc.IS]:
        """Index sets (PETSc ordering, sorted) of this rank's subdomains: the overlapping
        :math:`I_i` or, with ``overlapping=False``, the non-overlapping sets."""
        sets = self.dec.subdomains if overlapping else self.dec.owned
        return [PETSc.IS().createGeneral(np.sort(self.iperm[sets[i]]).astype(PETSc.IntType),
                                         comm=PETSc.COMM_SELF)
                for i in self.local_subdomains]
