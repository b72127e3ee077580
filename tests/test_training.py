"""Training, divergence handling, checkpoints and resume, on real (tiny) runs."""
import math
import os

import numpy as np
import pytest
import torch

from ddlearn.decomposition.atomic import atomic_write
from ddlearn.learned.operators import checkpoint
from ddlearn.nn.operators import GlobalAttention, SchwarzAttention
from ddlearn.decomposition.problems import Poisson1D, Poisson2D, make_problem
from ddlearn.learned.operators.data import fourier_rhs, make_splits
from ddlearn.learned.operators.training import evaluate, train
from ddlearn.nn.trainer import TrainConfig


@pytest.fixture(scope="module")
def small():
    p = Poisson1D(63)
    return p, make_splits(p, 256, 32, 64, modes=16, seed=0)


def cfg(**kw):
    base = dict(steps=300, batch_size=32, lr=1e-2, lr_final=1e-4, eval_every=10, progress=False)
    base.update(kw)
    return TrainConfig(**base)


def test_fourier_data_and_exact_targets():
    p = Poisson2D(9)
    s = make_splits(p, 4, 2, 2, modes=3, decay=1.0)
    A = p.matrix()
    np.testing.assert_allclose(A @ s.train.U.numpy().T, s.train.F.numpy().T, atol=1e-10)
    F1 = fourier_rhs(Poisson1D(31), 3, 4, rng=np.random.default_rng(5))
    F2 = fourier_rhs(Poisson1D(31), 3, 4, rng=np.random.default_rng(5))
    np.testing.assert_array_equal(F1, F2)
    # 3D: the data varies along every axis, and a rank's rows equal the serial ones
    p3 = make_problem("poisson3d", 5)
    F3 = fourier_rhs(p3, 4, 3)
    planes = F3.reshape(4, 5, 5, 5)  # [count, z, y, x]
    assert np.ptp(planes.std(axis=(2, 3)), axis=1).min() > 0.1
    np.testing.assert_allclose(fourier_rhs(p3, 4, 3, rows=np.arange(30, 70)), F3[:, 30:70])


def test_tiny_training_reaches_stated_error(small):
    p, s = small
    m = SchwarzAttention((63,), 4, 2, 4, seed=0)
    before = evaluate(m, s.test)
    res = train(m, s, cfg(), problem=p.describe())
    assert before > 0.5
    assert res.final_test < 2e-2, res.final_test  # stated: below 2 % relative test error
    assert res.history.val_error[-1] <= res.history.val_error[0]
    assert res.final_test == pytest.approx(evaluate(m, s.test))


def test_checkpoint_roundtrip_and_refusal(small, tmp_path):
    p, s = small
    path = str(tmp_path / "m.pt")
    m = SchwarzAttention((63,), 4, 2, 3, symmetric=True, seed=2)
    train(m, s, cfg(steps=40, checkpoint=path), problem=p.describe())
    loaded, ck = checkpoint.load(path, problem=p.describe(), expect={"N": 4, "overlap": 2})
    assert loaded.config == m.config and ck["config"]["coarse"] == "hats"
    F = s.test.F[:5]
    assert torch.equal(loaded(F), m(F))
    with pytest.raises(ValueError, match=r"problem grid \[63\], not \[255\]"):
        checkpoint.load(path, problem=Poisson1D(255).describe())
    with pytest.raises(ValueError, match="made for N 4, not 8"):
        checkpoint.load(path, expect={"N": 8})
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        checkpoint.load(str(tmp_path / "missing.pt"))


def test_crash_during_write_keeps_previous_checkpoint(small, tmp_path):
    p, _ = small
    path = str(tmp_path / "m.pt")
    m = GlobalAttention(63, 4)
    checkpoint.save(path, m, problem=p.describe())

    def crash(f):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt("killed mid-write")

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, crash)
    loaded, _ = checkpoint.load(path)
    assert torch.equal(loaded.Q, m.Q)
    assert [f for f in os.listdir(tmp_path) if f.startswith(".tmp")] == []


def test_divergence_stops_cleanly_with_best_state(small):
    p, s = small
    m = GlobalAttention(63, 8, seed=1)
    res = train(m, s, cfg(lr=1e3, lr_final=1e3, steps=200, eval_every=1))
    assert res.stopped.startswith("diverged at step"), res.stopped
    assert res.steps < 200
    assert math.isfinite(res.final_test)
    assert all(torch.isfinite(q).all() for q in m.parameters())


def test_early_stopping(small):
    p, s = small
    res = train(GlobalAttention(63, 2), s, cfg(steps=3000, patience=3, lr=1e-2))
    assert res.stopped.startswith("early stop") and res.steps < 3000


def test_resume_equals_uninterrupted(small, tmp_path):
    p, s = small
    straight = SchwarzAttention((63,), 4, 2, 3, seed=7)
    full = train(straight, s, cfg(steps=120), problem=p.describe())
    path = str(tmp_path / "r.pt")
    first = SchwarzAttention((63,), 4, 2, 3, seed=7)
    part = train(first, s, cfg(steps=120, checkpoint=path), problem=p.describe(), until=60)
    assert part.stopped == "paused at step 60"
    resumed = SchwarzAttention((63,), 4, 2, 3, seed=99)  # different init: all state comes from disk
    done = train(resumed, s, cfg(steps=120, checkpoint=path), problem=p.describe(), resume=path)
    assert done.history.step == full.history.step
    np.testing.assert_allclose(done.history.val_error, full.history.val_error, rtol=1e-10)
    for a, b in zip(resumed.parameters(), straight.parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-14)
    with pytest.raises(ValueError, match="cannot resume"):
        train(SchwarzAttention((63,), 4, 2, 2), s, cfg(steps=120), problem=p.describe(), resume=path)


def test_fit_scale_gives_the_least_squares_size():
    from ddlearn.learned.operators.training import fit_scale

    p = Poisson1D(127)
    for symmetric in (True, False):
        model = SchwarzAttention(p.grid, 4, 2, 2, symmetric=symmetric, seed=3)
        data = make_splits(p, 32, 4, 4, modes=16).train
        before = model(data.F).detach()
        alpha = fit_scale(model, data)
        after = model(data.F).detach()
        assert alpha > 0 or not symmetric
        np.testing.assert_allclose(after, alpha * before, rtol=1e-10, atol=1e-14)
        # alpha is the minimiser of ||alpha M f - u||: nudging it either way does worse
        err = lambda a: float(((a * before - data.U) ** 2).sum())  # noqa: E731
        assert err(alpha) <= min(err(1.01 * alpha), err(0.99 * alpha), err(1.0))


def test_checkpoint_config_must_be_plain(tmp_path):
    """A config holding a callable could not be read back with weights_only: refused at save
    time, nothing written."""
    from ddlearn.nn import checkpoint as nn_checkpoint

    path = str(tmp_path / "m.pt")
    with pytest.raises(ValueError, match=r"model config\['activation'\].*name"):
        nn_checkpoint.save(path, {"kind": "x", "activation": torch.nn.functional.gelu}, {})
    assert os.listdir(tmp_path) == []


def test_retired_checkpoint_is_refused_then_converted(small, tmp_path):
    """A checkpoint of the retired layout is refused with the command that converts it and
    nothing is written; the command converts it once (its record's SHA-256 follows)."""
    import json

    from ddlearn.nn import checkpoint as nn_checkpoint

    p, s = small
    m = SchwarzAttention((63,), 4, 2, 3, seed=2)
    path = str(tmp_path / "old.pt")
    torch.save({"format": "ddlearn-checkpoint", "version": 1, "config": m.config,
                "state": m.state_dict(), "problem": p.describe(), "step": 7}, path)
    with open(path + ".json", "w") as f:
        json.dump({"sha256": nn_checkpoint.file_hash(path), "bytes": os.path.getsize(path)}, f)
    before = {f: open(tmp_path / f, "rb").read() for f in os.listdir(tmp_path)}
    with pytest.raises(ValueError, match=f"python -m ddlearn.nn.checkpoint convert {path}"):
        checkpoint.load(path, problem=p.describe())
    assert {f: open(tmp_path / f, "rb").read() for f in os.listdir(tmp_path)} == before
    nn_checkpoint.main(["convert", path])
    loaded, ck = checkpoint.load(path, problem=p.describe())
    assert ck["step"] == 7 and torch.equal(loaded(s.test.F[:3]), m(s.test.F[:3]))
    record = json.load(open(path + ".json"))
    assert record["sha256"] == nn_checkpoint.file_hash(path)
    assert record["bytes"] == os.path.getsize(path)
    assert nn_checkpoint.convert(path) is False  # already current
