"""Wall-clock phases: of a collective set-up, as the slowest rank sees them (:class:`Stopwatch`),
and of the repeated applies, summed on each rank without any communication (:class:`Tally`)."""
from __future__ import annotations

import time

from mpi4py import MPI

__all__ = ["Stopwatch", "Tally"]


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


class Tally:
    r"""Seconds summed per phase on this rank, e.g. the local and the coarse part of each apply:
    ``t = tally.start()`` ... ``tally.add("coarse", t)``. Local clocks only: no barrier or
    reduction in the timed path (:meth:`slowest` reduces, collectively, when asked)."""

    def __init__(self, *phases: str):
        self.seconds = dict.fromkeys(phases, 0.0)

    start = staticmethod(time.perf_counter)

    def add(self, phase: str, since: float) -> None:
        self.seconds[phase] += time.perf_counter() - since

    def slowest(self, comm) -> dict:
        """Each phase's total on the slowest rank of ``comm`` (collective)."""
        mpi = comm.tompi4py() if hasattr(comm, "tompi4py") else comm
        return {k: mpi.allreduce(v, op=MPI.MAX) for k, v in self.seconds.items()}
