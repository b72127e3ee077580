"""The surrogate-started CG study's quick run: both solves converge to the same tolerance on
unseen fields, from a zero guess and from a trained model's prediction."""
import json

from conftest import load_script


def test_surrogate_start_quick(tmp_path):
    mod = load_script("benchmarks/surrogate_start.py")
    mod.main(["--quick", "--out", str(tmp_path), "--data", str(tmp_path / "data")])
    data = json.loads((tmp_path / "surrogate_start.json").read_text())
    assert len(data["rows"]) == 3
    for r in data["rows"]:
        assert r["iterations_zero"] > 0 and r["iterations_surrogate"] > 0
        assert r["final_residual"] <= 1e-8 * 1.01  # converged from the surrogate's guess too
        assert 0 < r["prediction_error"] < 10
    assert "Iterations saved" in (tmp_path / "README.md").read_text()
