"""The token-mixer scaling benchmark (``benchmarks/mixer_scaling.py``): its quick run measures
every registered mixer, each point in its own process, into a stamped JSON with fitted exponents
and time ratios; the budget skips a mixer's larger grids; a point over the memory cap is killed;
``--report`` writes the README from the JSON."""
import json

from conftest import ROOT, load_script
from ddlearn.nn import MIXERS

STUDY = "mixer_scaling"


def _load():
    return load_script(f"benchmarks/{STUDY}.py")


def _saved(path):
    data = json.loads(path.read_text())
    stamp = data["provenance"]
    assert stamp["command"].startswith(f"python benchmarks/{STUDY}.py --quick")
    assert stamp["options"]["quick"] is True and stamp["commit"]
    assert str(ROOT) not in path.read_text()  # no checkout's absolute path in results
    return data


def test_quick_run_measures_every_mixer(tmp_path):
    mod = _load()
    mod.main(["--quick", "--out", str(tmp_path)])
    data = _saved(tmp_path / f"{STUDY}.json")
    points = data["points"]
    assert set(MIXERS) <= {p["series"] for p in points}
    series = {p["series"] for p in points}
    for name in series:
        for dim, sides in mod.QUICK_SIDES.items():
            got = sorted((p for p in points if (p["series"], p["dim"]) == (name, dim)),
                         key=lambda p: p["tokens"])
            assert [p["side"] for p in got] == sides
            for p in got:
                assert p["status"] == "ok", p
                assert p["tokens"] == p["side"] ** dim and p["threads"] == 1
                assert p["time_s"] > 0 and p["wall_s"] > 0 and p["peak_mb"] >= 0
                assert 0 <= p["repeats"] <= 3 and p["params"] > 0
                if MIXERS[p["mixer"]].needs_layout:
                    assert p["layout"]["tokens"] == p["tokens"] and p["layout_s"] > 0
    for name in series:
        for dim in ("2", "3"):
            f = data["fits"][name][dim]
            assert f["points"] == 3 and isinstance(f["time"], float)
    for dim, tokens in (("2", 256), ("3", 512)):
        r = data["ratios"][dim]
        assert r["tokens"] == tokens and r["schwarz"] == 1.0
        assert r["softmax"] > 0 and r["flare"] > 0
    assert (tmp_path / f"{STUDY}.png").stat().st_size > 10_000
    (tmp_path / "README.md").unlink(missing_ok=True)
    mod.main(["--report", "--out", str(tmp_path)])
    text = (tmp_path / "README.md").read_text()
    assert f"python benchmarks/{STUDY}.py --report --out " in text
    assert "## CPU, 3D: forward + backward, CPU seconds" in text and "| flare++ |" in text
    assert "## CPU: fitted exponents" in text and f"![time and memory against tokens]({STUDY}.png)" \
        in text


def test_budget_skips_larger_grids_and_the_cap_kills(tmp_path):
    mod = _load()
    mod.main(["--quick", "--mixers", "schwarz", "flare", "--dims", "2", "--budget-s", "0",
              "--out", str(tmp_path)])
    points = _saved(tmp_path / f"{STUDY}.json")["points"]
    for name in ("schwarz", "flare"):
        got = sorted((p for p in points if p["series"] == name), key=lambda p: p["tokens"])
        assert got[0]["status"] == "ok"
        assert all(p["status"] == "skipped: over budget" and "> 0 s" in p["reason"]
                   for p in got[1:])
    mod.main(["--quick", "--mixers", "flare", "--dims", "3", "--memory-cap-gib", "1e-4",
              "--out", str(tmp_path)])
    points = _saved(tmp_path / f"{STUDY}.json")["points"]
    assert points[0]["status"].startswith("killed: over the memory cap")
    assert [p["status"] for p in points[1:]] == ["skipped: over budget"] * 2
    text = mod.main(["--report", "--out", str(tmp_path)]) and \
        (tmp_path / "README.md").read_text()
    assert "| flare | killed | skipped | skipped |" in text


def test_layouts_time_schwarz_subdomain_sizes_beside_flare(tmp_path):
    """``--layouts``: Schwarz attention at every subdomain size and overlap on the grid nearest
    ``--ratio-tokens``, FLARE beside it, its own JSON and a report section."""
    mod = _load()
    mod.main(["--quick", "--layouts", "--ratio-tokens", "256", "--out", str(tmp_path)])
    points = _saved(tmp_path / f"{STUDY}_layouts.json")["points"]
    for dim in (2, 3):
        mine = [p for p in points if p["dim"] == dim]
        assert all(p["status"] == "ok" and p["tokens"] == mine[0]["tokens"] for p in mine)
        schwarz = [p for p in mine if p["mixer"] == "schwarz"]
        assert {(p["subdomain_size"], p["overlap"]) for p in schwarz} == \
            {(n, o) for n in mod.QUICK_LAYOUT_SIZES for o in mod.LAYOUT_OVERLAPS}
        # a larger subdomain size asks for fewer subdomains; overlap only grows them
        by = {(p["subdomain_size"], p["overlap"]): p["layout"] for p in schwarz}
        sizes = sorted(mod.QUICK_LAYOUT_SIZES)
        assert all(by[a, 0]["subdomains"] >= by[b, 0]["subdomains"]
                   for a, b in zip(sizes, sizes[1:]))
        assert all(by[n, 1]["max_subdomain"] > by[n, 0]["max_subdomain"] for n in sizes)
        assert [p["mixer"] for p in mine if p["mixer"] != "schwarz"] == [mod.LAYOUT_AGAINST]
    mod.main(["--quick", "--report", "--out", str(tmp_path)])
    assert "layouts near 256 tokens against flare" in (tmp_path / "README.md").read_text()
