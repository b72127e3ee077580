"""pytest plugin: under MPI, the first failing test ends every rank.

One rank failing an assert before a collective leaves the other ranks waiting in that collective
forever; ``python -m mpi4py`` only aborts on an exception that reaches the interpreter's top
level, which pytest never lets happen. So when a test's set-up or call fails on any rank of a
run with more than one rank, this hook prints the failure to stderr and calls
``MPI.COMM_WORLD.Abort(1)``: mpiexec then ends the whole job with a nonzero status. MPICH's
``MPI_Abort`` can return before the process manager kills the job (measured: the aborting rank
went on to the next test and met the waiting rank's Barrier there), so the rank then leaves at
once with ``os._exit(1)``. mpiexec forwards a rank's output asynchronously and the abort
can kill the forwarder first (measured: the failure text lost in about one run in four), so the
rank waits a moment after writing it.

The test suite loads it from ``tests/conftest.py``; another run loads it with
``-p mpi_abort_plugin`` (``tests/`` on ``sys.path``).
"""
import os
import sys
import time

from mpi4py import MPI


def pytest_runtest_logreport(report):
    comm = MPI.COMM_WORLD
    if comm.Get_size() <= 1 or not report.failed or report.when not in ("setup", "call"):
        return
    rank = comm.Get_rank()
    sys.stdout.flush()
    text = getattr(report, "longreprtext", "") or str(report.longrepr)
    sys.stderr.write(f"\n[rank {rank}] {report.nodeid} failed in {report.when}; aborting all "
                     f"{comm.Get_size()} ranks\n{text}\n")
    sys.stderr.flush()
    time.sleep(1.0)  # let mpiexec forward the text before the abort kills the job
    comm.Abort(1)
    os._exit(1)  # Abort may return before the job is killed
