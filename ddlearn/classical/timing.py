"""Wall-clock phases of a collective set-up, as the slowest rank sees them."""
from __future__ import annotations

import time

from mpi4py import MPI

__all__ = ["Stopwatch"]


class Stopwatch:
    """``lap()`` returns the seconds since the previous lap (or creation) on the slowest rank of
    ``comm`` (collective: every rank must call it)."""

    def __init__(self, comm):
        self.mpi = comm.tompi4py() if hasattr(comm, "tompi4py") else comm
        self._t = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        dt, self._t = now - self._t, now
        return self.mpi.allreduce(dt, op=MPI.MAX)
