"""Collective steps whose errors every rank raises together: a check, work on rank 0, work
dealt out to the ranks in rounds."""
from __future__ import annotations

from mpi4py import MPI

__all__ = ["collective_check", "on_root", "dealt_out"]


def collective_check(comm, ok: bool, message: str) -> None:
    """Raise ``ValueError(message)`` on every rank if ``ok`` is false on any rank, so a bad
    input seen by one rank cannot leave the others waiting in a collective (``comm``: a PETSc
    or mpi4py communicator)."""
    mpi = comm.tompi4py() if hasattr(comm, "tompi4py") else comm
    errors = [m for m in mpi.allgather(None if ok else message) if m is not None]
    if errors:
        raise ValueError(errors[0])


def on_root(mpi, fn):
    """``fn()`` on rank 0 of ``mpi`` (an mpi4py communicator; ``None``: this process alone),
    its ``ValueError`` or ``RuntimeError`` raised on every rank as a ``ValueError`` with the same
    message, so the ranks that wait for rank 0 in a collective after it do not hang. Returns
    ``fn()``'s value on rank 0, ``None`` elsewhere (collective)."""
    if mpi is None or mpi.Get_size() == 1:
        try:
            return fn()
        except RuntimeError as e:
            raise ValueError(str(e)) from e
    value, error = None, None
    if mpi.Get_rank() == 0:
        try:
            value = fn()
        except (ValueError, RuntimeError) as e:  # PETSc.Error is a RuntimeError
            error = str(e)
    error = mpi.bcast(error, root=0)
    if error is not None:
        raise ValueError(error)
    return value


class _Failed(str):
    """A work item's error message, told apart from a result."""


def dealt_out(mpi, count: int, item, work) -> list | None:
    """``[work(item(k)) for k in range(count)]`` on rank 0 of ``mpi`` (``None`` elsewhere), the
    items dealt out to the ranks in rounds of one each: rank 0 makes item ``k`` (``item`` is
    called there only) and sends it, every rank works on its own, rank 0 gathers the results in
    order. ``count`` must be the same on every rank. A ``ValueError`` or ``RuntimeError`` of any
    item is raised on every rank after the last round (the first one's message, as a
    ``ValueError``), so no rank is left waiting (collective; ``mpi`` ``None``: this process
    alone)."""
    mpi = MPI.COMM_SELF if mpi is None else mpi
    rank, size = mpi.Get_rank(), mpi.Get_size()
    out, errors = ([] if rank == 0 else None), []
    for first in range(0, count, size):
        batch = range(first, min(first + size, count))
        items = [item(k) for k in batch] + [None] * (size - len(batch)) if rank == 0 else None
        mine, result = mpi.scatter(items, root=0), None
        if mine is not None:
            try:
                result = work(mine)
            except (ValueError, RuntimeError) as e:  # PETSc.Error is a RuntimeError
                result = _Failed(str(e))
            del mine
        results = mpi.gather(result, root=0)
        if rank == 0:
            errors += [r for r in results[:len(batch)] if isinstance(r, _Failed)]
            out += results[:len(batch)]
    error = mpi.bcast(str(errors[0]) if errors else None, root=0)
    if error is not None:
        raise ValueError(error)
    return out
