"""The native side under a real mpiexec: the plugin (export a model, run the plain C KSP program
with `-pc_type ddlearn`, compare with the Python path; bad files fail clearly), and the plain C
client selecting the Python PC (`-python`, with PETSC_DIR set; what fails without either)."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import petsc
import pytest
from petsc4py import PETSc

from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build"
LIB, CLIENT = BUILD / "libddlearn_petsc.so", BUILD / "c_client"
# the reference iterations were counted with these (make_test_model.py)
REFERENCE_KSP = ["-ksp_type", "cg", "-ksp_rtol", "1e-8", "-ksp_norm_type", "unpreconditioned"]
PYTHON_PC = ["-ksp_type", "cg", "-ksp_rtol", "1e-8", "-ksp_norm_type", "unpreconditioned",
             "-pc_type", "python", "-pc_python_type", "ddlearn.pc.TwoLevelSchwarzPC"]


def _run(ranks, *options):
    if not (LIB.exists() and CLIENT.exists()):
        pytest.fail("the native plugin is not built: run scripts/setup.sh (it builds build/)")
    cmd = ["mpiexec", "-n", str(ranks), str(CLIENT), "-n", "31", *REFERENCE_KSP,
           "-dll_append", str(LIB), "-pc_type", "ddlearn", *map(str, options)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    out = tmp_path_factory.mktemp("native")
    mod = load_script("solvers/native/make_test_model.py")
    mod.main(str(out))
    return out


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_native_pc_matches_python(model, ranks):
    expected = int((model / "expect.opts").read_text().split()[1])
    proc = _run(ranks, "-ddlearn_model", model / "model.petsc",
                "-pc_apply_check", model / "check.petsc", "-ksp_view")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "reason CONVERGED_RTOL" in proc.stdout
    # one operator in two implementations (the apply check below): CG converges alike, up to a
    # last iteration that round-off can put on either side of the tolerance
    its = int(proc.stdout.split("iterations ")[1].split()[0])
    assert abs(its - expected) <= 1, (its, expected)
    err = float(proc.stdout.split("apply_error ")[1].split()[0])
    assert err <= 1e-12
    assert "ddlearn learned two-level Schwarz" in proc.stdout and "N = 16 subdomains" in proc.stdout


def test_native_pc_bad_files(model, tmp_path):
    proc = _run(2, "-ddlearn_model", tmp_path / "missing.petsc")
    assert proc.returncode != 0 and "no readable model file" in proc.stdout + proc.stderr
    bad = tmp_path / "v99.petsc"
    viewer = PETSc.Viewer().createBinary(str(bad), "w", comm=PETSc.COMM_SELF)
    v = PETSc.Vec().createWithArray(np.array([20261129.0, 99, 961, 16, 9, 0, 1, 0]),
                                    comm=PETSc.COMM_SELF)
    v.view(viewer)
    v.destroy(), viewer.destroy()
    proc = _run(2, "-ddlearn_model", bad)
    assert proc.returncode != 0 and "export version 99" in proc.stdout + proc.stderr
    proc = subprocess.run(["mpiexec", "-n", "1", str(CLIENT), "-n", "15", "-ksp_type", "cg",
                           "-dll_append", str(LIB), "-pc_type", "ddlearn", "-ddlearn_model",
                           str(model / "model.petsc")], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "was made for n = 961" in proc.stdout + proc.stderr


def _client(ranks, *options, petsc_dir=True):
    if not CLIENT.exists():
        pytest.fail("the C client is not built: run scripts/setup.sh (it builds build/)")
    env = {k: v for k, v in os.environ.items() if k != "PETSC_DIR"}
    if petsc_dir:
        env["PETSC_DIR"] = petsc.get_petsc_dir()
    return subprocess.run(["mpiexec", "-n", str(ranks), str(CLIENT), *map(str, options)],
                          capture_output=True, text=True, timeout=300, env=env)


def test_c_client_selects_the_python_pc_with_python_and_petsc_dir():
    proc = _client(2, "-python", sys.executable, *PYTHON_PC, "-max_residual", "1e-6", "-ksp_view")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "reason CONVERGED_" in proc.stdout
    assert "ddlearn.pc.TwoLevelSchwarzPC" in proc.stdout


def test_c_client_without_python_or_petsc_dir_fails_clearly():
    proc = _client(1, *PYTHON_PC)
    assert proc.returncode != 0
    assert "Unable to find requested PC type python" in proc.stdout + proc.stderr
    proc = _client(1, "-python", sys.executable, *PYTHON_PC, petsc_dir=False)
    assert proc.returncode != 0
    assert "${PETSC_DIR} not found as environmental variable" in proc.stdout + proc.stderr

