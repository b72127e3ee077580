r"""Schwarz attention distributed the way Schwarz methods run, and the PETSc side of the learned
operators (batched PETSc applies, the exact solver of the training targets).

Rank ``r`` owns its subdomains' blocks :math:`Q_i, K_i` and the rows of every vector that
:class:`~ddlearn.decomposition.petsc_rows.RowLayout` gives it; the coarse rank alone owns :math:`Q_0, K_0`. One apply

.. math:: u = \Phi\,Q_0K_0^T\,\Phi^T f + \sum_i R_i^T D_i^{1/2} Q_iK_i^T D_i^{1/2} R_i f

moves only overlap values (the overlap exchange of :mod:`ddlearn.nn.comm`: the ghost rows from
their owners, and back with ADD) and the coarse values a rank's rows touch (the same exchange with
every coarse value owned by the coarse rank: :math:`\Phi^T` adds each rank's partial sums there,
:math:`\Phi` brings the coarse values back). Both are differentiable with their adjoints as
backward, so every rank trains its own parameters with a standard torch optimizer and gradients
are exact.
"""
from __future__ import annotations

import numpy as np
import torch
from mpi4py import MPI
from petsc4py import PETSc
from torch import nn

from . import checkpoint as ckpt_io
from ...decomposition.collective import collective_check
from ...decomposition.petsc_rows import RowLayout
from ...decomposition.record import exchange_pattern
from ...nn.comm import Exchange, add_to_owners, ghosts
from ...nn.kernels import coarse_prolong, coarse_restrict, schwarz_local
from ...nn.operators import SchwarzAttention

__all__ = ["DistributedSchwarzAttention", "PetscExactSolver", "apply_batch", "linear_map"]


def _dense(comm, rows: int, X: np.ndarray) -> PETSc.Mat:
    """A distributed dense ``(global rows, B)`` matrix whose local rows are ``X.T``."""
    M = PETSc.Mat().createDense(((rows, None), (None, X.shape[0])), comm=comm)
    M.setUp()
    if rows:
        M.getDenseArray()[:] = X.T
    M.assemble()
    return M


def _rows_of(M: PETSc.Mat) -> np.ndarray:
    out = M.getDenseArray(readonly=True).T.copy()
    M.destroy()
    return out


def apply_batch(op, X: np.ndarray, transpose: bool = False) -> np.ndarray:
    """A PETSc operation on a whole batch: ``X`` holds this rank's part of each right-hand side,
    ``(B, local rows)``; returns the rows of the results (collective). ``op`` is a ``Mat``
    (MatMatMult, or MatTransposeMatMult with ``transpose``) or a ``KSP`` (KSPMatSolve), both on
    dense block matrices, or a ``PC``, applied one column at a time: PCMatApply of PETSc 3.26's
    PCASM supports one block per rank only, and our ranks hold several."""
    comm = op.getComm()
    if isinstance(op, PETSc.Mat):
        (rows, _), (cols, _) = op.getSizes()
        Xd = _dense(comm, rows if transpose else cols, X)
        Y = op.transposeMatMult(Xd) if transpose else op.matMult(Xd)
        Xd.destroy()
        return _rows_of(Y)
    A, _ = op.getOperators()
    if isinstance(op, PETSc.KSP):
        rows = A.getLocalSize()[0]
        Xd, Yd = _dense(comm, rows, X), _dense(comm, rows, np.zeros_like(X))
        op.matSolve(Xd, Yd)
        Xd.destroy()
        return _rows_of(Yd)
    x, y = A.createVecs()
    out = _columns(op.apply, X, x, y)
    x.destroy(), y.destroy()
    return out


def _columns(apply, X: np.ndarray, x: PETSc.Vec, y: PETSc.Vec) -> np.ndarray:
    """``apply(x, y)`` on each row of ``X`` through the work vectors ``x``, ``y``."""
    out = np.empty((X.shape[0], y.getLocalSize()))
    for b, row in enumerate(X):
        x.setArray(row)
        apply(x, y)
        out[b] = y.getArray(readonly=True)
    return out


def linear_map(forward, adjoint):
    """An autograd Function applying a linear map whose backward is its adjoint."""

    class Map(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return torch.from_numpy(forward(x.detach().double().numpy())).to(x.dtype)

        @staticmethod
        def backward(ctx, g):
            return torch.from_numpy(adjoint(g.detach().double().numpy())).to(g.dtype)

    return Map.apply


# Checkpoint entries that restart training; everything else is metadata a loader keeps.
_TRAINING_STATE = ("state", "current_state", "optimizer", "scheduler", "sampler")


class DistributedSchwarzAttention(nn.Module):
    r"""The distributed form of :class:`~ddlearn.nn.operators.SchwarzAttention`.

    Built from a serial model (its parameters are sliced: this rank keeps only its subdomains'
    :math:`Q_i, K_i`, and :math:`Q_0, K_0` only on the coarse rank), or from a checkpoint of
    any rank count (:meth:`load`). ``forward`` maps this rank's rows of a batch,
    ``(B, nlocal)``, to its rows of ``M f``.

    Parameters
    ----------
    serial : SchwarzAttention
    comm : communicator, optional (default ``PETSc.COMM_WORLD``)
    coarse_rank : int
        Rank that owns the coarse block (default 0).
    """

    def __init__(self, serial: SchwarzAttention, comm=None, coarse_rank: int = 0):
        super().__init__()
        self.config = dict(serial.config)
        self.meta = {}
        self._num_parameters = serial.num_parameters()
        self.layout = L = RowLayout(serial.dec, comm, coarse_rank)
        self.n, self.nlocal, self.n0 = L.n, L.nlocal, serial.n0
        dec, mpi = serial.dec, L.comm.tompi4py()
        owned = L.local_natural()
        # this rank's share, its local numbering the owned rows in the layout's order, then the
        # ghosts; the record's width, which the per-subdomain Q_i, K_i have
        view = serial.record.rank_view(L.size, L.rank, owner=L.owner, owned=owned, trim=False)
        self.overlap = Exchange(mpi, view["recv"], view["send"], self.nlocal)
        loc = torch.from_numpy(view["subdomains"])
        self.register_buffer("idx", torch.from_numpy(view["local"]["index"]), persistent=False)
        self.register_buffer("sqrtD", serial.sqrtD[loc].clone(), persistent=False)

        def rows_of(r):  # the unknowns rank r owns
            return np.concatenate([dec.owned[i] for i in np.flatnonzero(L.owner == r)])

        self.Q = nn.Parameter(serial.Q.detach()[loc].clone())
        self.K = self.Q if serial.K is serial.Q else nn.Parameter(serial.K.detach()[loc].clone())
        self.coarse = None
        if not serial.one_level:
            Phi = serial.Phi_sp.tocsr()
            # every coarse value lives on the coarse rank; a rank's ghosts are the columns its
            # rows touch
            mine = np.arange(self.n0) if L.rank == coarse_rank else np.zeros(0, dtype=np.int64)
            cp = exchange_pattern(np.full(self.n0, coarse_rank), lambda r: Phi[rows_of(r)].indices,
                                  L.rank, mine, L.size)
            self.coarse = Exchange(mpi, cp["recv"], cp["send"], len(mine))
            col = np.full(self.n0, -1, dtype=np.int64)
            col[mine] = np.arange(len(mine))
            col[cp["ghosts"]] = len(mine) + np.arange(len(cp["ghosts"]))
            P = Phi[owned].tocoo()
            dt = serial.sqrtD.dtype
            self.register_buffer("phi_rows", torch.from_numpy(P.row.astype(np.int64)),
                                 persistent=False)
            self.register_buffer("phi_cols", torch.from_numpy(col[P.col]), persistent=False)
            self.register_buffer("phi_vals", torch.from_numpy(P.data).to(dt), persistent=False)
            if L.rank == coarse_rank:
                self.Q0 = nn.Parameter(serial.Q0.detach().clone())
                self.K0 = self.Q0 if serial.K0 is serial.Q0 else nn.Parameter(serial.K0.detach().clone())

    @property
    def comm(self):
        return self.layout.comm

    @property
    def symmetric(self) -> bool:
        return bool(self.config["symmetric"])

    def forward(self, f: torch.Tensor, transpose: bool = False) -> torch.Tensor:
        """This rank's rows of ``M f`` (or ``M^T f``: ``Q`` and ``K`` swap roles) for this rank's
        rows ``f`` of shape ``(B, nlocal)``."""
        ok = f.ndim == 2 and f.shape[1] == self.nlocal
        collective_check(self.comm, ok, f"input of shape {tuple(f.shape)} on rank "
                         f"{self.layout.rank} does not fit its {self.nlocal} owned rows: pass "
                         f"(batch, nlocal) arrays in the layout's PETSc ordering")
        Q, K = (self.K, self.Q) if transpose else (self.Q, self.K)
        z = torch.cat([f, ghosts(f, self.overlap)], dim=1)           # R f on the local rows
        y = schwarz_local(z, self.idx, self.sqrtD, Q, K)
        u = y[:, :self.nlocal] + add_to_owners(y[:, self.nlocal:], self.overlap)
        if self.coarse is not None:
            ex, Phi = self.coarse, (self.phi_rows, self.phi_cols, self.phi_vals)
            c = coarse_restrict(f, *Phi, ex.n_owned + ex.n_ghost, 1)    # this rank's Phi^T f
            c = c[:, :ex.n_owned] + add_to_owners(c[:, ex.n_owned:], ex)  # summed on the coarse rank
            if self.layout.rank == self.layout.coarse_rank:
                Q0, K0 = (self.K0, self.Q0) if transpose else (self.Q0, self.K0)
                c = (c @ K0) @ Q0.T
            elif torch.is_grad_enabled() and self.Q.requires_grad and not c.requires_grad:
                # the backward of the coarse exchange is collective: every rank must enter it,
                # not only the coarse rank whose Q_0, K_0 make its input differentiable
                c = c.requires_grad_()
            c = torch.cat([c, ghosts(c, ex)], dim=1)
            u = u + coarse_prolong(c, *Phi, self.nlocal, 1)
        return u

    def apply(self, x: PETSc.Vec, y: PETSc.Vec, transpose: bool = False) -> None:
        """``y = M x`` (or ``M^T x``) for distributed PETSc Vecs in the layout's ordering
        (collective)."""
        ok = x.getSizes() == (self.nlocal, self.n) and y.getSizes() == (self.nlocal, self.n)
        collective_check(self.comm, ok, f"Vec sizes {x.getSizes()} / {y.getSizes()} on rank "
                         f"{self.layout.rank} do not match the operator's layout "
                         f"({self.nlocal}, {self.n}): create vectors with RowLayout.vec()")
        with torch.no_grad():
            u = self(torch.from_numpy(x.getArray(readonly=True).copy())[None].to(self.Q.dtype),
                     transpose)
        y.setArray(u[0].double().numpy())

    def bytes_per_apply(self, batch: int = 1) -> int:
        """Bytes all ranks send in one apply of ``batch`` right-hand sides (float64 values):
        the overlap scatter and its adjoint, plus :math:`\\Phi^T` and :math:`\\Phi`."""
        mine = 2 * self.overlap.n_ghost + (2 * self.coarse.n_ghost if self.coarse else 0)
        return 8 * batch * self.comm.tompi4py().allreduce(mine, op=MPI.SUM)

    def bytes_sent(self) -> int:
        """Bytes this rank's exchanges sent since they were built (the overlap and the coarse
        values)."""
        return self.overlap.bytes + (self.coarse.bytes if self.coarse else 0)

    def num_parameters(self) -> int:
        """Parameters of the whole distributed operator (all ranks), as the serial count."""
        return self._num_parameters

    # -- checkpoints independent of the rank count -------------------------------------------
    def to_serial(self) -> SchwarzAttention | None:
        """Gather every subdomain's blocks (keyed by global subdomain id) into a serial model
        on rank 0 (collective; ``None`` elsewhere)."""
        L, comm = self.layout, self.comm.tompi4py()
        local = {int(i): (self.Q[j].detach(), None if self.K is self.Q else self.K[j].detach())
                 for j, i in enumerate(L.local_subdomains)}
        coarse = None
        if self.coarse is not None and L.rank == L.coarse_rank:
            coarse = (self.Q0.detach(), None if self.K0 is self.Q0 else self.K0.detach())
        blocks, coarses = comm.gather(local, root=0), comm.gather(coarse, root=0)
        if L.rank != 0:
            return None
        model = ckpt_io.build_model(self.config)
        with torch.no_grad():
            for part in blocks:
                for i, (Q, K) in part.items():
                    model.Q[i] = Q
                    if K is not None:
                        model.K[i] = K
            Q0, K0 = next(c for c in coarses if c is not None) if self.coarse else (None, None)
            if Q0 is not None:
                model.Q0.copy_(Q0)
                if K0 is not None:
                    model.K0.copy_(K0)
        return model

    def save(self, path: str, **extra) -> None:
        """Write a checkpoint that any rank count can load (collective; rank 0 writes it
        atomically as the equivalent serial model)."""
        model = self.to_serial()
        err = None
        if self.layout.rank == 0:
            try:
                ckpt_io.save(path, model, ranks_at_save=self.layout.size, **extra)
            except Exception as e:  # report on every rank instead of leaving them waiting
                err = f"could not write checkpoint {path}: {e}"
        err = self.comm.tompi4py().bcast(err, root=0)
        if err:
            raise OSError(err)
        self.meta.update(extra)  # the model now describes itself as its checkpoint does

    @classmethod
    def load(cls, path: str, comm=None, coarse_rank: int = 0, **expect) -> "DistributedSchwarzAttention":
        """Load a checkpoint saved on any rank count (collective; errors on every rank)."""
        comm = PETSc.COMM_WORLD if comm is None else comm
        mpi = comm.tompi4py() if isinstance(comm, PETSc.Comm) else comm
        serial, meta, err = None, None, None
        if mpi.Get_rank() == 0:
            try:
                serial, ckpt = ckpt_io.load(path, expect=expect or None)
                meta = {k: v for k, v in ckpt.items() if k not in _TRAINING_STATE}
            except (OSError, ValueError) as e:
                err = str(e)
        err = mpi.bcast(err, root=0)
        if err:
            raise ValueError(err)
        serial, meta = mpi.bcast((serial, meta), root=0)
        model = cls(serial, comm, coarse_rank)
        model.meta = meta
        return model

    def destroy(self) -> None:
        """Release what the model holds beyond its tensors: nothing since its exchanges are
        mpi4py messages; the owners of models (the PC) call it at their own release."""


class PetscExactSolver:
    """``u = A^{-1} f`` for distributed right-hand sides with a PETSc direct solve: a KSP with
    PCREDUNDANT + LU on the distributed sparse ``A`` (every rank factors the sparse matrix; no
    dense inverse). Called with this rank's rows ``(count, nlocal)``, returns its rows of the
    solutions (collective)."""

    def __init__(self, A: PETSc.Mat):
        self.ksp = PETSc.KSP().create(comm=A.getComm())
        self.ksp.setOptionsPrefix("ddlearn_exact_")
        self.ksp.setType(PETSc.KSP.Type.PREONLY)
        self.ksp.getPC().setType(PETSc.PC.Type.REDUNDANT)  # whose inner solve is LU
        self.ksp.setOperators(A)
        self.ksp.setFromOptions()
        self.ksp.setUp()

    def __call__(self, F: np.ndarray) -> np.ndarray:
        return apply_batch(self.ksp, F)

    def destroy(self):
        self.ksp.destroy()
