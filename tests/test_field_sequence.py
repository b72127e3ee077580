"""benchmarks/field_sequence.py: one KSP and one matrix per method over a sequence of fields,
values updated in place; JSON, tables and plots."""
import json

import numpy as np

from conftest import ROOT, load_script


def test_field_sequence_quick(tmp_path):
    out = tmp_path / "field_sequence.json"
    mod = load_script("benchmarks/field_sequence.py")
    data = mod.main(["--quick", "--out", str(tmp_path), "--dims", "2", "3",
                     "--methods", "hats", "spectral", "gamg", "gamg-tuned", "learned"])
    text = out.read_text()
    assert str(ROOT) not in text  # no checkout's absolute path in the results
    saved = json.loads(text)
    assert saved["provenance"]["command"].endswith(
        f"python benchmarks/field_sequence.py --quick --out {tmp_path} --dims 2 3 "
        f"--methods hats spectral gamg gamg-tuned learned")
    assert {k: v for k, v in saved.items() if k != "provenance"} == \
        json.loads(json.dumps(data))
    data = saved
    assert data["fields"] == mod.QUICK_FIELDS == 3
    assert data["sizes"] == {"2": {"n": 63, "N": 4}, "3": {"n": 12, "N": 8}}
    assert set(data["models"]) == {"2", "3"}
    keys = {(r["dim"], r["family"], r["sequence"], r["method"]) for r in data["runs"]}
    assert keys == {(d, "channels", s, m) for d in (2, 3) for s in ("iid", "moving")
                    for m in ("hats", "spectral", "gamg", "gamg-tuned", "learned")}
    for r in data["runs"]:
        if r["method"] == "learned" and r["dim"] == 3:
            # the library may refuse the 2D model's subdomain size or lack a 3D model
            assert r["status"] in ("ok", "refused"), r
            if r["status"] == "refused":
                assert r["message"] and r["fields"] == [] and r["failed_field"] == 0
                continue
        assert r["status"] == "ok", r
        fields = r["fields"]
        assert [f["index"] for f in fields] == [0, 1, 2]
        for f in fields:
            assert f["iterations"] > 0 and f["converged"] and f["rnorm_true"] < 1e-6, f
            assert f["setup_s"] > 0 and f["solve_s"] > 0 and f["peak_mb"] > 0
            assert np.isclose(f["total_s"], f["setup_s"] + f["solve_s"])
        # the values changed every field: b^T A b differs (iid: the norm too)
        assert len({f["bAb"] for f in fields}) == 3, r["method"]
        if r["sequence"] == "iid":
            assert len({f["matrix_norm"] for f in fields}) == 3
            assert [f["seed"] for f in fields] == [200_000, 200_001, 200_002]
        else:
            assert [f["shift"] for f in fields] == [0, 1, 2]
        s = r["summary"]
        assert s["fields"] == 3 and s["max_its"] >= s["mean_its"] > 0
        assert np.isclose(s["total_s"], sum(f["total_s"] for f in fields))
        assert s["memory_growth"] is not None and s["memory_growth"] > -0.5
        if r["method"] in ("spectral", "learned"):
            # values-only re-setup of the same PC: partition kept, the basis rebuilt per field
            assert all(f["split"]["partition_s"] == 0 and f["split"]["basis_s"] > 0
                       for f in fields[1:])
            assert len({f["n0"] for f in fields}) == 1 and fields[0]["n0"] > 0
            assert all(f["coarse"]["name"] == r["method"] for f in fields)
        if r["method"] == "spectral":
            assert len({f["coarse"]["largest_kept_lambda"] for f in fields}) == 3
        if r["method"] == "learned":
            assert not r["model"].startswith("/")
    table = mod.report(data)
    for key in ("**2D random_channels, 63², N = 4, iid**", "**3D random_channels3d, 12³, "
                "N = 8, moving**", "| method | mean its | max its |", "| hats | ",
                "| gamg | ", "| gamg-tuned | "):
        assert key in table, key
    for png in ("field_sequence.png", "field_sequence_iterations.png"):
        assert (tmp_path / png).stat().st_size > 10_000
        (tmp_path / png).unlink()
    again = mod.main(["--report", "--out", str(tmp_path)])
    assert again == data
    condensed = mod.summary(data)
    assert "| 2D | channels | iid |" in condensed and "| 3D | channels | moving |" in condensed
    readme = (tmp_path / "README.md").read_text()
    assert "python benchmarks/field_sequence.py --report --out" in readme and condensed in readme
    assert (tmp_path / "field_sequence.png").exists()
    assert (tmp_path / "field_sequence_iterations.png").exists()
    # a run of some methods under its own name gets its own tables beside the main file's
    mod.main(["--quick", "--out", str(tmp_path), "--dims", "2", "--sequences", "iid",
              "--methods", "gamg", "gamg-tuned", "--name", "field_sequence_gamg"])
    assert mod.main(["--report", "--out", str(tmp_path)]) == data
    readme = (tmp_path / "README.md").read_text()
    assert "## field_sequence_gamg.json: condensed" in readme and "`field_sequence_gamg.json`" \
        in readme and condensed in readme
