"""Operator-learning datasets: the format (ddlearn.nn.data) and the generator
(ddlearn.harness.datasets) on small grids, serial."""
import json
import os

import numpy as np
import pytest
import scipy.sparse.linalg as spla
from mpi4py import MPI

from ddlearn.decomposition.problems import Diffusion
from ddlearn.harness import datasets
from ddlearn.nn.data import (content_hash, dataset_files, grid_coords, load_dataset,
                             save_dataset)

SELF = MPI.COMM_SELF


def _make(tmp_path, **kw):
    opts = datasets.options(**{"family": "darcy", "fine": 17, "resolutions": "17,9,5",
                               "train": 3, "test": 1, **kw})
    paths = datasets.generate(opts, str(tmp_path), SELF, progress=False)
    return opts, paths


def test_darcy_field_takes_two_values_and_the_grf_has_zero_mean():
    seen = set()
    for seed in range(4):
        a = datasets.darcy_coefficient(33, seed)
        assert a.shape == (33, 33)
        seen |= set(np.unique(a).tolist())
        assert np.mean(a == 12.0) > 0.05 and np.mean(a == 3.0) > 0.05
        # the zero KL mode is dropped: the (orthonormal DCT) field has mean zero
        g = datasets.grf(33, np.random.default_rng(seed))
        assert abs(g.mean()) < 1e-12 * np.abs(g).max()
    assert seen == {3.0, 12.0}
    # the same seed, the same field
    assert np.array_equal(datasets.darcy_coefficient(33, 7), datasets.darcy_coefficient(33, 7))


def test_arithmetic_faces_match_a_hand_computed_example_and_differ_from_harmonic():
    rng = np.random.default_rng(1)
    k = rng.choice([3.0, 12.0], size=(5, 5))  # 3x3 interior points, h = 1/4
    A = Diffusion(3, k, 2, faces="arithmetic").matrix().toarray()
    H = Diffusion(3, k, 2).matrix().toarray()
    inv_h2 = 16.0
    # the centre unknown (ix, iy) = (1, 1), row 4, at kappa[2, 2]
    c = k[2, 2]
    west, east, south, north = k[2, 1], k[2, 3], k[1, 2], k[3, 2]
    assert A[4, 4] == pytest.approx(inv_h2 * ((c + west) + (c + east) + (c + south)
                                              + (c + north)) / 2, rel=1e-14)
    assert A[4, 3] == pytest.approx(-inv_h2 * (c + west) / 2, rel=1e-14)
    assert A[4, 5] == pytest.approx(-inv_h2 * (c + east) / 2, rel=1e-14)
    assert A[4, 1] == pytest.approx(-inv_h2 * (c + south) / 2, rel=1e-14)
    assert A[4, 7] == pytest.approx(-inv_h2 * (c + north) / 2, rel=1e-14)
    # a corner unknown (0, 0) at kappa[1, 1]: boundary faces count on the diagonal only
    c = k[1, 1]
    assert A[0, 0] == pytest.approx(inv_h2 * (4 * c + k[1, 0] + k[1, 2] + k[0, 1] + k[2, 1]) / 2,
                                    rel=1e-14)
    assert np.allclose(A, A.T) and np.all(np.linalg.eigvalsh(A) > 0)
    # harmonic and arithmetic means agree on equal values only
    assert not np.allclose(A, H)
    same = Diffusion(3, np.full((5, 5), 3.0), 2, faces="arithmetic").matrix()
    assert np.array_equal(same.toarray(), Diffusion(3, np.full((5, 5), 3.0), 2).matrix().toarray())
    with pytest.raises(ValueError, match="faces"):
        Diffusion(3, k, 2, faces="geometric")


def test_darcy_dataset_solves_the_discrete_problem_and_subsamples(tmp_path):
    opts, paths = _make(tmp_path)
    assert [os.path.basename(p).split("_")[1] for p in paths] == ["17", "9", "5"]
    fine, d9, d5 = (load_dataset(p) for p in paths)
    assert fine.coefficient.shape == (4, 17, 17) and d5.solution.shape == (4, 5, 5)
    for d in (fine, d9, d5):
        assert set(np.unique(d.coefficient).tolist()) <= {3.0, 12.0}
        assert d.record["sha256"] == content_hash({"coefficient": d.coefficient,
                                                   "solution": d.solution,
                                                   "coords": d.coords})
        assert len(d.train) == 3 and len(d.test) == 1
        assert np.shares_memory(d.train.solution, d.solution)
    # an independent direct solve of the fine problem (arithmetic faces, f = 1)
    for s in range(4):
        p = Diffusion(15, fine.coefficient[s], 2, faces="arithmetic")
        u = spla.spsolve(p.matrix().tocsc(), np.ones(p.n))
        stored = fine.solution[s]
        assert np.all(stored[0] == 0) and np.all(stored[:, -1] == 0)
        err = np.linalg.norm(stored[1:-1, 1:-1].ravel() - u) / np.linalg.norm(u)
        assert err < 1e-8, err
    # one fine solve, every resolution: every r-th point of the fine grid
    for d, r in ((d9, 2), (d5, 4)):
        assert d.record["subsample"] == r and d.record["fine"] == 17
        assert np.array_equal(d.coefficient, fine.coefficient[:, ::r, ::r])
        assert np.array_equal(d.solution, fine.solution[:, ::r, ::r])
    # the coordinates: x fastest, the interior tokens where the problem puts its unknowns
    assert np.array_equal(fine.coords[:3], [[0, 0], [1 / 16, 0], [2 / 16, 0]])
    interior = fine.coords.reshape(17, 17, 2)[1:-1, 1:-1].reshape(-1, 2)
    assert np.allclose(interior, Diffusion(15, fine.coefficient[0], 2).coordinates())
    rec = d9.record
    assert rec["seed"] == 0 and rec["solver"]["rtol"] == 1e-10
    assert rec["true_relative_residual"]["max"] < 1e-9
    assert len(rec["iterations"]["per_sample"]) == 4
    assert rec["command"].startswith("python -m ddlearn.harness.datasets --family darcy")


def test_regeneration_is_bit_identical_and_high_contrast_sets(tmp_path):
    _, (a,) = _make(tmp_path / "a", resolutions="9")
    _, (b,) = _make(tmp_path / "b", resolutions="9")
    ra, rb = (json.load(open(dataset_files(p)[1])) for p in (a, b))
    assert ra["sha256"] == rb["sha256"]
    for family, dim, fine in (("inclusions", 2, 18), ("channels", 3, 10)):
        opts = datasets.options(family, dim, fine=fine, train=2, test=1, contrast=1e3)
        (path,) = datasets.generate(opts, str(tmp_path / family), SELF, progress=False)
        d = load_dataset(path)
        assert d.coefficient.shape == (3,) + (fine,) * dim
        assert d.coefficient.min() >= 1.0 and d.coefficient.max() == 1e3
        assert d.record["generator"]["faces"] == "harmonic"
        assert d.coords.shape == (fine ** dim, dim)


def test_modified_or_missing_dataset_is_refused(tmp_path):
    _, (path,) = _make(tmp_path, resolutions="5")
    npz, rec = dataset_files(path)
    with np.load(npz) as z:
        arrays = {k: z[k].copy() for k in z.files}
    arrays["solution"][0, 2, 2] += 1e-12
    with open(npz, "wb") as f:
        np.savez(f, **arrays)
    with pytest.raises(ValueError, match="modified or corrupted.*regenerate it with: python -m "
                                         "ddlearn.harness.datasets --family darcy"):
        load_dataset(path)
    load_dataset(path, verify=False)  # the shapes are fine
    os.unlink(npz)
    with pytest.raises(ValueError, match="missing"):
        load_dataset(path)
    os.unlink(rec)
    with pytest.raises(ValueError, match="record .* is missing"):
        load_dataset(path)


def test_save_refuses_inconsistent_arrays_and_writes_nothing(tmp_path):
    rng = np.random.default_rng(0)
    good = {"coefficient": rng.random((3, 4, 5)), "solution": rng.random((3, 4, 5)),
            "coords": grid_coords((4, 5))}
    path = str(tmp_path / "x")
    for arrays, record, what in (
            ({**good, "solution": rng.random((3, 4, 4))}, {"train": 2, "test": 1}, "shapes"),
            ({**good, "coords": grid_coords((5, 4))[:, ::-1][:7]}, {"train": 2, "test": 1},
             "coords"),
            (good, {"train": 2, "test": 2}, "train"),
            ({**good, "coefficient": good["coefficient"].astype(np.float32)},
             {"train": 2, "test": 1}, "float64"),
            ({k: v for k, v in good.items() if k != "coords"}, {"train": 2, "test": 1}, "coords")):
        with pytest.raises(ValueError, match=what):
            save_dataset(path, arrays, record)
    assert os.listdir(tmp_path) == []
    save_dataset(path, good, {"train": 2, "test": 1, "command": "c"})
    assert sorted(os.listdir(tmp_path)) == ["x.json", "x.npz"]


@pytest.mark.parametrize("kw,match", [
    ({"family": "lognormal"}, "--family 'lognormal'.*darcy, channels, inclusions"),
    ({"family": "darcy", "fine": 169, "resolutions": "85,50"}, "--resolutions .*85,50.*50.*not "
                                                               "reachable from --fine 169.*29"),
    ({"family": "channels", "contrast": 1e6}, "--contrast 1e\\+06 is outside \\[1, 10000\\]"),
    ({"family": "darcy", "contrast": 10.0}, "--contrast is for the high-contrast"),
    ({"family": "darcy", "dim": 4}, "--dim 4"),
    ({"family": "inclusions", "train": 0}, "--train 0"),
])
def test_bad_options_raise_before_any_work(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        datasets.options(**kw)
    # the command line: an error naming the option, nothing written
    argv = ["--out", str(tmp_path / "out")]
    for key, value in kw.items():
        argv += [f"--{key}", str(value)]
    with pytest.raises(SystemExit):
        datasets.main(argv, SELF)
    assert not os.path.exists(tmp_path / "out")
    with pytest.raises(ValueError, match=match):
        datasets.ensure_dataset(kw.pop("family"), kw.pop("dim", 2), 5, str(tmp_path / "out"),
                                SELF, **kw)
    assert not os.path.exists(tmp_path / "out")


def test_ensure_dataset_reuses_a_verified_cache_and_remakes_a_bad_one(tmp_path):
    kw = dict(fine=9, resolutions=[9], train=2, test=1, contrast=100.0)
    path = datasets.ensure_dataset("inclusions", 2, 5, str(tmp_path), SELF, progress=False, **kw)
    npz, rec = dataset_files(path)
    assert os.path.basename(path).startswith("inclusions2d_5_")
    first = load_dataset(path).record
    assert first["resolution"] == 5 and first["subsample"] == 2
    # the 9-point set was made by the same solves
    assert len([f for f in os.listdir(tmp_path) if f.endswith(".npz")]) == 2
    mtime = os.stat(rec).st_mtime_ns
    again = datasets.ensure_dataset("inclusions", 2, 5, str(tmp_path), SELF, progress=False, **kw)
    assert again == path and os.stat(rec).st_mtime_ns == mtime
    # other options: another dataset beside it
    other = datasets.ensure_dataset("inclusions", 2, 5, str(tmp_path), SELF, progress=False,
                                    **{**kw, "contrast": 10.0})
    assert other != path
    # a tampered cache is made again, to the same content
    with open(npz, "r+b") as f:
        f.seek(-100, os.SEEK_END)
        f.write(b"\x01" * 8)
    datasets.ensure_dataset("inclusions", 2, 5, str(tmp_path), SELF, progress=False, **kw)
    assert load_dataset(path).record["sha256"] == first["sha256"]


def test_command_line_writes_to_the_cache_folder_of_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("DDLEARN_DATA", str(tmp_path))
    argv = ["--family", "channels", "--fine", "9", "--train", "1", "--test", "1", "--quiet"]
    (path,) = datasets.main(argv, SELF)
    assert os.path.dirname(path) == str(tmp_path)
    assert load_dataset(path).record["command"] == "python -m ddlearn.harness.datasets " + \
        " ".join(datasets.command_line(datasets.options("channels", fine=9, train=1, test=1)))
    # a second call finds it cached and verified
    assert datasets.main(argv, SELF) == [path]
