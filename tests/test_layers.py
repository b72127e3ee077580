"""The package's layers import downwards only, with no import hidden inside a function.

Layers, bottom to top: ``ddlearn.decomposition`` < ``ddlearn.nn`` < ``ddlearn.classical`` <
``ddlearn.learned`` < ``ddlearn.pc`` < ``ddlearn.harness`` (the comparison harness of the
benchmarks; nothing below imports it). ``ddlearn.nn`` (the torch token mixers) is a side branch:
it imports torch and the PETSc-free modules of ``ddlearn.decomposition`` only, and the classical
layer never imports it. Checked on the source with :mod:`ast`, so it holds whatever the tests happen to
import.

The one lazy import is allowed by name: :func:`ddlearn.pc.registry.load` imports the module of a
``"module:name"`` target when it is asked for (the coarse-space registry and ``ddlearn.pc``'s lazy
attributes), so that the classical path never imports torch. Every such target written in the
source must point down too, and no other function may import anything, statically or through
:mod:`importlib`. The optional dependencies (``learned``: torch, tqdm; ``bench``: matplotlib) may
be imported only from the layers that need them.
"""
import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYERS = ["ddlearn.decomposition", "ddlearn.nn", "ddlearn.classical", "ddlearn.learned", "ddlearn.pc",
          "ddlearn.harness"]
# the functions allowed to import a module at run time (a dynamic import), by module and name
LAZY_LOADERS = {("ddlearn.pc.registry", "load")}
# a third-party module of an extra, and the lowest layer that may import it
OPTIONAL = {"torch": "ddlearn.learned", "tqdm": "ddlearn.learned",
            "matplotlib": "ddlearn.harness"}
# side branches: a layer that may use an extra below its lowest layer, and the layers that may
# not import it although they sit above it
EXTRA_USERS = {"torch": ("ddlearn.nn",), "tqdm": ("ddlearn.nn",)}
NEVER_IMPORTS = {"ddlearn.classical": ("ddlearn.nn",)}
# calls that import a module by name (loading a script file by its path is not one)
DYNAMIC = {"import_module", "__import__"}
TARGET = re.compile(r"(ddlearn(?:\.\w+)*):\w+")


def _module(path: pathlib.Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _layer(module: str) -> int | None:
    if module == "ddlearn":
        return 0  # the root package imports nothing
    for k, name in enumerate(LAYERS):
        if module == name or module.startswith(name + "."):
            return k
    return None


def _functions(tree) -> dict[int, str]:
    """``{id(node): name of the outermost function around it}`` for nodes inside a function."""
    inside = {}
    for f in ast.walk(tree):  # breadth first: an outer function comes before its inner ones
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for n in ast.walk(f):
                if n is not f:
                    inside.setdefault(id(n), f.name)
    return inside


def _called(node) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        return f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
    return None


def violations(module: str, source: str, package: bool = False) -> list[str]:
    """What breaks the layer rules in ``source``, the text of ``module`` (``package``: an
    ``__init__.py``), as messages ``line: what``."""
    here = _layer(module)
    if here is None:
        return [f"0: {module} belongs to no layer"]
    base_package = module if package else module.rpartition(".")[0]
    tree = ast.parse(source)
    inside = _functions(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = base_package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        elif _called(node) in DYNAMIC:
            if (module, inside.get(id(node))) not in LAZY_LOADERS:
                found.append(f"{node.lineno}: imports at run time ({_called(node)}) outside "
                             f"the allowed lazy loaders {sorted(LAZY_LOADERS)}")
            continue
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and TARGET.fullmatch(node.value):
            target = TARGET.fullmatch(node.value).group(1)
            there = _layer(target)
            if there is None or there > here:
                found.append(f"{node.lineno}: lazy target {node.value} is in a higher layer")
            continue
        else:
            continue
        if id(node) in inside:
            found.append(f"{node.lineno}: imports {names[0]} inside a function "
                         f"({inside[id(node)]})")
        for name in names:
            top = name.split(".")[0]
            if top in OPTIONAL and here < _layer(OPTIONAL[top]) \
                    and not module.startswith(EXTRA_USERS.get(top, ("-",))):
                found.append(f"{node.lineno}: imports {top} (an extra) below {OPTIONAL[top]}")
            if top != "ddlearn":
                continue
            there = _layer(name)
            if there is None or there > here:
                found.append(f"{node.lineno}: imports {name} from a higher layer")
            for low, banned in NEVER_IMPORTS.items():
                if module.startswith(low) and name.startswith(banned):
                    found.append(f"{node.lineno}: {low} may not import {name} (a side branch)")
    return found


SOURCES = sorted((ROOT / "ddlearn").rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down_and_sit_at_the_top(path):
    assert violations(_module(path), path.read_text(), path.name == "__init__.py") == [], path


def test_the_layer_table_knows_every_package():
    """Every package is a layer or a sub-package of one (a coarse-space family's package sits
    in its layer), and every layer exists."""
    packages = {_module(p.parent / "__init__.py") for p in SOURCES if p.name == "__init__.py"}
    assert set(LAYERS) <= packages, packages
    assert all(p == "ddlearn" or _layer(p) is not None for p in packages), packages


def test_the_allowed_lazy_loader_exists():
    (module, function), = LAZY_LOADERS
    path = ROOT / (module.replace(".", "/") + ".py")
    assert function in {f.name for f in ast.parse(path.read_text()).body
                        if isinstance(f, ast.FunctionDef)}


LOADER = "import importlib\n\ndef load(t):\n    return importlib.import_module(t)\n"


@pytest.mark.parametrize("module, source, expected", [
    ("ddlearn.pc.registry", LOADER, None),
    ("ddlearn.pc.twolevel", LOADER, "imports at run time (import_module)"),
    ("ddlearn.pc.registry", LOADER.replace("load", "load_more"), "imports at run time"),
    ("ddlearn.pc.registry", "def load(t):\n    import torch\n", "imports torch inside a function"),
    ("ddlearn.pc.registry", "def load(t):\n    return __import__(t)\n", None),
    ("ddlearn.pc", "def __getattr__(name):\n    from .attention import X\n",
     "imports ddlearn.pc.attention inside a function (__getattr__)"),
    ("ddlearn.pc.registry", 'T = {"a": "ddlearn.learned.coarse.learned:Learned"}\n', None),
    ("ddlearn.classical.x", 'T = {"a": "ddlearn.learned.coarse.learned:Learned"}\n',
     "lazy target ddlearn.learned.coarse.learned:Learned is in a higher layer"),
    ("ddlearn.pc.x", 'T = "ddlearn.harness.methods:f"\n', "is in a higher layer"),
    ("ddlearn.classical.x", "import torch\n", "imports torch (an extra) below ddlearn.learned"),
    ("ddlearn.pc.x", "from tqdm.auto import tqdm\n", None),
    ("ddlearn.learned.x", "import matplotlib.pyplot as plt\n", "imports matplotlib (an extra)"),
    ("ddlearn.harness.x", "import matplotlib.pyplot as plt\nimport torch\n", None),
    ("ddlearn.classical.x", "from ..pc import registry\n", "from a higher layer"),
    ("solvers.methods", "", "belongs to no layer"),
])
def test_the_rules_allow_the_lazy_loader_by_name_only(module, source, expected):
    """The checker itself: the dynamic import is allowed in ``registry.load`` and nowhere else,
    an import statement inside any function (even a module's ``__getattr__``) is refused, and
    lazy targets and extras are held to the layers."""
    found = violations(module, source, package=module == "ddlearn.pc")
    if expected is None:
        assert found == []
    else:
        assert any(expected in f for f in found), found


def test_nn_imports_no_petsc():
    """``ddlearn.nn`` and every module of it run where torch is installed and PETSc is not: a
    fresh interpreter importing all of them loads neither petsc4py nor mpi4py's PETSc users."""
    import subprocess
    import sys
    # the distributed forms need mpi4py, still no PETSc
    modules = [_module(p) for p in sorted((ROOT / "ddlearn" / "nn").glob("*.py"))]
    code = ("import sys\n" + "".join(f"import {m}\n" for m in modules)
            + "print('petsc4py' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr
