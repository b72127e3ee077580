"""The backbone, its training loop and checkpoints: every mixer trains in the same model, a
checkpoint rebuilds and resumes its run exactly, and bad input is refused clearly."""
from dataclasses import replace

import numpy as np
import pytest
import torch

from ddlearn.nn import MIXERS
from ddlearn.nn.checkpoint import load as load_checkpoint
from ddlearn.nn.data import Split, grid_coords
from ddlearn.nn.model import NeuralOperator
from ddlearn.nn.train import FIT, fit, training_device


def _problem(samples=12, s=9, seed=0):
    """A smooth nonlinear map on a small grid: u = sin(pi x) sin(pi y) / a, a in [1, 10]."""
    rng = np.random.default_rng(seed)
    coords = grid_coords((s, s))
    a = 10 ** rng.uniform(0, 1, (samples, s, s))
    bump = (np.sin(np.pi * coords[:, 0]) * np.sin(np.pi * coords[:, 1])).reshape(s, s)
    return coords, Split(a[:8], bump / a[:8]), Split(a[8:], bump / a[8:])


def _model(mixer, **kw):
    return NeuralOperator(width=8, depth=1, heads=2, mixer=mixer,
                          layout={"subdomains": 4, "overlap": 1} if mixer == "schwarz" else None,
                          **kw)


@pytest.mark.parametrize("mixer", list(MIXERS))
def test_every_mixer_trains_in_the_backbone(mixer, tmp_path):
    coords, train, test = _problem()
    torch.manual_seed(0)
    model = _model(mixer)
    model.use_mesh(coords)
    out = fit(model, train, test, coords, replace(FIT, epochs=6, batch_size=4, lr=3e-3),
              progress=False)
    losses = [h["loss"] for h in out["history"]]
    assert losses[-1] < losses[0], losses
    assert np.isfinite(out["test_error"])


def test_resume_continues_the_same_run(tmp_path):
    """Six epochs in one go == three epochs, an interruption, and three more resumed from the
    checkpoint (parameters, optimiser, schedule and random state all restored)."""
    coords, train, test = _problem()
    config = replace(FIT, epochs=6, batch_size=4, lr=3e-3, seed=1)

    def model():
        torch.manual_seed(1)
        m = _model("schwarz").double()
        m.use_mesh(coords)
        return m

    def stop(entry):
        if entry["epoch"] == 3:
            raise KeyboardInterrupt

    whole_model = model()
    # the uninterrupted run shows its progress bar: the bar changes nothing of the run
    fit(whole_model, train, test, coords, config, checkpoint=str(tmp_path / "whole.pt"),
        progress=True)
    path = str(tmp_path / "part.pt")
    with pytest.raises(KeyboardInterrupt):
        fit(model(), train, test, coords, config, checkpoint=path, progress=False,
            callback=stop)
    assert load_checkpoint(path)["extra"]["epoch"] == 3
    resumed_model = model()
    resumed = fit(resumed_model, train, test, coords, config, checkpoint=path, progress=False)
    assert [h["epoch"] for h in resumed["history"]] == list(range(1, 7))
    for p, q in zip(whole_model.parameters(), resumed_model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-12)


def test_checkpoint_of_another_mixer_is_refused(tmp_path):
    coords, train, test = _problem()
    path = str(tmp_path / "m.pt")
    model = _model("flare")
    model.use_mesh(coords)
    fit(model, train, test, coords, replace(FIT, epochs=1, batch_size=4), checkpoint=path,
        progress=False)
    other = _model("schwarz")
    other.use_mesh(coords)
    before = open(path, "rb").read()
    with pytest.raises(ValueError, match="another model or layout.*mixer"):
        fit(other, train, test, coords, replace(FIT, epochs=1, batch_size=4), checkpoint=path,
            progress=False)
    assert open(path, "rb").read() == before  # nothing written


def test_bad_inputs_are_refused():
    coords, train, _ = _problem()
    model = _model("schwarz")
    model.use_mesh(coords)
    c = torch.as_tensor(coords, dtype=torch.float32)
    a = torch.ones(2, len(coords), 1)
    with pytest.raises(ValueError, match="NaN or inf"):
        model(a * float("nan"), c)
    with pytest.raises(ValueError, match="coords must have shape"):
        model(a, c[:, :1])
    with pytest.raises(ValueError, match="tokens but the layout has"):
        model(a[:, :-1], c[:-1])
    with pytest.raises(ValueError, match="unknown mixer"):
        NeuralOperator(mixer="nope")


def test_a_model_runs_on_a_finer_mesh():
    """Parameters do not depend on the tokens: the same model on 9² and 17² grids."""
    model = _model("schwarz")
    for s in (9, 17):
        coords = grid_coords((s, s))
        model.use_mesh(coords)
        y = model(torch.ones(1, s * s, 1), torch.as_tensor(coords, dtype=torch.float32))
        assert y.shape == (1, s * s, 1)


def test_a_finer_mesh_can_take_another_layout():
    """``use_mesh(coords, layout)`` changes the layout for that mesh only (the subdomain size
    kept, or the overlap scaled), the model's own settings untouched, and the output changes
    with it (the layout is not ignored)."""
    model = _model("schwarz")
    coords = grid_coords((17, 17))
    x, c = torch.rand(1, 17 * 17, 1), torch.as_tensor(coords, dtype=torch.float32)
    trained = model.use_mesh(coords)
    y = model(x, c)
    for changes, check in (({"overlap": 2}, lambda m: m.settings["overlap"] == 2
                            and len(m.sizes) == len(trained.sizes)),
                           ({"subdomains": None, "subdomain_size": 20},
                            lambda m: len(m.sizes) > len(trained.sizes))):
        mesh = model.use_mesh(coords, changes)
        assert check(mesh) and model.mesh is mesh
        assert not torch.allclose(model(x, c), y)
    assert model.config["layout"] == {"subdomains": 4, "overlap": 1}
    assert model.use_mesh(coords) is trained


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
@pytest.mark.parametrize("mixer", ["schwarz", "flare", "physics"])
def test_fit_on_a_gpu_is_the_cpu_run(mixer):
    """The same run on the model's GPU: the data follow the model there, the shuffle is the
    CPU's, predictions come back to the CPU; float64 leaves only summation order between them."""
    coords, train, test = _problem()
    config = replace(FIT, epochs=3, batch_size=4, lr=3e-3, seed=2)
    runs = []
    for device in ("cpu", "cuda"):
        torch.manual_seed(2)
        model = _model(mixer).double().to(device)
        model.use_mesh(coords)
        runs.append(fit(model, train, test, coords, config, progress=False))
    np.testing.assert_allclose([h["loss"] for h in runs[1]["history"]],
                               [h["loss"] for h in runs[0]["history"]], rtol=1e-8)
    assert runs[1]["test_error"] == pytest.approx(runs[0]["test_error"], rel=1e-8)


def test_a_training_device_is_one_torch_can_use():
    assert training_device("cpu") == torch.device("cpu")
    for spec, fix in (("nonsense", "use cpu, cuda or cuda:N"), ("meta", "use cpu, cuda"),
                      (f"cuda:{torch.cuda.device_count()}", "use --device cpu")):
        with pytest.raises(ValueError, match=fix) as e:
            training_device(spec)
        assert f"--device {spec}" in str(e.value)
