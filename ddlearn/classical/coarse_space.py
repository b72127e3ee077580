r"""The coarse-space protocol: what every coarse space :math:`\Phi \in \mathbb R^{n\times n_0}`
of the two-level method is given, what it returns and how it is configured.

A coarse space (one class per family, one file per family under :mod:`ddlearn.classical.coarse`
and :mod:`ddlearn.learned.coarse`, listed in one registry, :mod:`ddlearn.pc.registry`) knows

- its ``name`` (``-<prefix>ddlearn_coarse_space NAME``) and whether it depends on the matrix
  *values* (``value_dependent``: rebuilt when the same matrix comes back with new values);
- its options, read by :meth:`CoarseSpace.set_from_options` under ``-<prefix>ddlearn_NAME_``;
- how it is viewed (:meth:`CoarseSpace.view`, one line under ``-ksp_view``);
- how it computes :math:`\Phi` (:meth:`CoarseSpace.vectors`) from a :class:`CoarseInput`: the
  matrix, the subdomains, and whatever auxiliary data the user handed the PC (coordinates, the
  near-null space, local Neumann matrices).

"hats + X" is one composition (:class:`Composite`, ``-ddlearn_coarse_space hats+spectral``):
the columns of the parts side by side.

:math:`\Phi` travels as this rank's entries in coordinate form (:class:`CoarseVectors`, global
rows of the matrix, columns ``0..n_0-1``, and where one subdomain's columns end), assembled once
by :func:`coarse_basis` into a PETSc matrix with the rows of :math:`A` and the columns on the
coarse rank(s), each subdomain's columns on one of them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI
from petsc4py import PETSc

from ..decomposition.coarse import pou_columns
from ..decomposition.petsc_rows import (coarse_basis_matrix, coarse_owners, coarse_ranges,
                                    distributed_aij, schur_galerkin, scatter_rows,
                                    set_column_groups, set_galerkin)

__all__ = ["CoarseInput", "CoarseVectors", "SchurGalerkin", "CoarseSpace", "Composite",
           "coarse_basis", "subdomain_columns"]


@dataclass
class CoarseInput:
    """What a coarse space is given (collective: every rank holds its share).

    Attributes
    ----------
    A : PETSc.Mat
        The (preconditioning) matrix, the user's numbering and row distribution.
    subdomains : Subdomains
        This rank's overlapping subdomains (:class:`~ddlearn.decomposition.subdomains.Subdomains`).
    prefix : str
        The PC's options prefix followed by ``ddlearn_``.
    coordinates : ndarray or None
        This rank's rows' coordinates, shape ``(local rows, dim)``.
    null_space : ndarray or None
        This rank's rows of the near-null space, shape ``(local rows, m)``
        (:mod:`ddlearn.decomposition.nullspace`).
    auxiliary : list of scipy.sparse matrices or None
        The local Neumann matrices of this rank's subdomains, rows and columns in the order of
        ``subdomains.overlapping[i]`` (``PCHPDDMSetAuxiliaryMat``); ``None``: not given.
    block_size : int
        Dofs per node (no subdomain splits a node).
    local_blocks : LocalBlocks or None
        The one-level part's blocks :math:`A_i`, extracted and not yet factored, in the order
        of ``subdomains.overlapping`` (:mod:`~ddlearn.classical.shared_factor`): a space that
        factors a matrix of a block's pattern shares its symbolic factorisation; ``None``
        outside the two-level PC's set-up.
    """

    A: PETSc.Mat
    subdomains: object
    prefix: str = "ddlearn_"
    coordinates: np.ndarray | None = None
    null_space: np.ndarray | None = None
    auxiliary: list | None = None
    block_size: int = 1
    local_blocks: object | None = None

    @property
    def comm(self):
        return self.A.getComm()


@dataclass
class SchurGalerkin:
    r"""The coarse matrix of a basis discrete-harmonic inside the parts, in the Schur
    complement's form :math:`A_0 = \Phi_\Gamma^T A_{\Gamma\Gamma}\Phi_\Gamma + C`: the first
    ``interface`` entries of the rank's :class:`CoarseVectors` are :math:`\Phi` on the interface
    rows, and ``blocks`` (``(rows, cols, vals)`` in the coarse numbering, repeats added) the
    rank's entries of :math:`C` (:func:`~ddlearn.decomposition.petsc_rows.schur_galerkin`)."""

    interface: int
    blocks: tuple


@dataclass
class CoarseVectors:
    """This rank's entries of :math:`\\Phi` in coordinate form: ``rows`` (global rows of the
    matrix, any rank's), ``cols`` (``0..n0-1``, the same numbering on every rank), ``vals``;
    each ``(row, col)`` given once overall. ``n0`` is the global number of columns;
    ``breaks`` (the same on every rank, or ``None``) the column offsets where one group of
    columns that belong together (one subdomain's) ends and the next begins, ``0`` and ``n0``
    included; ``None``: no groups, each column its own. ``neumann``: the local Neumann
    matrices of this rank's subdomains the vectors were computed from (sorted :math:`I_i`), for
    a spectral level below (:mod:`~ddlearn.classical.splitting`), or ``None``. ``galerkin``:
    :math:`\\Phi^TA\\Phi` (scipy, on rank 0, ``None`` elsewhere) where the coarse space has a
    cheaper way to it than the general product
    (:func:`~ddlearn.classical.coarse.interface.extension_galerkin`), or ``None``;
    ``schur``: the same in the Schur complement's form from every rank
    (:class:`SchurGalerkin`), or ``None``; a composition of spaces drops both."""

    rows: np.ndarray
    cols: np.ndarray
    vals: np.ndarray
    n0: int
    breaks: np.ndarray | None = None
    neumann: list | None = None
    galerkin: sp.csr_matrix | None = None
    schur: "SchurGalerkin | None" = None

    @classmethod
    def from_rows(cls, Phi_rows: sp.spmatrix, first_row: int) -> "CoarseVectors":
        """From this rank's rows of :math:`\\Phi` (global columns), starting at ``first_row``."""
        C = sp.coo_matrix(Phi_rows)
        return cls(C.row.astype(np.int64) + first_row, C.col.astype(np.int64), C.data,
                   int(C.shape[1]))

    def shifted(self, offset: int) -> "CoarseVectors":
        return CoarseVectors(self.rows, self.cols + offset, self.vals, self.n0,
                             None if self.breaks is None else self.breaks + offset,
                             self.neumann)

    @property
    def groups(self) -> np.ndarray:
        """``breaks``, with one group per column where there are none."""
        return np.arange(self.n0 + 1) if self.breaks is None else self.breaks


class CoarseSpace:
    r"""Base of every coarse space; see the module docstring.

    Subclasses set ``name`` (and ``value_dependent``), take their settings as constructor
    keywords (the defaults that options override) and implement :meth:`vectors`.
    """

    name: ClassVar[str] = ""
    #: the basis depends on the matrix values (rebuilt on a values-only re-setup)
    value_dependent: ClassVar[bool] = False
    #: the partitioner the space lives on (``boxes`` for the hats), or ``None`` for any
    partitioner: ClassVar[str | None] = None
    #: the space handles block size > 1 (vector problems)
    supports_blocks: ClassVar[bool] = True
    #: the space is built from local Neumann matrices, so on a coarse level it asks the level
    #: above for its splitting (:mod:`~ddlearn.classical.splitting`, multilevel GenEO)
    uses_neumann: ClassVar[bool] = False

    def __init__(self):
        self.found: dict = {}

    def set_from_options(self, prefix: str) -> None:
        """Read ``-{prefix}{name}_*`` (``prefix``: the PC's prefix + ``ddlearn_``)."""

    def options(self, prefix: str) -> PETSc.Options:
        return PETSc.Options(f"{prefix}{self.name}_")

    def subdomains(self, A: PETSc.Mat):
        """Subdomains this space brings along (a space bound to its own decomposition), else
        ``None``: the PC partitions (collective)."""
        return None

    def vectors(self, inp: CoarseInput) -> CoarseVectors:  # pragma: no cover - protocol
        """This rank's entries of :math:`\\Phi` (collective)."""
        raise NotImplementedError

    def describe(self) -> dict:
        """Settings and what the last build found (JSON-ready)."""
        return {"name": self.name, **self.found}

    def view(self, viewer: PETSc.Viewer) -> None:
        details = ", ".join(f"{k} {v}" for k, v in self.describe().items() if k != "name")
        viewer.printfASCII(f"  coarse space {self.name}" + (f": {details}" if details else "")
                           + "\n")

    def __add__(self, other: "CoarseSpace") -> "Composite":
        return Composite([self, other])


class Composite(CoarseSpace):
    r"""Several coarse spaces side by side, :math:`\Phi = [\Phi_1 \mid \Phi_2 \mid \dots]`
    (e.g. ``hats+spectral``)."""

    def __init__(self, parts):
        super().__init__()
        flat = []
        for p in parts:
            flat += p.parts if isinstance(p, Composite) else [p]
        self.parts = flat

    @property
    def name(self) -> str:  # type: ignore[override]
        return "+".join(p.name for p in self.parts)

    @property
    def value_dependent(self) -> bool:  # type: ignore[override]
        return any(p.value_dependent for p in self.parts)

    @property
    def partitioner(self):  # type: ignore[override]
        wanted = {p.partitioner for p in self.parts} - {None}
        return wanted.pop() if len(wanted) == 1 else None

    @property
    def supports_blocks(self) -> bool:  # type: ignore[override]
        return all(p.supports_blocks for p in self.parts)

    @property
    def uses_neumann(self) -> bool:  # type: ignore[override]
        return any(p.uses_neumann for p in self.parts)

    def set_from_options(self, prefix: str) -> None:
        for p in self.parts:
            p.set_from_options(prefix)

    def vectors(self, inp: CoarseInput) -> CoarseVectors:
        pieces, offset = [], 0
        for p in self.parts:
            v = p.vectors(inp).shifted(offset)
            pieces.append(v)
            offset += v.n0
        cat = np.concatenate
        breaks = np.unique(cat([v.groups for v in pieces])) \
            if any(v.breaks is not None for v in pieces) else None
        neumann = next((v.neumann for v in pieces if v.neumann is not None), None)
        return CoarseVectors(cat([v.rows for v in pieces]), cat([v.cols for v in pieces]),
                             cat([v.vals for v in pieces]), offset, breaks, neumann)

    def describe(self) -> dict:
        return {"name": self.name, "parts": [p.describe() for p in self.parts]}

    def view(self, viewer: PETSc.Viewer) -> None:
        for p in self.parts:
            p.view(viewer)


def coarse_basis(inp: CoarseInput, vectors: CoarseVectors, coarse_rank: int = 0,
                 coarse_ranks: int = 1) -> PETSc.Mat:
    r""":math:`\Phi` as a PETSc matrix: the rows of ``inp.A``, the columns in contiguous blocks on
    ``coarse_ranks`` ranks spread evenly from ``coarse_rank``
    (:func:`~ddlearn.decomposition.petsc_rows.coarse_owners`), cut where a subdomain's columns end
    (``vectors.breaks``), so :math:`\Phi^Tx` lands there and each subdomain's coarse functions
    on one rank. ``coarse_ranks = 1``: all columns on ``coarse_rank``. The column groups travel
    with the matrix (:func:`~ddlearn.decomposition.petsc_rows.column_groups`). Collective; needs
    ``1 <= coarse_ranks <= min(ranks, n0)``."""
    comm = inp.comm
    owners = coarse_owners(comm.getSize(), coarse_ranks, coarse_rank)
    ranges = coarse_ranges(comm.getSize(), owners, vectors.n0, vectors.breaks)
    Phi = coarse_basis_matrix(comm, inp.A.getLocalSize()[0], vectors.n0, vectors.rows,
                              vectors.cols, vectors.vals, ranges)
    set_column_groups(Phi, vectors.groups)
    mpi = comm.tompi4py()
    if mpi.bcast(vectors.galerkin is not None, root=0):
        # A_0 with the rows where Phi's columns are, as the Galerkin product would give it
        cols = np.asarray(Phi.getOwnershipRangesColumn(), dtype=np.int64)
        A0 = distributed_aij(scatter_rows(comm, vectors.galerkin, cols), vectors.n0, cols, comm)
        set_galerkin(Phi, A0)
        A0.destroy()
    elif mpi.allreduce(vectors.schur is not None, op=MPI.LAND):
        k = vectors.schur.interface
        A0 = schur_galerkin(inp.A, (vectors.rows[:k], vectors.cols[:k], vectors.vals[:k]),
                            vectors.schur.blocks, vectors.n0, ranges)
        set_galerkin(Phi, A0)
        A0.destroy()
    return Phi


def subdomain_columns(comm, N: int, found: dict) -> CoarseVectors:
    r"""The coarse vectors :math:`R_i^TD_iV_i` of this rank's subdomains ``found = {i: (I_i, D_i,
    V_i)}`` (global rows; columns numbered subdomain by subdomain, so every rank agrees on them;
    collective over the ``N`` subdomains)."""
    counts = {}
    for part in comm.tompi4py().allgather({i: f[2].shape[1] for i, f in found.items()}):
        counts.update(part)
    offsets = np.concatenate([[0], np.cumsum([counts.get(i, 0) for i in range(N)])])
    ids = list(found)
    rows, cols, vals = pou_columns(*([found[i][j] for i in ids] for j in range(3)),
                                   [offsets[i] for i in ids])
    return CoarseVectors(rows, cols, vals, int(offsets[-1]), np.unique(offsets).astype(np.int64))
