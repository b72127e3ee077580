r"""Schwarz attention distributed the way Schwarz methods run.

Rank ``r`` owns its subdomains' blocks :math:`Q_i, K_i` and the rows of every vector that
:class:`~ddlearn.decomposition.layout.Layout` gives it; the coarse rank alone owns :math:`Q_0, K_0`. One apply

.. math:: u = \Phi\,Q_0K_0^T\,\Phi^T f + \sum_i R_i^T D_i^{1/2} Q_iK_i^T D_i^{1/2} R_i f

moves only overlap values (the PETSc scatter of :math:`R = [R_i]_{i\ \mathrm{local}}` and its
summing adjoint) and the :math:`n_0` coarse values (:math:`\Phi^T`, a distributed matrix whose
columns all live on the coarse rank, and :math:`\Phi`). Both are wrapped as
:class:`torch.autograd.Function` s whose backward is the adjoint operation, so every rank trains
its own parameters with a standard torch optimizer and gradients are exact.
"""
from __future__ import annotations

import numpy as np
import torch
from mpi4py import MPI
from petsc4py import PETSc
from torch import nn

from . import checkpoint as ckpt_io
from ...nn.kernels import schwarz_local
from ...nn.operators import SchwarzAttention
from ...decomposition.collective import collective_check
from ...decomposition.layout import Layout

__all__ = ["DistributedSchwarzAttention", "OverlapScatter", "CoarseMap", "allreduce_sum",
           "PetscExactSolver", "shared_sum", "apply_batch", "linear_map"]


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


class OverlapScatter:
    r"""The restriction :math:`R f = (R_i f)_{i\ \mathrm{local}}` of a distributed batch to the
    concatenated local subdomain vectors, and its adjoint :math:`R^T` (sum into owners), as one
    PETSc scatter per batch size (block size = number of right-hand sides).

    ``ghosts`` counts the entries a rank receives from other ranks for one right-hand side: the
    forward scatter receives them, the reverse scatter sends them back.
    """

    def __init__(self, layout: Layout):
        self.layout = layout
        dec = layout.dec
        self.index = np.concatenate([layout.iperm[dec.subdomains[i]]
                                     for i in layout.local_subdomains]).astype(PETSc.IntType)
        self.m = len(self.index)
        self.ghosts = int(np.count_nonzero((self.index < layout.lo) | (self.index >= layout.hi)))
        self._cache = {}

    def _objects(self, B: int):
        if B not in self._cache:
            L = self.layout
            g = PETSc.Vec().createMPI((L.nlocal * B, L.n * B), bsize=B, comm=L.comm)
            loc = PETSc.Vec().createSeq(self.m * B, bsize=B, comm=PETSc.COMM_SELF)
            iset = PETSc.IS().createBlock(B, self.index, comm=PETSc.COMM_SELF)
            sc = PETSc.Scatter().create(g, iset, loc, None)
            iset.destroy()
            self._cache[B] = (g, loc, sc)
        return self._cache[B]

    def forward(self, x: np.ndarray) -> np.ndarray:
        """``(B, nlocal)`` owned rows → ``(B, m)`` local subdomain values."""
        B = x.shape[0]
        g, loc, sc = self._objects(B)
        g.setArray(np.ascontiguousarray(x.T).ravel())
        sc.scatter(g, loc, PETSc.InsertMode.INSERT, PETSc.ScatterMode.FORWARD)
        return loc.getArray(readonly=True).reshape(self.m, B).T.copy()

    def adjoint(self, y: np.ndarray) -> np.ndarray:
        """``(B, m)`` local subdomain values → ``(B, nlocal)`` sums at the owners."""
        B = y.shape[0]
        g, loc, sc = self._objects(B)
        loc.setArray(np.ascontiguousarray(y.T).ravel())
        g.set(0.0)
        sc.scatter(loc, g, PETSc.InsertMode.ADD, PETSc.ScatterMode.REVERSE)
        return g.getArray(readonly=True).reshape(-1, B).T.copy()

    def destroy(self):
        for objs in self._cache.values():
            for o in objs:
                o.destroy()
        self._cache.clear()


class CoarseMap:
    r""":math:`\Phi^T` (owned rows → coarse vector on the coarse rank) and :math:`\Phi`, one
    right-hand side at a time through PETSc's MatMultTranspose/MatMult: their messages are
    exactly what :meth:`DistributedSchwarzAttention.bytes_per_apply` counts (and the distributed
    benchmark checks against PETSc's log); MatTransposeMatMult communicates differently.

    ``ghosts`` counts the coarse values this rank exchanges per right-hand side: the coarse
    columns its rows touch when it is not the coarse rank (PETSc sends its partial
    :math:`\Phi^T f` to the coarse rank and receives those coarse values back).
    """

    def __init__(self, layout: Layout, Phi_sp):
        self.layout = layout
        self.Phi = layout.phi(Phi_sp)
        self.xc, self.yf = self.Phi.createVecRight(), self.Phi.createVecLeft()
        self.n0_local = self.xc.getLocalSize()
        rows = Phi_sp.tocsr()[layout.local_natural()]
        self.ghosts = 0 if layout.rank == layout.coarse_rank else int(len(np.unique(rows.indices)))

    def restrict(self, x: np.ndarray) -> np.ndarray:
        """``(B, nlocal)`` → ``(B, n0 on the coarse rank, else 0)``."""
        return _columns(self.Phi.multTranspose, x, self.yf, self.xc)

    def prolong(self, c: np.ndarray) -> np.ndarray:
        """``(B, n0 or 0)`` → ``(B, nlocal)``."""
        return _columns(self.Phi.mult, c, self.xc, self.yf)

    def destroy(self):
        for o in (self.Phi, self.xc, self.yf):
            o.destroy()


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


class _AllReduceSum(torch.autograd.Function):
    """Sum over ranks. Every rank then computes the same global loss, so the gradient of each
    rank's addend is the incoming gradient itself."""

    @staticmethod
    def forward(ctx, x, comm):
        out = x.detach().double().numpy().copy()
        comm.Allreduce(MPI.IN_PLACE, out, op=MPI.SUM)
        return torch.from_numpy(out).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        return g, None


def allreduce_sum(x: torch.Tensor, comm) -> torch.Tensor:
    """Differentiable ``MPI_Allreduce(SUM)`` of a tensor whose result only feeds replicated
    computations (a loss every rank evaluates identically)."""
    return _AllReduceSum.apply(x, comm)


class _SharedSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return _AllReduceSum.forward(None, x, comm)

    @staticmethod
    def backward(ctx, g):
        return _AllReduceSum.forward(None, g, ctx.comm), None


def shared_sum(x: torch.Tensor, comm) -> torch.Tensor:
    r"""Differentiable ``MPI_Allreduce(SUM)`` whose result may also feed rank-local computations
    (a CG step length multiplying each rank's rows). Its adjoint is again the sum over ranks, so
    a replicated loss :math:`L` must be differentiated as :math:`L/P` on each of the :math:`P`
    ranks: replicated paths then contribute :math:`P \cdot \tfrac1P` and rank-local paths their
    own exact share."""
    return _SharedSum.apply(x, comm)


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
        self.layout = L = Layout(serial.dec, comm, coarse_rank)
        self.n, self.nlocal = L.n, L.nlocal
        loc = torch.from_numpy(L.local_subdomains)
        sizes = serial.dec.sizes[L.local_subdomains]
        # Position of each local subdomain entry inside the concatenated local vector.
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        idx = serial.idx[loc].clone()
        for j, (o, s) in enumerate(zip(offsets[:-1], sizes)):
            idx[j, :s] = torch.arange(o, o + s)
            idx[j, s:] = int(offsets[-1])
        self.register_buffer("idx", idx, persistent=False)
        self.register_buffer("sqrtD", serial.sqrtD[loc].clone(), persistent=False)
        self.Q = nn.Parameter(serial.Q.detach()[loc].clone())
        self.K = self.Q if serial.K is serial.Q else nn.Parameter(serial.K.detach()[loc].clone())
        self.scatter = OverlapScatter(L)
        self.coarse = None
        if not serial.one_level:
            self.coarse = CoarseMap(L, serial.Phi_sp)
            if L.rank == coarse_rank:
                self.Q0 = nn.Parameter(serial.Q0.detach().clone())
                self.K0 = self.Q0 if serial.K0 is serial.Q0 else nn.Parameter(serial.K0.detach().clone())
        self._R = linear_map(self.scatter.forward, self.scatter.adjoint)
        self._Rt = linear_map(self.scatter.adjoint, self.scatter.forward)
        if self.coarse is not None:
            self._PhiT = linear_map(self.coarse.restrict, self.coarse.prolong)
            self._Phi = linear_map(self.coarse.prolong, self.coarse.restrict)

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
        w = self._R(f)
        u = self._Rt(schwarz_local(w, self.idx, self.sqrtD, Q, K))
        if self.coarse is not None:
            c = self._PhiT(f)
            if self.layout.rank == self.layout.coarse_rank:
                Q0, K0 = (self.K0, self.Q0) if transpose else (self.Q0, self.K0)
                c = (c @ K0) @ Q0.T
            elif torch.is_grad_enabled() and self.Q.requires_grad and not c.requires_grad:
                # Phi's backward is collective: every rank must enter it, not only the coarse
                # rank whose Q_0, K_0 make its input differentiable.
                c = c.requires_grad_()
            u = u + self._Phi(c)
        return u

    def apply(self, x: PETSc.Vec, y: PETSc.Vec, transpose: bool = False) -> None:
        """``y = M x`` (or ``M^T x``) for distributed PETSc Vecs in the layout's ordering
        (collective)."""
        ok = x.getSizes() == (self.nlocal, self.n) and y.getSizes() == (self.nlocal, self.n)
        collective_check(self.comm, ok, f"Vec sizes {x.getSizes()} / {y.getSizes()} on rank "
                         f"{self.layout.rank} do not match the operator's layout "
                         f"({self.nlocal}, {self.n}): create vectors with Layout.vec()")
        with torch.no_grad():
            u = self(torch.from_numpy(x.getArray(readonly=True).copy())[None].to(self.Q.dtype),
                     transpose)
        y.setArray(u[0].double().numpy())

    def bytes_per_apply(self, batch: int = 1) -> int:
        """Bytes all ranks send in one apply of ``batch`` right-hand sides (float64 values):
        the overlap scatter and its adjoint, plus :math:`\\Phi^T` and :math:`\\Phi`."""
        mine = 2 * self.scatter.ghosts + (2 * self.coarse.ghosts if self.coarse else 0)
        return 8 * batch * self.comm.tompi4py().allreduce(mine, op=MPI.SUM)

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
        """Release the PETSc objects (collective)."""
        self.scatter.destroy()
        if self.coarse is not None:
            self.coarse.destroy()


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
