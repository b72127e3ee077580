"""An exception on one rank must end the whole run, not leave the other ranks waiting."""
import subprocess
import sys

SCRIPT = """
from mpi4py import MPI
if MPI.COMM_WORLD.Get_rank() == 1:
    raise RuntimeError("only rank 1 fails")
MPI.COMM_WORLD.Barrier()  # rank 0 would wait here forever without the abort
"""


def test_one_failing_rank_aborts_all():
    proc = subprocess.run(["mpiexec", "-n", "2", sys.executable, "-m", "mpi4py", "-c", SCRIPT],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "only rank 1 fails" in proc.stderr
