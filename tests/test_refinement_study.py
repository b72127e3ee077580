"""benchmarks/refinement.py (the learned refinement with the Dirichlet factorisation instead
of its own): the --quick run writes its JSON, table and plot; Sherman–Morrison–Woodbury on the
boundary rows is exact (the same Krylov space and Ritz values as a direct LU of the same
matrix); today's refinement is the library's and nearly as good as the spectral space."""
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/refinement.py")


def test_quick_run_writes_json_table_and_plot(bench, tmp_path, capsys):
    out = tmp_path / "r.json"
    bench.main(["--quick", "--json", str(out)])
    data = json.loads(out.read_text())
    assert (tmp_path / "r.png").stat().st_size > 0
    assert data["benchmark"] == "refinement" and data["quick"] and data["k"] == 8
    assert not Path(data["model"]).is_absolute()
    (case,) = data["cases"]
    assert (case["n"], case["N"], case["family"]) == (127, 16, "random_channels")
    for key in ("dirichlet_factor_s", "neumann_factor_s", "dirichlet_factor_blockdiag_s",
                "neumann_factor_blockdiag_s", "exact_s"):
        assert case[key] > 0
    assert 0 < case["boundary_rows"]["mean"] <= case["boundary_rows"]["max"]
    assert case["diagnostics"]["energy_ratio"]["median"] > 1  # A_i = A^N + E sees more energy
    spectral = case["spectral"]["its"]
    assert case["spectral"]["converged"] and 0 < spectral < 60
    (entry,) = case["starts"]
    assert entry["start"] == "network"
    rows = {(r["method"], r["steps"]): r for r in entry["rows"]}
    assert set(rows) == set(bench.QUICK)
    for r in rows.values():
        assert r["converged"] and r["true_relres"] < 1e-6 and r["time_s"] >= 0
        assert r["loss_mean"] >= -1e-8 and 0 <= r["residual_max"] <= 1 + 1e-12
    lu, smw = rows[("neumann-lu", 2)], rows[("dirichlet-smw", 2)]
    # the refinement here is the library's refine() ...
    assert entry["library_check"] < 1e-6
    # ... nearly as good as the exact eigenvectors, and better than no refinement
    assert lu["cg_its"] <= spectral + 3 and lu["loss_mean"] < rows[("none", 0)]["loss_mean"]
    assert lu["factorizations"] == 1 and lu["solves"] == 16 and lu["factor_s"] > 0
    # SMW: b extra Dirichlet solves, the shift-and-invert quality of neumann-lu
    assert smw["solves"] == pytest.approx(16 + case["boundary_rows"]["mean"])
    assert smw["smw_check"] < 1e-6 and abs(smw["cg_its"] - lu["cg_its"]) <= 1
    table = capsys.readouterr().out
    assert "| case | start | method | steps | CG its | spectral its |" in table
    bench.main(["--report", str(out), "--no-plot"])
    assert "| channels 127² N=16 | network | dirichlet-smw | 2 |" in capsys.readouterr().out


def test_smw_equals_the_direct_factorisation_of_the_same_matrix(bench):
    """dirichlet-smw (b Dirichlet solves + a b x b Cholesky) against the same Krylov with
    M~ = A_i - (1 - eps) E factored directly: the same Ritz values."""
    from ddlearn.decomposition import Decomposition
    from ddlearn.decomposition.problems import make_problem
    from ddlearn.learned.coarse.local_coarse import PatchBatch

    # 127², N = 16: four floating subdomains, where A^N is singular and only eps E lifts it
    A = sp.csr_matrix(make_problem("random_channels", 127, contrast=1e6, seed=200000).matrix())
    dec = Decomposition((127, 127), 16, 1)
    locs = [bench.Local(A, I, dec.D(i)) for i, I in enumerate(dec.subdomains)]
    for loc in locs:
        loc.lu = spla.splu(sp.csc_matrix(loc.Ai))
        assert len(loc.boundary) > 0
    batch = PatchBatch([l.AN for l in locs], [l.D for l in locs], rights=[l.Ai for l in locs])
    X = batch.split(np.random.default_rng(1).standard_normal((batch.offsets[-1], 8)))
    exact = [bench.local_eigenvectors(l.AN, l.D, bench.SpectralSettings(
        9, eigensolver="scipy", tol=1e-10), right=l.Ai)[0] for l in locs]
    for steps in (1, 2):
        smw, timing, solves = bench.refinement(locs, batch, X, "dirichlet-smw", steps, 8, 1e-4)
        direct = bench.refinement(locs, batch, X, "smw-direct", steps, 8, 1e-4)[0]
        assert timing["factor_s"] == 0.0
        assert solves == pytest.approx(8 * steps + np.mean([len(l.boundary) for l in locs]))
        for (a, _), (b, _), lam in zip(smw, direct, exact):
            assert np.max(np.abs(a - b)) / lam[8] < 1e-8, (steps, a, b)
    # the SMW operator itself is the inverse of M~ (a floating subdomain: 5)
    loc = locs[5]
    assert np.allclose(loc.AN @ np.ones(len(loc.I)), 0, atol=1e-8)
    Y = np.random.default_rng(2).standard_normal((loc.AN.shape[0], 3))
    Z = bench.smw_operator(loc, 1e-4, bench.Counter())(Y)
    assert np.linalg.norm(loc.boundary_M(1e-4) @ Z - Y) < 1e-8 * np.linalg.norm(Y)
