"""The distributed mixer benchmark: its quick run on one rank and on two (``mpiexec``) writes
one stamped JSON per rank count, the bytes it reports are the plan's, and ``--report`` builds
the README from both."""
import json
import subprocess
import sys

from conftest import ROOT, load_script

STUDY = "distributed_mixer"


def test_distributed_mixer_quick(tmp_path):
    mod = load_script(f"benchmarks/{STUDY}.py")
    one = mod.main(["--quick", "--out", str(tmp_path)])
    subprocess.run(["mpiexec", "-n", "2", sys.executable, f"benchmarks/{STUDY}.py", "--quick",
                    "--out", str(tmp_path)], cwd=ROOT, check=True, capture_output=True,
                   timeout=300)
    two = json.loads((tmp_path / f"{STUDY}_P2.json").read_text())
    for run, P in ((one, 1), (two, 2)):
        stamp = json.loads((tmp_path / f"{STUDY}_P{P}.json").read_text())["provenance"]
        assert stamp["ranks"] == P and stamp["options"]["quick"] is True
        step = run["step"]
        assert step["ranks"] == P and step["step_s"] > 0
        assert set(step["phases_s"]) == set(mod.PHASES)
        width, batch = step["width"], step["batch"]
        for r in run["bytes"]:
            # the coarse allreduce payload: batch x n0 x 3 width float32, sent only with P > 1
            assert r["allreduce_max"] == (batch * r["n0"] * 3 * width * 4 if P > 1 else 0)
            assert (r["ghost_max"] > 0) == (P > 1)
    assert "serial_step_s" in one["step"] and "serial_step_s" not in two["step"]
    # one subdomain per rank: a rank with four neighbours (P = 16) has the overlap ring of its
    # 8 x 8 subdomain as ghosts; at P = 4 two sides
    assert [r["ghost_rows_max"] for r in two["weak_plan"]] == [2 * 8, 4 * 8]
    mod.main(["--report", "--out", str(tmp_path)])
    text = (tmp_path / "README.md").read_text()
    assert f"`{STUDY}_P1.json`" in text and f"`{STUDY}_P2.json`" in text
    assert f"mpiexec -n 2 python benchmarks/{STUDY}.py --quick" in text
    assert "| 2 | 128 |" in text  # P = 2 holds 128 of the 256 tokens per rank
