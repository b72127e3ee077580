r"""A local SPSD splitting of a matrix, the input of a spectral coarse level below a spectral
level (multilevel GenEO: Al Daas, Jolivet, Tournier, SISC 2023).

A *splitting* of :math:`A_0` is a set of pieces :math:`(J_p, B_p)`, each an SPSD matrix on a
few rows :math:`J_p`, with

.. math:: \sum_p E_p^T B_p E_p \le k\,A_0

for a small :math:`k` (:math:`E_p` restricts to :math:`J_p`). The Neumann matrix of a
subdomain :math:`\tilde I_j` of :math:`A_0` is then the sum of the pieces it owns,
:math:`\tilde A_j^N = \sum_{p \in j} E_p^T B_p E_p` restricted to :math:`\tilde I_j`, and
:math:`\sum_j R_j^T \tilde A_j^N R_j \le k A_0` holds whatever subdomains are chosen, because
every piece is owned once: the GenEO estimate of the level above carries to the level below.

The pieces of the coarse matrix :math:`A_0 = \Phi^TA\Phi` of a two-level method come from the
fine level's local Neumann matrices (:func:`galerkin_splitting`):

.. math:: B_i = (R_i\Phi)^T A_i^N (R_i\Phi), \qquad J_i = \{q : R_i\phi_q \ne 0\},

and :math:`\sum_i \Phi^TR_i^TA_i^NR_i\Phi \le k\,\Phi^TA\Phi` follows from
:math:`\sum_i R_i^TA_i^NR_i \le kA` (:math:`k` the largest number of subdomains sharing an
element). A piece's *owner* is one coarse unknown, a function lying wholly inside :math:`I_i`
(one of subdomain :math:`i`'s own, whose neighbours in :math:`A_0`'s graph are the functions
that reach :math:`I_i`), and the subdomain of :math:`A_0` whose non-overlapping part holds the
owner owns the piece
(:func:`subdomain_neumann`).

The pieces travel with the coarse matrix as composed PETSc objects (:func:`attach`), so a
nested preconditioner on :math:`A_0` finds them as it finds a user's auxiliary matrices.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI
from petsc4py import PETSc

from ..decomposition.collective import collective_check

__all__ = ["Pieces", "galerkin_splitting", "send_to_owners", "attach", "attached",
           "subdomain_neumann"]

_KEYS = ("ddlearn_splitting_owners", "ddlearn_splitting_offsets", "ddlearn_splitting_rows")
_VALUES = "ddlearn_splitting_values"


@dataclass
class Pieces:
    """This rank's pieces of a splitting: ``owners[p]`` (a global row), ``rows[p]`` (sorted
    global rows :math:`J_p`, the owner among them) and ``blocks[p]`` (dense
    :math:`B_p`, ``len(rows[p])`` square)."""

    owners: list
    rows: list
    blocks: list

    @classmethod
    def empty(cls) -> "Pieces":
        return cls([], [], [])

    @classmethod
    def joined(cls, parts) -> "Pieces":
        out = cls.empty()
        for part in parts:
            out.owners += part.owners
            out.rows += part.rows
            out.blocks += part.blocks
        return out

    def split_by(self, destinations: np.ndarray, size: int) -> list:
        """One :class:`Pieces` per rank, piece ``p`` to ``destinations[p]``."""
        out = [Pieces.empty() for _ in range(size)]
        for p, d in enumerate(destinations):
            out[d].owners.append(self.owners[p])
            out[d].rows.append(self.rows[p])
            out[d].blocks.append(self.blocks[p])
        return out


def galerkin_splitting(Phi: PETSc.Mat, subdomains, neumann) -> Pieces:
    r"""The pieces :math:`B_i = (R_i\Phi)^TA_i^N(R_i\Phi)` of this rank's subdomains, on the
    coarse unknowns whose functions reach :math:`I_i` (collective).

    Parameters
    ----------
    Phi : PETSc.Mat
        The coarse basis, rows distributed like the fine matrix.
    subdomains : Subdomains
        The fine subdomains (``overlapping`` :math:`I_i` sorted, ``owned``).
    neumann : list of scipy.sparse matrices
        :math:`A_i^N` of this rank's subdomains, numbered like the sorted :math:`I_i`.
    """
    n0 = Phi.getSize()[1]
    # ||phi_q||^2 of every coarse function, to tell the functions lying inside I_i
    _, cols, vals = Phi.getValuesCSR()
    mass = np.bincount(cols, weights=vals * vals, minlength=n0)
    Phi.getComm().tompi4py().Allreduce(MPI.IN_PLACE, mass, op=MPI.SUM)
    columns = PETSc.IS().createStride(n0, 0, 1, comm=PETSc.COMM_SELF)
    sets = subdomains.index_sets(True)
    # an identity column set: PETSc extracts whole rows without a column search
    blocks = Phi.createSubMatrices(sets, [columns] * len(sets)) if sets else []
    out = Pieces.empty()
    for AN, block in zip(neumann, blocks):
        indptr, indices, values = block.getValuesCSR()
        R_Phi = sp.csr_matrix((values, indices, indptr), shape=block.getSize())
        J = np.unique(R_Phi.indices).astype(np.int64)
        if not len(J):
            continue
        P = R_Phi[:, J].tocsc()
        B = np.asarray((P.T @ (AN @ P)).todense())
        inside = np.asarray(P.multiply(P).sum(axis=0)).ravel() / np.maximum(mass[J], 1e-300)
        # the owner: a function wholly inside I_i (the subdomain's own; its coarse neighbours
        # are the functions reaching I_i), the widest such, else the most nearly inside
        whole = inside >= 1.0 - 1e-10
        owner = np.argmax(np.where(whole, np.diff(P.indptr), -1)) if whole.any() \
            else np.argmax(inside)
        out.owners.append(int(J[owner]))
        out.rows.append(J)
        out.blocks.append(0.5 * (B + B.T))  # symmetric to round-off, exactly
    for obj in (columns, *sets, *blocks):
        obj.destroy()
    return out


def send_to_owners(comm, pieces: Pieces, ranges: np.ndarray) -> Pieces:
    """Every piece to the rank whose rows (``ranges``: the ownership offsets of the matrix
    the pieces split, on ``comm``'s ranks) hold its owner (collective on ``comm``)."""
    mpi = comm.tompi4py() if isinstance(comm, PETSc.Comm) else comm
    where = np.searchsorted(ranges, np.asarray(pieces.owners, dtype=np.int64), side="right") - 1
    return Pieces.joined(mpi.alltoall(pieces.split_by(where, mpi.Get_size())))


def attach(M: PETSc.Mat, pieces: Pieces) -> None:
    """Compose this rank's pieces on ``M`` (the rank's share of the matrix they split, each
    piece on the rank owning its owner row)."""
    sizes = [len(r) for r in pieces.rows]
    arrays = (np.asarray(pieces.owners, dtype=np.int64),
              np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
              np.concatenate(pieces.rows) if sizes else np.zeros(0, np.int64))
    for key, values in zip(_KEYS, arrays):
        iset = PETSc.IS().createGeneral(values.astype(PETSc.IntType), comm=PETSc.COMM_SELF)
        M.compose(key, iset)
        iset.destroy()
    flat = np.concatenate([b.ravel() for b in pieces.blocks]) if sizes else np.zeros(0)
    v = PETSc.Vec().createWithArray(flat.copy(), comm=PETSc.COMM_SELF)
    M.compose(_VALUES, v)
    v.destroy()


def attached(M: PETSc.Mat) -> Pieces | None:
    """The pieces :func:`attach` composed on ``M`` on this rank, or ``None``."""
    found = [M.query(key) for key in _KEYS]
    if found[0] is None:
        return None
    owners, offsets, rows = (f.getIndices().astype(np.int64) for f in found)
    flat = M.query(_VALUES).getArray(readonly=True)
    sizes = np.diff(offsets)
    starts = np.concatenate([[0], np.cumsum(sizes ** 2)])
    return Pieces([int(o) for o in owners], np.split(rows, offsets[1:-1]),
                  [flat[s:s + k * k].reshape(k, k).copy() for s, k in zip(starts, sizes)])


def subdomain_neumann(M: PETSc.Mat, subdomains, prefix: str = "ddlearn_"):
    r"""The Neumann matrices :math:`\tilde A_j^N` of this rank's subdomains of ``M`` from the
    splitting attached to it, numbered like the sorted :math:`\tilde I_j`; ``None`` when no
    rank has one (collective). A piece reaching outside the subdomain that owns it is refused
    on every rank, naming the subdomain and the fix (a wider ``-{prefix}overlap``)."""
    comm = M.getComm()
    mpi = comm.tompi4py()
    mine = attached(M)
    if not mpi.allreduce(mine is not None, op=MPI.LOR):
        return None
    mine = mine or Pieces.empty()
    # which subdomain's non-overlapping part holds each owner row: the rows live here
    label = M.createVecLeft()
    for i, O in zip(subdomains.ids, subdomains.owned):
        label.setValues(O.astype(PETSc.IntType), np.full(len(O), float(i)))
    label.assemble()
    lo = M.getOwnershipRange()[0]
    owner_of = label.getArray(readonly=True)[np.asarray(mine.owners, dtype=np.int64) - lo] \
        if mine.owners else np.zeros(0)
    label.destroy()
    holder = {}
    for rank, ids in enumerate(mpi.allgather([int(i) for i in subdomains.ids])):
        holder.update({i: rank for i in ids})
    outgoing = [[] for _ in range(mpi.Get_size())]
    for j, J, B in zip(owner_of, mine.rows, mine.blocks):
        outgoing[holder[int(j)]].append((int(j), J, B))
    position = {int(i): k for k, i in enumerate(subdomains.ids)}
    triplets = [([], [], []) for _ in subdomains.ids]
    outside = []
    for j, J, B in (piece for part in mpi.alltoall(outgoing) for piece in part):
        s = position[j]
        I = subdomains.overlapping[s]
        at = np.minimum(np.searchsorted(I, J), len(I) - 1)
        if not np.array_equal(I[at], J):
            outside.append(j)
            continue
        rows, cols, vals = triplets[s]
        rows.append(np.repeat(at, len(J)))
        cols.append(np.tile(at, len(J)))
        vals.append(B.ravel())
    collective_check(comm, not outside,
                     f"a piece of the level above's Neumann matrices reaches outside subdomain(s) "
                     f"{sorted(set(outside))[:8]} of this level, which own it: widen the "
                     f"subdomains with -{prefix}overlap 2 (or more)")
    # a subdomain that owns no piece gets an empty matrix: no energy of its own to bound
    empty = [np.zeros(0, np.int64)]
    return [sp.csr_matrix((np.concatenate(vals or [np.zeros(0)]),
                           (np.concatenate(rows or empty), np.concatenate(cols or empty))),
                          shape=(len(I), len(I)))
            for I, (rows, cols, vals) in zip(subdomains.overlapping, triplets)]
