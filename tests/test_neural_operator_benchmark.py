"""The token-mixer study's quick form: every step (timing, sweep, seeds, pilot, equal time,
transfer) on data the solver makes, twice in a fresh folder (the second run finds everything
done); an interrupted run of every model resumes to the uninterrupted result; the sweep widens
until its best rate lies inside."""
import json

import numpy as np
import pytest
import torch

from conftest import ROOT, load_script

mod = load_script("benchmarks/neural_operator.py")


def _runs(out):
    return {p.stem: json.loads(p.read_text()) for p in (out / "runs").glob("*.json")}


def test_quick_study_twice_in_a_fresh_folder(tmp_path):
    out, data = tmp_path / "out", tmp_path / "data"
    argv = ["--quick", "--out", str(out), "--data", str(data)]
    mod.main(argv)
    runs = _runs(out)
    cfg = mod.QUICK
    assert set(runs["timing"]["equal_time_width"]) == set(mod.MODELS) - set(mod.NETWORK_MODELS)
    trained = [r for r in runs.values() if "validation_error" in r]
    for model in mod.MODELS:
        mine = [r for r in trained if r["model"] == model]
        width = mod.matched_width(model, cfg)
        sweep = {r["lr"]: r["validation_error"] for r in mine
                 if r["width"] == width and r["seed"] == 0 and r["epochs"] == cfg["epochs"]}
        best = mod.best_rate(sweep, cfg["lrs"], cfg["widen"])
        assert best is not None and set(cfg["lrs"]) <= set(sweep)
        rate, _, settled = mod.seeds_rate(runs, cfg, model, width, sweep, best)
        seeds = {r["seed"] for r in mine if r["lr"] == rate and r["width"] == width}
        assert settled and rate <= best and seeds == set(cfg["seeds"])
        transfers = [r for r in runs.values() if r.get("model") == model and "source" in r]
        assert len(transfers) == len(cfg["seeds"])
        for t in transfers:
            assert set(t["test_error"]) == {str(g) for g in
                                            [cfg["data"]["grid"], *cfg["data"]["transfer"]]}
            assert all(0 < e < 10 for e in t["test_error"].values())
            if model != "schwarz":
                assert "layouts" not in t
                continue
            # the Schwarz model under every layout rule on the finer grids, the trained one
            # among them; the size rule's subdomain count grows with the grid
            rules = t["layouts"]
            assert set(rules) == {"count", "overlap", "size"}
            assert rules["count"]["test_error"] == t["test_error"]
            grids = [str(g) for g in cfg["data"]["transfer"]]
            n = [rules["size"]["grids"][g]["subdomains"] for g in grids]
            assert cfg["layout"]["subdomains"] < n[0] < n[1]
            assert [rules["overlap"]["grids"][g]["changes"]["overlap"] for g in grids] == [2, 4]
            assert all(0 < e < 10 for r in rules.values() for e in r["test_error"].values())
        for r in mine:
            assert 0 < r["test_error"] < 10 and r["seconds_per_epoch"] > 0
            assert len(r["history"]) == r["epochs"]
            assert "--quick" in r["provenance"]["command"] and r["provenance"]["commit"]
            assert str(ROOT) not in json.dumps(r)
    for model in cfg["pilot"]:
        assert any(r["model"] == model and r["epochs"] == 2 * cfg["epochs"] for r in trained)
    # the Schwarz model on other layouts: seed 0 at its best rate (every seed for those
    # nearest the cost target), the layout recorded
    for variant, (change, options) in mod.layout_variants(cfg).items():
        mine = [r for r in trained if r["model"] == variant]
        assert {r["seed"] for r in mine} == \
            (set(cfg["seeds"]) if variant in cfg["layout_seeds"] else {0})
        for r in mine:
            assert r["model_config"]["layout"] == {**cfg["layout"], **change}
            assert r["model_config"]["mixer_options"].get("restricted", False) \
                == options.get("restricted", False)
    # equal parameters: the quick widths are coarse, the study's match within 10 %
    counts = [r["parameters"] for r in trained if r["model"] in mod.MIXERS
              and r["width"] == mod.matched_width(r["model"], cfg)]
    assert max(counts) <= 1.5 * min(counts)
    text = (out / "README.md").read_text()
    for head in ("Equal parameters", "Equal time per epoch", "authors' own networks",
                 "Learning-rate sweep", "Flattening", "Resolution transfer", "Schwarz layouts",
                 "schwarz (subdomain size kept)", "schwarz (overlap scaled)",
                 "all seeds, / default"):
        assert head in text
    assert (out / "curves.png").stat().st_size > 0 and (out / "sweep.png").stat().st_size > 0

    # the same command again finds every run done and only rewrites the report
    before = {p.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*.json")}
    mod.main(argv)
    assert {p.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*.json")} == before
    assert (out / "README.md").read_text() == text

    # the longer check of one model: seed 0 at `long` x the epochs, at its best rate and the
    # swept rate below it, and nothing else; the flattening table shows it
    mod.main([*argv, "--long", "--models", "schwarz"])
    new = set(_runs(out)) - {p.removesuffix(".json") for p in before}
    long_epochs = cfg["long"] * cfg["epochs"]
    width = mod.matched_width("schwarz", cfg)
    sweep = {r["lr"]: r["validation_error"] for r in trained if r["model"] == "schwarz"
             and r["width"] == width and r["seed"] == 0 and r["epochs"] == cfg["epochs"]}
    best = min(sweep, key=sweep.get)
    rates = [best] + [lr for lr in [max((r for r in sweep if r < best), default=None)] if lr]
    assert new == {mod.run_name("schwarz", width, lr, 0, long_epochs) for lr in rates}
    assert all(len(_runs(out)[n]["history"]) == long_epochs for n in new)
    assert all(_runs(out)[n]["device"] == "cpu" for n in new)
    assert f"{long_epochs} epochs" in (out / "README.md").read_text()

    # a transfer whose checkpoint this machine lacks (a JSON from another machine) trains the
    # run again, records that model's own error and leaves the run's JSON as it was
    t = next(r for r in _runs(out).values() if r.get("model") == "schwarz" and "source" in r)
    source = out / "runs" / f"{t['source']}.json"
    kept = source.read_text()
    (out / "runs" / f"{t['run']}.json").unlink()
    (out / "checkpoints" / f"{t['source']}.pt").unlink()
    mod.main([*argv, "--models", "schwarz"])
    again = _runs(out)[t["run"]]
    assert again["retrained"] and source.read_text() == kept
    assert again["source_test_error"] == json.loads(kept)["test_error"]
    assert (out / "checkpoints" / f"{t['source']}.pt").exists()


@pytest.mark.parametrize("name, models", [("mesh", ["schwarz", "physics", "transolver-net"]),
                                          ("channels3d", ["schwarz", "physics", "fno"])])
def test_the_sets_beyond_the_grid(tmp_path, name, models):
    """The unstructured mesh (rcb partition, Transolver's point-cloud form, no FNO) and the 3D
    high-contrast channels: the same steps, in the set's own folder."""
    out = tmp_path / "out"
    mod.main(["--quick", "--set", name, "--out", str(out), "--data", str(tmp_path / "data"),
              "--models", *models])
    assert not (out / "runs").exists()  # the grid's study is left alone
    runs, cfg = _runs(out / name), mod.QUICK_SETS[name]
    assert set(runs["timing"]["equal_time_width"]) == \
        set(mod.models_of(cfg)) - set(mod.NETWORK_MODELS)
    trained = [r for r in runs.values() if "validation_error" in r]
    assert {r["model"] for r in trained} == set(models)
    for r in trained:
        assert r["dataset"]["family"] == cfg["data"]["family"] and 0 < r["test_error"] < 10
        assert r["config"]["data"] == cfg["data"]
    form = {r["model"]: r["model_config"] for r in trained}
    assert form["schwarz"]["layout"]["partitioner"] == cfg["layout"]["partitioner"]
    transfers = [r for r in runs.values() if "source" in r]
    if name == "mesh":
        assert "fno" not in mod.models_of(cfg) and form["physics"]["mixer_options"]["form"] \
            == form["transolver-net"]["form"] == "points" and not transfers
        assert form["schwarz"]["layout"]["partitioner"] == "rcb"
    else:
        assert form["physics"]["mixer_options"]["form"] == "grid"
        assert len(transfers) == len(models) * len(cfg["seeds"])
        assert all(set(t["test_error"]) == {"5", "9"} for t in transfers)
    text = (out / name / "README.md").read_text()
    assert mod.TITLES[name] in text and f"--report --set {name}" in text


def test_a_model_a_set_cannot_train_is_refused(capsys):
    with pytest.raises(SystemExit):
        mod.parse_args(["--quick", "--set", "mesh", "--models", "fno"])
    err = capsys.readouterr().err
    assert "--models fno" in err and "--set mesh" in err and "choose from" in err


class Interrupt(Exception):
    pass


def _stop_after_first_epoch(entry):
    if entry["epoch"] == 1:
        raise Interrupt


@pytest.mark.parametrize("model", mod.MODELS)
def test_an_interrupted_run_resumes_to_the_uninterrupted_result(tmp_path, model):
    data = tmp_path / "data"
    cfg = mod.QUICK
    width, lr, seed = mod.matched_width(model, cfg), cfg["lrs"][0], 0

    whole = mod.parse_args(["--quick", "--out", str(tmp_path / "whole"), "--data", str(data)])
    expected = mod.run_one(whole, cfg, model, width, lr, seed)

    cut = mod.parse_args(["--quick", "--out", str(tmp_path / "cut"), "--data", str(data)])
    with pytest.raises(Interrupt):
        mod.run_one(cut, cfg, model, width, lr, seed, callback=_stop_after_first_epoch)
    assert not (tmp_path / "cut" / "runs").exists() or not list((tmp_path / "cut" / "runs").glob("*"))
    resumed = mod.run_one(cut, cfg, model, width, lr, seed)
    assert resumed["test_error"] == pytest.approx(expected["test_error"], rel=1e-10)
    np.testing.assert_allclose([h["loss"] for h in resumed["history"]],
                               [h["loss"] for h in expected["history"]], rtol=1e-10)


def test_the_sweep_widens_until_its_best_rate_is_inside():
    lrs = [1e-3, 3e-3]
    assert mod.rates_to_run({}, lrs, 2) == lrs
    # the best at the top edge asks for the next rate up, then stops once it lies inside
    assert mod.rates_to_run({1e-3: 0.5, 3e-3: 0.4}, lrs, 2) == [1e-3, 3e-3, 9e-3]
    assert mod.best_rate({1e-3: 0.5, 3e-3: 0.4}, lrs, 2) is None
    done = {1e-3: 0.5, 3e-3: 0.4, 9e-3: 0.45}
    assert mod.rates_to_run(done, lrs, 2) == [1e-3, 3e-3, 9e-3]
    assert mod.best_rate(done, lrs, 2) == 3e-3
    # the bottom edge, widened at most `widen` steps per side
    done = {1e-3: 0.3, 3e-3: 0.4, 3.33e-4: 0.2, 1.11e-4: 0.1}
    assert mod.rates_to_run(done, lrs, 2) == [1.11e-4, 3.33e-4, 1e-3, 3e-3]
    assert mod.best_rate(done, lrs, 2) == 1.11e-4  # the limit reached: reported at the edge
    assert mod.rates_to_run({1e-3: 0.3, 3e-3: 0.4}, lrs, 0) == lrs


def test_seeds_move_one_rate_lower_while_one_diverges():
    cfg = {"epochs": 4, "seeds": [0, 1, 2]}
    sweep = {1e-3: 0.05, 3e-3: 0.04, 9e-3: 0.03}

    def runs_of(errors):  # (lr, seed) -> validation error; seed 0 at width 8 is the sweep's
        out = {mod.run_name("m", 8, lr, 0, 4): {"lr": lr, "seed": 0, "validation_error": v}
               for lr, v in sweep.items()}
        out.update({mod.run_name("m", 8, lr, s, 4): {"lr": lr, "seed": s, "validation_error": v}
                    for (lr, s), v in errors.items()})
        return out
    # every seed done and none diverged: the sweep's best
    runs = runs_of({(9e-3, 1): 0.032, (9e-3, 2): 0.035})
    assert mod.seeds_rate(runs, cfg, "m", 8, sweep, 9e-3) == (9e-3, [], True)
    # a seed still missing: not settled
    assert mod.seeds_rate(runs_of({(9e-3, 1): 0.03}), cfg, "m", 8, sweep, 9e-3)[2] is False
    # seed 2 predicts the mean at 9e-3: every seed one rate lower, the diverged run named
    runs = runs_of({(9e-3, 1): 0.03, (9e-3, 2): 0.68})
    rate, diverged, settled = mod.seeds_rate(runs, cfg, "m", 8, sweep, 9e-3)
    assert (rate, settled) == (3e-3, False) and [r["seed"] for r in diverged] == [2]
    runs = runs_of({(9e-3, 1): 0.03, (9e-3, 2): 0.68, (3e-3, 1): 0.045, (3e-3, 2): 0.041})
    assert mod.seeds_rate(runs, cfg, "m", 8, sweep, 9e-3)[::2] == (3e-3, True)
    # a wider model whose every seed diverges at the best rate is lowered as well
    runs = runs_of({(9e-3, 1): 0.03, (9e-3, 2): 0.03})
    runs.update({mod.run_name("m", 16, 9e-3, s, 4): {"lr": 9e-3, "seed": s,
                                                    "validation_error": 0.6} for s in (0, 1, 2)})
    assert mod.seeds_rate(runs, cfg, "m", 16, sweep, 9e-3)[0] == 3e-3
    # the lowest swept rate is kept even where a seed diverges there
    runs = runs_of({(1e-3, 1): 0.05, (1e-3, 2): 0.7})
    assert mod.seeds_rate(runs, cfg, "m", 8, sweep, 1e-3)[::2] == (1e-3, True)


def test_a_device_torch_cannot_use_is_refused(capsys):
    bad = [("nonsense", "use cpu, cuda or cuda:N")]
    if not torch.cuda.is_available():
        bad.append(("cuda", "use --device cpu"))
    for device, fix in bad:
        with pytest.raises(SystemExit):
            mod.parse_args(["--quick", "--device", device])
        err = capsys.readouterr().err
        assert f"--device {device}" in err and fix in err
