r"""The one wall-clock timer of the package: seconds per named phase on this rank, reduced to
the slowest rank when asked (collective).

Two ways to time a phase, both without communication in the timed path:

- consecutive phases of a set-up: ``timer.lap("partition_s")`` adds the seconds since the
  previous lap (or the creation) to that phase;
- a piece of a repeated path (each apply): ``t = timer.start()`` ... ``timer.add("coarse", t)``.

:meth:`Timer.slowest` gives every phase's total on the slowest rank,
:math:`\max_r t_r^{\rm phase}` (collective over the communicator it is given).
"""
from __future__ import annotations

import time

from mpi4py import MPI

__all__ = ["Timer"]


class Timer:
    """Seconds per phase on this rank (``seconds``), the given ``phases`` starting at zero."""

    start = staticmethod(time.perf_counter)

    def __init__(self, *phases: str):
        self.seconds = dict.fromkeys(phases, 0.0)
        self._t = time.perf_counter()

    def lap(self, phase: str) -> float:
        """Add the seconds since the previous lap (or the creation) to ``phase``; returns them
        (this rank's)."""
        now = time.perf_counter()
        dt, self._t = now - self._t, now
        self.seconds[phase] = self.seconds.get(phase, 0.0) + dt
        return dt

    def add(self, phase: str, since: float) -> None:
        """Add the seconds since ``since`` (a :meth:`start`) to ``phase``."""
        self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - since

    def slowest(self, comm) -> dict:
        """Each phase's total on the slowest rank of ``comm`` (a PETSc or mpi4py communicator;
        collective: every rank holds the same phases)."""
        mpi = comm.tompi4py() if hasattr(comm, "tompi4py") else comm
        return {k: mpi.allreduce(v, op=MPI.MAX) for k, v in self.seconds.items()}
