"""The classical preconditioner needs none of the extras. In a fresh interpreter, ``import
ddlearn.pc`` and a two-level PC with each classical coarse space, selected from the options
database, load no package of an extra (torch, tqdm, matplotlib, scikit-fem, pytest, ...);
asking for a learned family, or for ``ddlearn.pc.SchwarzAttentionPC``, loads torch then. The
project's metadata declares the same split (core, ``learned``, ``bench``, ``test``, ``all``)."""
import importlib.metadata
import json
import re
import subprocess
import sys

import pytest

from conftest import ROOT
from ddlearn.pc import registry

tomllib = pytest.importorskip("tomllib")

CORE = {"numpy", "scipy", "mpi4py", "petsc4py", "slepc4py", "pymetis"}
EXTRAS = ["torch", "tqdm", "matplotlib"]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _name(requirement: str) -> str:
    """A requirement's distribution name, normalised."""
    return re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower().replace("_", "-")


# Run as `python -c`: prints one JSON line. The 2D 5-point Laplacian on a 16 x 16 grid in PETSc's
# default row distribution; CG with the two-level PC from options, b = 1.
PROBE = r"""
import json, sys
start = set(sys.modules)
from petsc4py import PETSc
import ddlearn.pc
from ddlearn.pc import registry

def third_party():
    tops = {m.split(".")[0] for m in set(sys.modules) - start}
    return sorted(t for t in tops if t not in sys.stdlib_module_names)

n, h = 16, 1.0 / 17
A = PETSc.Mat().createAIJ([n * n, n * n], nnz=5)
lo, hi = A.getOwnershipRange()
for row in range(lo, hi):
    i, j = row % n, row // n
    A[row, row] = 4.0
    for col, inside in ((row - 1, i > 0), (row + 1, i < n - 1),
                        (row - n, j > 0), (row + n, j < n - 1)):
        if inside:
            A[row, col] = -1.0
A.assemble()
coords = [[(r % n + 1) * h, (r // n + 1) * h] for r in range(lo, hi)]
out = {"import": third_party(), "reasons": {}, "residuals": {}}
classical = [name for name, target in registry.COARSE_SPACES.items()
             if not target.startswith("ddlearn.learned.")]
for name in classical:
    opts = PETSc.Options()
    opts["ddlearn_coarse_space"] = name
    opts["ddlearn_subdomains"] = 4
    ksp = PETSc.KSP().create()
    ksp.setOperators(A)
    ksp.setType("cg")
    ksp.setTolerances(rtol=1e-8)
    pc = ksp.getPC()
    pc.setType("python")
    pc.setPythonType("ddlearn.pc.TwoLevelSchwarzPC")
    ddlearn.pc.set_coordinates(pc, coords)
    ksp.setFromOptions()
    x, b = A.createVecs()
    b.set(1.0)
    ksp.solve(b, x)
    r = b.duplicate()
    A.mult(x, r)
    r.aypx(-1.0, b)
    out["reasons"][name] = ksp.getConvergedReason()
    out["residuals"][name] = r.norm() / b.norm()
    for obj in (r, x, b, ksp):
        obj.destroy()
out["classical"] = third_party()
out["learned_name"] = registry.coarse_space_class("learned").name
out["learned"] = third_party()
pc = PETSc.PC().create()
pc.setType("python")
pc.setPythonType("ddlearn.pc.SchwarzAttentionPC")  # as -pc_python_type does: a lazy attribute
out["attention"] = type(pc.getPythonContext()).__name__
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def probe():
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _of_extras(modules: list[str]) -> list[str]:
    """The modules among ``modules`` (top-level names) that belong to a distribution of an
    extra and not of the core (whatever the core's own dependencies import is fine)."""
    extra = {_name(r) for reqs in PROJECT["project"]["optional-dependencies"].values()
             for r in reqs} - CORE - {"ddlearn"}
    owners = importlib.metadata.packages_distributions()
    return sorted(m for m in modules
                  if m in EXTRAS or extra & {_name(d) for d in owners.get(m, [])})


def test_import_and_classical_solves_load_no_extra(probe):
    assert _of_extras(probe["import"]) == []
    assert _of_extras(probe["classical"]) == []
    assert {"gdsw", "rgdsw", "hats", "nicolaides", "spectral"} <= set(probe["reasons"])
    for name, reason in probe["reasons"].items():
        assert reason > 0, f"{name}: CG did not converge (reason {reason})"
        assert probe["residuals"][name] < 1e-6, name


def test_a_learned_family_loads_torch_when_asked_for(probe):
    assert probe["learned_name"] == "learned"
    assert "torch" in probe["learned"] and "torch" not in probe["classical"]
    assert probe["attention"] == "SchwarzAttentionPC"


def test_registry_names_need_no_import():
    """The names are there without importing a family; each target names its own family."""
    code = ("import sys; from ddlearn.pc import registry; "
            "print(list(registry.COARSE_SPACE_NAMES)); "
            "print(sorted(m for m in sys.modules if m.startswith('ddlearn.learned')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    names, learned = proc.stdout.strip().splitlines()
    assert "learned" in names and "hats" in names
    assert learned == "[]"
    for name in registry.COARSE_SPACE_NAMES:
        assert registry.coarse_space_class(name).name == name
    with pytest.raises(ValueError, match="-pre_ddlearn_coarse_space 'hats\\+nope'.*gdsw"):
        registry.make_coarse_space("hats+nope", "-pre_ddlearn_coarse_space")


def test_metadata_keeps_the_extras_out_of_the_core():
    project = PROJECT["project"]
    assert {_name(r) for r in project["dependencies"]} == CORE
    extras = project["optional-dependencies"]
    assert "torch==2.13.0" in extras["learned"]  # exact: a looser pin pulls a CUDA build
    assert {_name(r) for r in extras["learned"]} == {"torch", "tqdm"}
    assert {"matplotlib", "tqdm"} <= {_name(r) for r in extras["bench"]}
    assert {"pytest", "pytest-mpi"} <= {_name(r) for r in extras["test"]}
    assert extras["all"] == ["ddlearn[learned,bench,test]"]
    find = PROJECT["tool"]["setuptools"]["packages"]["find"]
    assert find["include"] == ["ddlearn*"]  # the harness is ddlearn.harness, no top-level `solvers`
