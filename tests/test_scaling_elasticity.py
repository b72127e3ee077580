"""The weak-scaling study's elasticity case (``benchmarks/scaling.py --cases elasticity``) at
its tiny size: 3D Q1 elasticity of examples/elasticity.py with stiff inclusions, assembled
rank by rank, block size 3, ddlearn's default for systems and the spectral space on the
client's subdomains with their Neumann matrices beside GAMG."""
import json

import pytest

from conftest import load_script

mod = load_script("benchmarks/scaling.py")


def test_elasticity_quick(tmp_path):
    data = mod.main(["--quick", "--out", str(tmp_path), "--cases", "elasticity", "--dims", "3"])
    saved = json.loads((tmp_path / "scaling.json").read_text())
    assert saved["provenance"]["command"].split("python ", 1)[1].startswith(
        "benchmarks/scaling.py") and saved["elasticity_series"] == [2, [2, 3]]
    rows = saved["rows"]
    sub, ks = mod.ELASTICITY["quick"]
    assert {(r["case"], r["dim"], r["N"], r["method"]) for r in rows} == \
        {("elasticity", 3, k ** 3, m) for k in ks for m in mod.ELASTICITY_METHODS}
    for r in rows:
        n = sub * round(r["N"] ** (1 / 3))
        assert r["grid"] == n and r["unknowns"] == r["size"] == 3 * n * (n + 1) ** 2
        assert r["block_size"] == 3 and r["peak_rss_mb_max"] > 0 and r["assemble_s"] > 0
        assert not r.get("error"), r.get("error")
        if r["method"] in ("gdsw", "spectral-aux"):
            assert r["converged"] and r["rnorm_true"] < 1e-6 and r["n0"] > 0
            assert r["split"]["apply_coarse_s"] > 0
        # only the spectral method takes the client's subdomains and Neumann matrices
        assert ("aux_s" in r) == (r["method"] == "spectral-aux")
    # the spectral space keeps at least the rigid-body modes of each floating subdomain
    for r in rows:
        if r["method"] == "spectral-aux":
            assert r["n0"] >= 6 * (r["N"] - ks[0] ** 2)
    text = mod.summary(data)
    assert "**3D elasticity**" in text and "| spectral-aux |" in text
    mod.main(["--report", "--out", str(tmp_path)])
    assert "3D elasticity" in (tmp_path / "README.md").read_text()


def test_client_subdomains_are_refused_for_the_scalar_cases(tmp_path):
    with pytest.raises(SystemExit):
        mod.main(["--quick", "--out", str(tmp_path), "--cases", "poisson", "--methods",
                  "spectral-aux"])
