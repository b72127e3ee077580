"""The study's FNO (``ddlearn.harness.fno.GridFNO``, ``neuralop``'s FNO behind the token
interface): the same outputs as a bare ``neuralop.models.FNO`` of the same settings with the
same weights, and a checkpoint that reads back, so that an interrupted run resumes to exactly
the uninterrupted result."""
from dataclasses import replace

import numpy as np
import pytest
import torch
from neuralop.models import FNO

from ddlearn.harness.fno import GridFNO
from ddlearn.nn.checkpoint import load as load_checkpoint
from ddlearn.nn.data import Split, grid_coords
from ddlearn.nn.train import FIT, fit

S = 9
SETTINGS = {"dim": 2, "hidden": 4, "modes": 3, "layers": 2}


def _problem(samples=12, seed=0):
    """u = sin(pi x) sin(pi y) / a on an S x S grid, a in [1, 10]."""
    rng = np.random.default_rng(seed)
    coords = grid_coords((S, S))
    a = 10 ** rng.uniform(0, 1, (samples, S, S))
    bump = (np.sin(np.pi * coords[:, 0]) * np.sin(np.pi * coords[:, 1])).reshape(S, S)
    return coords, Split(a[:8], bump / a[:8]), Split(a[8:], bump / a[8:])


def _model(coords, seed=1):
    torch.manual_seed(seed)
    m = GridFNO(**SETTINGS)
    m.use_mesh(coords)
    return m


def test_same_outputs_as_a_bare_neuralop_fno():
    coords = grid_coords((S, S + 2))  # ny = S, nx = S + 2: token t = ix + nx iy
    ours = _model(coords)
    bare = FNO(n_modes=(SETTINGS["modes"],) * 2, hidden_channels=SETTINGS["hidden"],
               in_channels=1, out_channels=1, n_layers=SETTINGS["layers"])
    missing, unexpected = bare.load_state_dict(
        {k.removeprefix("fno."): v for k, v in ours.state_dict().items()})
    assert not missing and not unexpected
    fields = torch.randn(3, len(coords), 1)
    want = bare(fields.reshape(3, 1, S, S + 2))  # [batch, channel, iy, ix]
    got = ours(fields, torch.as_tensor(coords))
    assert got.shape == (3, len(coords), 1)
    torch.testing.assert_close(got.detach(), want.reshape(3, -1, 1).detach(), rtol=0, atol=0)


def test_state_holds_tensors_only():
    """``neuralop``'s ``_metadata`` (its constructor's arguments, the activation function among
    them) stays out: a checkpoint is read with ``weights_only=True``."""
    state = _model(grid_coords((S, S))).state_dict()
    assert "_metadata" not in state
    assert all(isinstance(v, torch.Tensor) for v in state.values())


def test_interrupted_run_resumes_to_the_uninterrupted_result(tmp_path):
    """Two epochs in one go == one epoch, an interruption, and the second resumed from the
    checkpoint."""
    coords, train, test = _problem()
    config = replace(FIT, epochs=2, batch_size=4, lr=3e-3, seed=1)

    def stop(entry):
        if entry["epoch"] == 1:
            raise KeyboardInterrupt

    whole_model = _model(coords)
    whole = fit(whole_model, train, test, coords, config,
                checkpoint=str(tmp_path / "whole.pt"), progress=False)
    path = str(tmp_path / "part.pt")
    with pytest.raises(KeyboardInterrupt):
        fit(_model(coords), train, test, coords, config, checkpoint=path, progress=False,
            callback=stop)
    assert load_checkpoint(path)["extra"]["epoch"] == 1
    resumed_model = _model(coords, seed=7)  # its own initial weights are overwritten
    resumed = fit(resumed_model, train, test, coords, config, checkpoint=path, progress=False)
    assert [h["epoch"] for h in resumed["history"]] == [1, 2]
    assert [h["loss"] for h in resumed["history"]] == [h["loss"] for h in whole["history"]]
    assert resumed["test_error"] == whole["test_error"]
    for (name, p), q in zip(whole_model.state_dict().items(),
                            resumed_model.state_dict().values()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)


def test_the_odd_grid_check_of_the_spectral_layer(tmp_path):
    """``benchmarks/fno_odd_grids.py``: between two odd grids the layer is one operator up to
    the discretisation; the even-to-odd figure the token-mixer report quotes is finite."""
    import json

    from conftest import load_script

    load_script("benchmarks/fno_odd_grids.py").main(["--quick", "--out", str(tmp_path)])
    rows = {(r["n1"], r["n2"]): r["difference"]
            for r in json.loads((tmp_path / "fno_odd_grids.json").read_text())["rows"]}
    assert 0 <= rows[21, 41] < 0.5
    assert np.isfinite(rows[22, 43])
