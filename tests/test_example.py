"""The main job, run as users run it (a real mpiexec launch) and in-process on the test ranks."""
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from conftest import load_script

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
    """Run as a user runs it: the JSON and the plot land together in ``-out``'s default under
    the working directory, and the committed results stay as they were."""
    committed = {p: p.read_bytes() for p in (ROOT / "benchmarks" / "results" / "main_job").iterdir()}
    cmd = ["mpiexec", "-n", "2", sys.executable, str(EXAMPLE), "-problem", "poisson1d",
           "-n", "511", "-subdomains", "8", "-methods", "none,jacobi,asm,twolevel,gamg"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "| twolevel |" in proc.stdout
    out = tmp_path / "runs" / "main_job" / "main_job_poisson1d.json"
    png = out.with_suffix(".png")
    assert {p: p.read_bytes() for p in committed} == committed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]
    _check_report(json.loads(out.read_text()), 2, ["none", "jacobi", "asm", "twolevel", "gamg"],
                  "poisson1d")
    assert png.stat().st_size > 10_000


def test_example_bad_option_is_a_clear_error(tmp_path):
    cmd = ["mpiexec", "-n", "2", sys.executable, str(EXAMPLE), "-methods", "asm,amg",
           "-out", ""]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode != 0
    assert "unknown method(s) ['amg']" in proc.stderr


@pytest.mark.mpi
def test_example_in_process(tmp_path):
    comm = MPI.COMM_WORLD
    out = comm.bcast(str(tmp_path / "inproc"), root=0)
    mod = load_script("examples/poisson.py", "poisson_example")
    methods = ["asm", "twolevel"]
    report = mod.main(["-problem", "poisson2d", "-n", "31", "-subdomains", "16",
                       "-methods", ",".join(methods), "-out", out, "-plot", "0"])[0]
    _check_report(report, comm.Get_size(), methods, "poisson2d")
    comm.Barrier()
    assert sorted(p.name for p in Path(out).iterdir()) == ["main_job_poisson2d.json"]
    saved = json.load(open(Path(out) / "main_job_poisson2d.json"))
    assert saved["results"][1]["iterations"] == report["results"][1]["iterations"]


@pytest.mark.mpi
def test_example_quick_form_is_the_full_job_made_small():
    """``-quick`` (what CI runs before the tests) keeps the problems and methods and shrinks
    the grid and the number of subdomains."""
    mod = load_script("examples/poisson.py", "poisson_example")
    report = mod.main(["-quick", "1", "-problem", "poisson2d", "-methods", "asm,twolevel",
                       "-out", ""])[0]
    assert report["problem"]["grid"] == [mod.QUICK_N[2]] * 2 and report["subdomains"] == 16
    _check_report(report, MPI.COMM_WORLD.Get_size(), ["asm", "twolevel"], "poisson2d")


@pytest.mark.mpi
def test_example_classical_coarse_spaces_on_a_random_field():
    """The example's ddlearn-PC methods on a seeded high-contrast field: all converge, the
    spectral coarse space (with the hats) beats the classical hats."""
    mod = load_script("examples/poisson.py", "poisson_example")
    methods = ["asm", "twolevel", "nicolaides", "gdsw", "spectral"]
    report = mod.main(["-problem", "random_channels", "-contrast", "1e6", "-field_seed", "2",
                       "-n", "47", "-subdomains", "16", "-methods", ",".join(methods),
                       "-spectral_with_hats", "1", "-out", ""])[0]
    _check_report(report, MPI.COMM_WORLD.Get_size(), methods, "random_channels")
    it = {r["method"]: r["iterations"] for r in report["results"]}
    assert it["spectral"] < it["twolevel"], it


@pytest.mark.mpi
def test_example_learned_methods_train_then_load_from_cache(tmp_path):
    comm = MPI.COMM_WORLD
    out = comm.bcast(str(tmp_path / "learned"), root=0)
    cache = comm.bcast(str(tmp_path / "cache"), root=0)
    mod = load_script("examples/poisson.py", "poisson_example")
    args = ["-problem", "poisson1d", "-n", "255", "-subdomains", "8", "-cache", cache,
            "-methods", "twolevel,attention,learned_insitu", "-learned_insitu_steps", "4",
            "-learned_insitu_eval_every", "2", "-attention_steps", "10", "-out", out, "-plot", "0"]
    first = {r["method"]: r for r in mod.main(args)[0]["results"]}
    second = {r["method"]: r for r in mod.main(args)[0]["results"]}
    comm.Barrier()  # rank 0 writes the JSON after the others return
    saved = {r["method"]: r for r in
             json.load(open(Path(out) / "main_job_poisson1d.json"))["results"]}
    assert first["learned_insitu"]["train_s"] > 0 and first["attention"]["train_s"] > 0
    assert second["learned_insitu"]["train_s"] == 0 and second["attention"]["train_s"] == 0
    for res in (first, second, saved):
        assert res["learned_insitu"]["converged"] and res["learned_insitu"]["rnorm_true"] < 1e-8
        assert res["learned_insitu"]["iterations"] <= res["twolevel"]["iterations"] + 1
        assert "reason" in res["attention"] and res["twolevel"]["train_s"] == 0
    assert second["learned_insitu"]["iterations"] == first["learned_insitu"]["iterations"]


def test_cache_names_carry_the_checkpoint_format(monkeypatch):
    """A cache filled under an earlier checkpoint format is never read (a user's old
    ``.ddlearn-cache`` does not stop the main job): the format's version is part of the key
    that names every cached model."""
    from ddlearn.decomposition.problems import make_problem
    from ddlearn.harness import learned
    from ddlearn.harness.methods import Case
    from ddlearn.nn import checkpoint

    case = Case.build(make_problem("poisson1d", 63), 4, 2)
    try:
        now = learned.cache_path(case, "attention", {"steps": 10}, "cache")
        assert learned.cache_path(case, "attention", {"steps": 10}, "cache") == now
        monkeypatch.setattr(checkpoint, "VERSION", checkpoint.VERSION - 1)
        assert learned.cache_path(case, "attention", {"steps": 10}, "cache") != now
    finally:
        case.destroy()


@pytest.mark.mpi
def test_example_pretrained_learned_coarse_space_on_unseen_fields(tmp_path):
    """The default two tables (Poisson, then an unseen random channels field) with the shipped
    model: no training, learned no worse than the hats on Poisson and far better on channels."""
    comm = MPI.COMM_WORLD
    out = comm.bcast(str(tmp_path / "two"), root=0)
    mod = load_script("examples/poisson.py", "poisson_example")
    methods = ["asm", "twolevel", "spectral", "learned"]
    reports = mod.main(["-n", "127", "-subdomains", "16", "-methods", ",".join(methods),
                        "-out", out, "-plot", "0"])
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
        assert json.loads((Path(out) / f"main_job_{name}.json").read_text())["ranks"] == \
            comm.size


# -- 3D ------------------------------------------------------------------------------------

def _load_example(path=EXAMPLE, name="poisson_example"):
    return load_script(Path(path).relative_to(ROOT), name)


@pytest.mark.mpi
def test_example_3d_problems_in_process():
    """The main job on 3D Poisson and a 3D high-contrast inclusions field: every classical
    method converges; the spectral coarse space beats one level on the inclusions."""
    mod = _load_example()
    methods = ["asm", "twolevel", "nicolaides", "gdsw", "spectral", "gamg"]
    reports = mod.main(["-problem", "poisson3d,random_inclusions3d", "-n", "16",
                        "-subdomains", "27", "-methods", ",".join(methods), "-out", ""])
    assert [r["problem"]["name"] for r in reports] == ["poisson3d", "random_inclusions3d"]
    its = []
    for report in reports:
        assert report["problem"]["grid"] == [16, 16, 16]
        assert report["problem"]["boxes"] == [3, 3, 3] and report["problem"]["n0"] == 8
        assert report["problem"]["overlap"] == 1  # the 3D default
        assert [r["method"] for r in report["results"]] == methods
        for r in report["results"]:
            assert r["converged"] is True and r["rnorm_true"] < 1e-8, r
        its.append({r["method"]: r["iterations"] for r in report["results"]})
    assert its[0]["twolevel"] <= its[0]["asm"], its
    assert its[1]["spectral"] < 0.75 * its[1]["asm"], its
    assert reports[1]["problem"]["contrast"] == 1e6 and reports[1]["problem"]["seed"] == 200000


@pytest.mark.mpi
def test_example_3d_default_size_and_bad_input():
    mod = _load_example()
    report = mod.main(["-problem", "poisson3d", "-subdomains", "8", "-methods", "gamg",
                       "-out", ""])[0]
    assert report["problem"]["grid"] == [mod.DEFAULT_N[3]] * 3 == [32, 32, 32]
    assert report["results"][0]["converged"]
    with pytest.raises(ValueError, match="5 subdomains along x .* N must not exceed"):
        mod.main(["-problem", "poisson3d", "-n", "4", "-subdomains", "125", "-out", ""])
    with pytest.raises(ValueError, match=re.escape("is outside [1, 1e+12]")):
        mod.main(["-problem", "random_channels3d", "-n", "4", "-contrast", "1e13",
                  "-out", ""])
    with pytest.raises(ValueError, match="unknown -problem \\['poisson4d'\\]"):
        mod.main(["-problem", "poisson4d", "-out", ""])


@pytest.mark.mpi
def test_example_3d_learned_methods(tmp_path):
    """The learned methods of the main job train and run on a 3D problem."""
    comm = MPI.COMM_WORLD
    cache = comm.bcast(str(tmp_path / "cache3d"), root=0)
    mod = _load_example()
    report = mod.main(["-problem", "poisson3d", "-n", "8", "-subdomains", "8", "-cache", cache,
                       "-methods", "twolevel,attention-coarse,learned_insitu",
                       "-attention_steps", "4", "-learned_insitu_steps", "2",
                       "-learned_insitu_eval_every", "1", "-out", ""])[0]
    res = {r["method"]: r for r in report["results"]}
    for m in ("twolevel", "attention-coarse", "learned_insitu"):
        assert res[m]["converged"] and res[m]["rnorm_true"] < 1e-8, res[m]
    assert res["attention-coarse"]["train_s"] > 0


@pytest.mark.parametrize("trained,used", [((8, 8), (4, 4, 4)), ((4, 4, 4), (8, 8))])
def test_checkpoint_of_another_dimension_is_refused(tmp_path, trained, used):
    """A paper-form operator trained in 2D is refused for a 3D problem and the reverse, with
    the fix named (64 unknowns either way, so sizes alone would not tell)."""
    from ddlearn.decomposition.problems import Poisson2D, Poisson3D
    from ddlearn.learned.operators import checkpoint
    from ddlearn.nn.operators import SchwarzAttention
    from ddlearn.learned.operators.distributed import DistributedSchwarzAttention
    make = {2: Poisson2D, 3: Poisson3D}
    path = str(tmp_path / f"model{MPI.COMM_WORLD.rank}.pt")
    model = SchwarzAttention(trained, 4, 1, 2, coarse="nicolaides", symmetric=True)
    checkpoint.save(path, model, problem=make[len(trained)](trained[0]).describe())
    with pytest.raises(ValueError, match="train a model for this configuration"):
        checkpoint.load(path, problem=make[len(used)](used[0]).describe())
    with pytest.raises(ValueError, match=re.escape(f"grid {list(trained)}, not {list(used)}: "
                                                   f"train")):
        DistributedSchwarzAttention.load(path, comm=MPI.COMM_SELF, grid=list(used))


# -- the FEM client in 3D ------------------------------------------------------------------

FEM = ROOT / "examples" / "fem_diffusion.py"


@pytest.mark.mpi
def test_fem_client_3d_rows_are_the_serial_system():
    """Each rank assembles only the tetrahedra touching its rows; those rows are the rows of
    the whole system assembled serially."""
    fem = _load_example(FEM, "fem_example")
    from petsc4py import PETSc
    for geometry in ("cube", "ball"):
        rows, b, xyz, (lo, hi), n = fem.system3d(6, "lognormal", 1e6, 1, geometry, 2,
                                                 comm=PETSc.COMM_WORLD)
        full, b_full, xyz_full, whole, n_full = fem.system3d(6, "lognormal", 1e6, 1, geometry, 2)
        assert n == n_full and whole == (0, n) and rows.shape == (hi - lo, n)
        assert MPI.COMM_WORLD.allreduce(hi - lo) == n
        np.testing.assert_allclose(rows.toarray(), full[lo:hi].toarray(), rtol=0,
                                   atol=1e-12 * abs(full).max())
        np.testing.assert_allclose(b, b_full[lo:hi], rtol=1e-13)
        np.testing.assert_array_equal(xyz, xyz_full[lo:hi])
        assert abs(full - full.T).max() <= 1e-12 * abs(full).max()
        if geometry == "ball":  # every node inside the ball of radius 1/2 about the centre
            assert np.linalg.norm(xyz_full - 0.5, axis=1).max() < 0.5


@pytest.mark.mpi
def test_fem_client_3d_converges_with_a_two_level_pc():
    fem = _load_example(FEM, "fem_example")
    base = ["-dim", "3", "-m", "12", "-coefficient", "inclusions", "-contrast", "1e6",
            "-ksp_type", "cg", "-pc_type", "python",
            "-pc_python_type", "ddlearn.pc.TwoLevelSchwarzPC", "-ddlearn_subdomains", "64"]
    runs = {c: fem.main(base + ["-ddlearn_coarse_space", c]) for c in ("none", "gdsw")}
    for r in runs.values():
        assert r["unknowns"] == 11 ** 3 and r["reason"] > 0 and r["rnorm_true"] < 1e-8, runs
    assert runs["gdsw"]["iterations"] < 0.75 * runs["none"]["iterations"], runs
    with pytest.raises(ValueError, match="unknown -coefficient 'stripes' in 3D"):
        fem.main(["-dim", "3", "-m", "4", "-coefficient", "stripes"])
    with pytest.raises(ValueError, match="-dim 4"):
        fem.main(["-dim", "4"])
