"""An exception on one rank must end the whole run, not leave the other ranks waiting; a hung
test must not hang the suite."""
import os
import subprocess
import sys
from pathlib import Path

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


TESTS_DIR = Path(__file__).resolve().parent
ROOT = TESTS_DIR.parent

FAILING_FIRST = """
import os
from mpi4py import MPI
import pytest


@pytest.mark.mpi(min_size=2)
def test_rank_1_fails_before_a_collective():
    if MPI.COMM_WORLD.Get_rank() == 1:
        assert False, "only rank 1 fails"
    MPI.COMM_WORLD.Barrier()  # rank 0 waits here: only an abort ends it


@pytest.mark.mpi(min_size=2)
def test_after_the_failure():
    # nothing collective before the marker: a rank that gets here leaves its trace
    open(os.path.join(os.path.dirname(__file__), f"ran-{MPI.COMM_WORLD.Get_rank()}"), "w").close()
    MPI.COMM_WORLD.Barrier()
"""


def _pytest_env():
    """The environment of a child pytest that finds the plugin in ``tests/``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS_DIR), env.get("PYTHONPATH")) if p)
    return env


def test_first_failing_test_aborts_every_rank(tmp_path):
    """Rank 1 fails an assert while rank 0 waits in a Barrier: the plugin the suite loads
    aborts the job at that test, so it ends (nonzero) and the next test never starts. The
    child's own timeout (60 s) only stops a hang from outliving this test."""
    test = tmp_path / "test_child.py"
    test.write_text(FAILING_FIRST)
    proc = subprocess.run(
        ["mpiexec", "-n", "2", sys.executable, "-m", "mpi4py", "-m", "pytest", "--with-mpi",
         "-p", "no:cacheprovider", "-p", "mpi_abort_plugin", "--timeout", "60",
         "--rootdir", str(tmp_path), str(test)],
        cwd=tmp_path, env=_pytest_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "only rank 1 fails" in proc.stderr and "aborting all 2 ranks" in proc.stderr
    assert "Timeout" not in proc.stdout + proc.stderr
    assert not list(tmp_path.glob("ran-*")), "a test after the failing one ran"


def test_the_suite_loads_the_abort_plugin(pytestconfig):
    assert pytestconfig.pluginmanager.has_plugin("mpi_abort_plugin")


def test_suite_has_a_per_test_timeout(pytestconfig):
    """pytest-timeout is configured for the suite, with the thread method (a hung rank's
    process ends, so mpiexec ends the job)."""
    assert pytestconfig.pluginmanager.has_plugin("timeout")
    assert float(pytestconfig.getini("timeout")) > 0
    assert pytestconfig.getini("timeout_method") == "thread"


def test_a_hung_test_times_out(tmp_path):
    """With the project's configuration, a test that sleeps past ``--timeout`` fails."""
    test = tmp_path / "test_sleeps.py"
    test.write_text("import time\n\n\ndef test_sleeps():\n    time.sleep(60)\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir",
         str(tmp_path), "-p", "no:cacheprovider", "--timeout", "2", str(test)],
        cwd=tmp_path, env=_pytest_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "Timeout" in proc.stdout + proc.stderr
