"""The native plugin from Python: export a model, run the plain C KSP program with
`-pc_type ddlearn` under a real mpiexec, compare with the Python path; bad files fail clearly."""
import subprocess
from pathlib import Path

import numpy as np
import pytest
from petsc4py import PETSc

from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build"
LIB, PROGRAM = BUILD / "libddlearn_petsc.so", BUILD / "laplace2d"


def _run(ranks, *options):
    if not (LIB.exists() and PROGRAM.exists()):
        pytest.fail("the native plugin is not built: run scripts/setup.sh (it builds build/)")
    cmd = ["mpiexec", "-n", str(ranks), str(PROGRAM), "-n", "31", "-ksp_type", "cg",
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
    assert f"iterations {expected} reason CONVERGED_RTOL" in proc.stdout
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
    proc = subprocess.run(["mpiexec", "-n", "1", str(PROGRAM), "-n", "15", "-ksp_type", "cg",
                           "-dll_append", str(LIB), "-pc_type", "ddlearn", "-ddlearn_model",
                           str(model / "model.petsc")], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "was made for n = 961" in proc.stdout + proc.stderr


def test_native_benchmark_script_runs(tmp_path):
    import json
    import sys

    out = tmp_path / "native.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "native.py"), "--n", "63",
                           "--N", "16", "--ranks", "1,2", "--applies", "5", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r["ranks"] for r in rows] == [1, 2]
    for r in rows:
        # one operator in two implementations (apply error <= 1e-12 above): CG converges alike,
        # up to a last iteration that round-off can put on either side of the tolerance
        assert r["native_iterations"] > 0 and \
            abs(r["python_iterations"] - r["native_iterations"]) <= 1, r
        assert r["python_apply_s"] > 0 and r["native_apply_s"] > 0
