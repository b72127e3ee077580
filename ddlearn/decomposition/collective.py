"""Errors that every rank raises together."""
from __future__ import annotations

from petsc4py import PETSc

__all__ = ["collective_check"]


def collective_check(comm, ok: bool, message: str) -> None:
    """Raise ``ValueError(message)`` on every rank if ``ok`` is false on any rank, so a bad
    input seen by one rank cannot leave the others waiting in a collective (``comm``: a PETSc
    or mpi4py communicator)."""
    mpi = comm.tompi4py() if isinstance(comm, PETSc.Comm) else comm
    errors = [m for m in mpi.allgather(None if ok else message) if m is not None]
    if errors:
        raise ValueError(errors[0])
