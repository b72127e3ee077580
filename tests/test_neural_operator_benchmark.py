"""The neural-operator study's quick run: every model trains through the same loop on data the
solver makes, with matched parameter counts, stamped per-run JSON, a resumable rerun, and a
report regenerated from the JSON."""
import json

from conftest import ROOT, load_script


def test_neural_operator_quick(tmp_path):
    mod = load_script("benchmarks/neural_operator.py")
    out, data = tmp_path / "out", tmp_path / "data"
    mod.main(["--quick", "--part", "darcy", "--out", str(out), "--data", str(data)])
    runs = {p.stem: json.loads(p.read_text()) for p in (out / "runs").glob("*.json")}
    final = {r["model"]: r for k, r in runs.items() if "-darcy-" in k}
    assert set(final) == set(mod.MODELS)
    counts = [r["parameters"] for r in final.values()]
    assert max(counts) <= 1.25 * min(counts)  # the quick sizes are tiny; the study's are +-10 %
    for r in final.values():
        stamp = r["provenance"]
        assert "--quick" in stamp["command"] and stamp["commit"]
        assert 0 < r["test_error"] < 10 and r["seconds_per_epoch"] > 0
        swept = [s["lr"] for k, s in runs.items() if k.startswith(
            f"neural_operator-sweep-{r['model']}-")]
        assert sorted(swept) == sorted(mod.QUICK["lrs"]) and r["lr"] in swept
        assert str(ROOT) not in json.dumps(r)
    # a rerun finds every run done (the checkpoints and JSON) and only rewrites the report
    before = {p.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*.json")}
    mod.main(["--report", "--out", str(out)])
    text = (out / "README.md").read_text()
    assert "darcy: test relative L2" in text and "learning-rate sweep" in text
    assert {p.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*.json")} == before
