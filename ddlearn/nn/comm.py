r"""Communication of the distributed Schwarz layers, over mpi4py (no PETSc): one overlap
exchange, one coarse-rank pattern and one allreduce, each differentiable with its adjoint as
backward.

- **Overlap exchange** (:class:`Exchange`, on the pattern of
  :func:`~ddlearn.decomposition.record.exchange_pattern`), the PETSc-style scatter
  written with point-to-point messages: every index has one owner rank; a rank holds the values
  of the indices it owns and receives as *ghosts* the indices its subdomains touch that other
  ranks own. :func:`ghosts` is the forward scatter (insert the owners' values into the ghost
  rows), :func:`add_to_owners` the reverse scatter (send ghost rows back and add them at the
  owners); each is the other's adjoint, so each is the other's backward.
- **Coarse rank**: the same pattern with all :math:`n_0` coarse values owned by one rank and the
  coarse columns that a rank's rows touch as its ghosts: :math:`\Phi^Tf` is each rank's partial
  sum added to the coarse rank (:func:`add_to_owners`), the coarse block is applied there, and
  the coarse values come back to the ranks that touch them (:func:`ghosts`).
- **Allreduce** (:func:`allreduce_sum`, :func:`shared_sum`): :math:`y = \sum_r z_r` on every
  rank; one :class:`torch.autograd.Function` whose backward is the identity when the sum only
  feeds computations every rank repeats identically (a loss), or again the sum over the ranks
  when it also feeds rank-local ones (its adjoint).

Parameters that every rank holds (replicated) are summed with :func:`allreduce_gradients` after
``backward`` and made equal with :func:`broadcast_parameters`.
"""
from __future__ import annotations

import numpy as np
import torch
from mpi4py import MPI

__all__ = ["Exchange", "ghosts", "add_to_owners", "allreduce_sum",
           "shared_sum", "allreduce_gradients", "broadcast_parameters", "mpi_comm"]


def mpi_comm(comm=None):
    """The mpi4py communicator of ``comm`` (an mpi4py one, anything with ``tompi4py()`` such as
    a PETSc communicator, or ``None`` for ``MPI.COMM_WORLD``)."""
    if comm is None:
        return MPI.COMM_WORLD
    return comm.tompi4py() if hasattr(comm, "tompi4py") else comm


def _numpy(z: torch.Tensor) -> np.ndarray:
    return z.detach().to("cpu").contiguous().numpy()


class Exchange:
    r"""The overlap exchange of one rank: :meth:`gather` (owned rows to the neighbours' ghost
    rows) and its adjoint :meth:`scatter_add`, on tensors whose axis 1 holds the rows
    (``(B, rows)`` or ``(B, rows, c)``); ``bytes`` counts what this rank sent since it was last
    reset.

    Parameters
    ----------
    comm : mpi4py communicator
    recv, send : dict
        As :func:`~ddlearn.decomposition.record.exchange_pattern` returns them.
    n_owned : int
        The rows this rank owns.
    """

    TAG = 7

    def __init__(self, comm, recv: dict, send: dict, n_owned: int):
        self.comm, self.recv, self.send, self.n_owned = comm, recv, send, n_owned
        self.n_ghost = sum(recv.values())
        self.send_rows = np.concatenate([send[r] for r in sorted(send)]) if send else \
            np.zeros(0, dtype=np.int64)
        self.bytes = 0

    def _run(self, out_counts: dict, out_rows: np.ndarray, in_counts: dict, n_in: int):
        """Send ``out_rows`` (``[rows, ...]``, blocks in rank order) as ``out_counts`` and
        receive ``n_in`` rows as ``in_counts``; return ``[n_in, ...]``."""
        inbox = np.empty((n_in,) + out_rows.shape[1:], dtype=out_rows.dtype)
        reqs, start = [], 0
        for r in sorted(in_counts):
            reqs.append(self.comm.Irecv(inbox[start:start + in_counts[r]], source=r,
                                        tag=self.TAG))
            start += in_counts[r]
        start = 0
        for r in sorted(out_counts):
            block = out_rows[start:start + out_counts[r]]
            reqs.append(self.comm.Isend(block, dest=r, tag=self.TAG))
            self.bytes += block.nbytes
            start += out_counts[r]
        MPI.Request.Waitall(reqs)
        return inbox

    def gather(self, z: torch.Tensor) -> torch.Tensor:
        """``[B, owned, ...] -> [B, ghosts, ...]``: the ghost rows from their owners."""
        rows = np.ascontiguousarray(np.moveaxis(_numpy(z)[:, self.send_rows], 1, 0))
        got = self._run({r: len(v) for r, v in self.send.items()}, rows, self.recv,
                        self.n_ghost)
        return torch.from_numpy(np.moveaxis(got, 0, 1).copy()).to(z.device)

    def scatter_add(self, g: torch.Tensor) -> torch.Tensor:
        """``[B, ghosts, ...] -> [B, owned, ...]``: ghost rows sent to their owners and added
        (the adjoint of :meth:`gather`)."""
        rows = np.ascontiguousarray(np.moveaxis(_numpy(g), 1, 0))
        got = self._run(self.recv, rows, {r: len(v) for r, v in self.send.items()},
                        len(self.send_rows))
        out = g.new_zeros((g.shape[0], self.n_owned) + tuple(g.shape[2:]))
        got = torch.from_numpy(np.moveaxis(got, 0, 1).copy()).to(g.device)
        return out.index_add_(1, torch.as_tensor(self.send_rows, device=g.device), got)


class _Scatter(torch.autograd.Function):
    """The exchange in one direction (``reverse``: :meth:`Exchange.scatter_add`, else
    :meth:`Exchange.gather`); its backward runs the other direction, its adjoint."""

    @staticmethod
    def forward(ctx, z, ex, reverse):
        ctx.ex, ctx.reverse = ex, reverse
        return ex.scatter_add(z) if reverse else ex.gather(z)

    @staticmethod
    def backward(ctx, g):
        return (ctx.ex.gather(g) if ctx.reverse else ctx.ex.scatter_add(g)), None, None


def ghosts(z: torch.Tensor, ex: Exchange) -> torch.Tensor:
    """The forward scatter, differentiable: ``[B, owned, ...] -> [B, ghosts, ...]``
    (collective)."""
    return _Scatter.apply(z, ex, False)


def add_to_owners(g: torch.Tensor, ex: Exchange) -> torch.Tensor:
    """The reverse scatter with ADD, differentiable: ``[B, ghosts, ...] -> [B, owned, ...]``
    (collective)."""
    return _Scatter.apply(g, ex, True)


class _AllreduceSum(torch.autograd.Function):
    r""":math:`y = \sum_r z_r` on every rank; backward :math:`\partial z_r = \partial y_r`
    (``shared=False``) or :math:`\sum_s \partial y_s` (``shared=True``)."""

    @staticmethod
    def forward(ctx, z, comm, shared, counter):
        ctx.comm, ctx.shared = comm, shared
        buf = _numpy(z).copy()
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        if counter is not None and comm.Get_size() > 1:  # one rank sends nothing
            counter["allreduce"] += buf.nbytes
        return torch.from_numpy(buf).to(z.device)

    @staticmethod
    def backward(ctx, g):
        if not ctx.shared:
            return g, None, None, None
        buf = _numpy(g).copy()
        ctx.comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        return torch.from_numpy(buf).to(g.device), None, None, None


def allreduce_sum(x: torch.Tensor, comm, counter: dict | None = None) -> torch.Tensor:
    """Differentiable ``MPI_Allreduce(SUM)`` of a tensor whose result only feeds replicated
    computations (a loss every rank evaluates identically): the gradient of each rank's addend
    is the incoming gradient itself. ``counter["allreduce"]`` (optional) adds the bytes sent."""
    return _AllreduceSum.apply(x, mpi_comm(comm), False, counter)


def shared_sum(x: torch.Tensor, comm, counter: dict | None = None) -> torch.Tensor:
    r"""Differentiable ``MPI_Allreduce(SUM)`` whose result may also feed rank-local computations
    (a CG step length multiplying each rank's rows, coarse tokens every rank attends). Its
    adjoint is again the sum over ranks, so a replicated loss :math:`L` must be differentiated
    as :math:`L/P` on each of the :math:`P` ranks: replicated paths then contribute :math:`P
    \cdot \tfrac1P` and rank-local paths their own exact share."""
    return _AllreduceSum.apply(x, mpi_comm(comm), True, counter)


def allreduce_gradients(module: torch.nn.Module, comm=None) -> None:
    r"""Sum every parameter's gradient over the ranks, in place: :math:`g \leftarrow \sum_r g_r`
    (one allreduce of all gradients in one buffer; a parameter without a gradient on every rank
    keeps none, one with a gradient on some ranks counts zero on the others). Call after
    ``backward`` and before the optimiser step, on every rank."""
    comm = mpi_comm(comm)
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        return
    has = np.array([p.grad is not None for p in params], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, has, op=MPI.SUM)
    live = [p for p, h in zip(params, has) if h]
    if not live:
        return
    dtype = live[0].dtype
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach()
                      .to("cpu", dtype).reshape(-1) for p in live]).numpy().copy()
    comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)
    start = 0
    for p in live:
        g = torch.from_numpy(flat[start:start + p.numel()]).view_as(p).to(p.device, p.dtype)
        start += p.numel()
        if p.grad is None:
            p.grad = g
        else:
            p.grad.copy_(g)


def broadcast_parameters(module: torch.nn.Module, comm=None, root: int = 0) -> None:
    """Copy ``root``'s parameters and buffers to every rank, in place (replicated parameters
    from one initialisation)."""
    comm = mpi_comm(comm)
    for t in list(module.parameters()) + list(module.buffers()):
        buf = _numpy(t).copy()
        comm.Bcast(buf, root=root)
        with torch.no_grad():
            t.copy_(torch.from_numpy(buf))
