"""The main job, run as users run it (a real mpiexec launch) and in-process on the test ranks."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from mpi4py import MPI

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "poisson.py"


def _check_report(report, ranks, methods, problem):
    assert report["ranks"] == ranks
    assert report["problem"]["name"] == problem
    assert [r["method"] for r in report["results"]] == methods
    for r in report["results"]:
        assert set(r) >= {"method", "iterations", "converged", "rnorm_true", "setup_s", "solve_s"}
        assert r["converged"] is True and r["rnorm_true"] < 1e-8
    it = {r["method"]: r["iterations"] for r in report["results"]}
    assert it["twolevel"] < it["asm"]


def test_example_under_mpiexec(tmp_path):
    out, png = tmp_path / "run.json", tmp_path / "run.png"
    cmd = ["mpiexec", "-n", "2", sys.executable, str(EXAMPLE), "-problem", "poisson1d",
           "-n", "511", "-subdomains", "8", "-methods", "none,jacobi,asm,twolevel,gamg",
           "-json", str(out), "-plot", str(png)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "| twolevel |" in proc.stdout
    _check_report(json.loads(out.read_text()), 2, ["none", "jacobi", "asm", "twolevel", "gamg"],
                  "poisson1d")
    assert png.stat().st_size > 10_000


def test_example_bad_option_is_a_clear_error(tmp_path):
    cmd = ["mpiexec", "-n", "2", sys.executable, str(EXAMPLE), "-methods", "asm,amg",
           "-json", "", "-plot", ""]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode != 0
    assert "unknown method(s) ['amg']" in proc.stderr


@pytest.mark.mpi
def test_example_in_process(tmp_path):
    comm = MPI.COMM_WORLD
    out = comm.bcast(str(tmp_path / "inproc.json"), root=0)
    spec = importlib.util.spec_from_file_location("poisson_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    methods = ["asm", "twolevel"]
    report = mod.main(["-problem", "poisson2d", "-n", "31", "-subdomains", "16",
                       "-methods", ",".join(methods), "-json", out, "-plot", ""])[0]
    _check_report(report, comm.Get_size(), methods, "poisson2d")
    comm.Barrier()
    assert json.load(open(out))["results"][1]["iterations"] == report["results"][1]["iterations"]


@pytest.mark.mpi
def test_example_classical_coarse_spaces_on_a_random_field():
    """The example's ddlearn-PC methods on a seeded high-contrast field: all converge, the
    spectral coarse space (with the hats) beats the classical hats."""
    spec = importlib.util.spec_from_file_location("poisson_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    methods = ["asm", "twolevel", "nicolaides", "gdsw_sub", "spectral"]
    report = mod.main(["-problem", "random_channels", "-contrast", "1e6", "-field_seed", "2",
                       "-n", "47", "-subdomains", "16", "-methods", ",".join(methods),
                       "-spectral_with_hats", "1", "-json", "", "-plot", ""])[0]
    _check_report(report, MPI.COMM_WORLD.Get_size(), methods, "random_channels")
    it = {r["method"]: r["iterations"] for r in report["results"]}
    assert it["spectral"] < it["twolevel"], it


@pytest.mark.mpi
def test_example_learned_methods_train_then_load_from_cache(tmp_path):
    comm = MPI.COMM_WORLD
    out = comm.bcast(str(tmp_path / "learned.json"), root=0)
    cache = comm.bcast(str(tmp_path / "cache"), root=0)
    spec = importlib.util.spec_from_file_location("poisson_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    args = ["-problem", "poisson1d", "-n", "255", "-subdomains", "8", "-cache", cache,
            "-methods", "twolevel,attention,learned_insitu", "-learned_insitu_steps", "4",
            "-learned_insitu_eval_every", "2", "-attention_steps", "10", "-json", out, "-plot", ""]
    first = {r["method"]: r for r in mod.main(args)[0]["results"]}
    second = {r["method"]: r for r in mod.main(args)[0]["results"]}
    comm.Barrier()  # rank 0 writes the JSON after the others return
    saved = {r["method"]: r for r in json.load(open(out))["results"]}
    assert first["learned_insitu"]["train_s"] > 0 and first["attention"]["train_s"] > 0
    assert second["learned_insitu"]["train_s"] == 0 and second["attention"]["train_s"] == 0
    for res in (first, second, saved):
        assert res["learned_insitu"]["converged"] and res["learned_insitu"]["rnorm_true"] < 1e-8
        assert res["learned_insitu"]["iterations"] <= res["twolevel"]["iterations"] + 1
        assert "reason" in res["attention"] and res["twolevel"]["train_s"] == 0
    assert second["learned_insitu"]["iterations"] == first["learned_insitu"]["iterations"]


@pytest.mark.mpi
def test_example_pretrained_learned_coarse_space_on_unseen_fields(tmp_path):
    """The default two tables (Poisson, then an unseen random channels field) with the shipped
    model: no training, learned no worse than the hats on Poisson and far better on channels."""
    comm = MPI.COMM_WORLD
    out = comm.bcast(str(tmp_path / "two.json"), root=0)
    spec = importlib.util.spec_from_file_location("poisson_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    methods = ["asm", "twolevel", "spectral", "learned"]
    reports = mod.main(["-n", "127", "-subdomains", "16", "-methods", ",".join(methods),
                        "-json", out, "-plot", ""])
    assert [r["problem"]["name"] for r in reports] == ["poisson2d", "random_channels"]
    assert reports[1]["problem"]["seed"] == 200000
    its = []
    for report, name in zip(reports, ("poisson2d", "random_channels")):
        _check_report(report, comm.Get_size(), methods, name)
        its.append({r["method"]: r["iterations"] for r in report["results"]})
        assert all(r["train_s"] == 0 for r in report["results"])
    assert its[0]["learned"] <= its[0]["twolevel"], its
    assert its[1]["learned"] <= 0.75 * its[1]["twolevel"], its
    comm.Barrier()
    for name in ("poisson2d", "random_channels"):
        assert json.loads((Path(out).parent / f"two_{name}.json").read_text())["ranks"] == \
            comm.size
