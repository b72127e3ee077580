"""The package's layers import downwards only, with no import hidden inside a function.

Layers, bottom to top: ``ddlearn.decomposition`` < ``ddlearn.classical`` < ``ddlearn.learned``
< ``ddlearn.pc``; the comparison harness ``solvers`` sits above all of them and nothing in
``ddlearn`` imports it. Checked on the source with :mod:`ast`, so it holds whatever the tests
happen to import.
"""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYERS = ["ddlearn.decomposition", "ddlearn.classical", "ddlearn.learned", "ddlearn.pc",
          "solvers"]


def _module(path: pathlib.Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _layer(module: str) -> int | None:
    if module == "ddlearn":
        return 0  # the root package imports nothing
    for k, name in enumerate(LAYERS):
        if module == name or module.startswith(name + "."):
            return k
    return None


def _imports(path: pathlib.Path):
    """``(imported module, line, inside a function)`` for every import of the project."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    nested = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef,
                                                             ast.AsyncFunctionDef))
              for n in ast.walk(f) if n is not f}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if _layer(name) is not None or name.split(".")[0] in ("ddlearn", "solvers"):
                yield name, node.lineno, id(node) in nested


SOURCES = sorted(p for d in ("ddlearn", "solvers") for p in (ROOT / d).rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down_and_sit_at_the_top(path):
    here = _layer(_module(path))
    assert here is not None, f"{path} belongs to no layer"
    for name, line, inside in _imports(path):
        there = _layer(name)
        assert there is not None and there <= here, \
            f"{path}:{line} imports {name} from a higher layer ({LAYERS[there or 0]})"
        assert not inside, f"{path}:{line} imports {name} inside a function"


def test_the_layer_table_knows_every_package():
    """Every package is a layer or a sub-package of one (a coarse-space family's package sits
    in its layer), and every layer exists."""
    packages = {_module(p.parent / "__init__.py") for p in SOURCES if p.name == "__init__.py"}
    assert set(LAYERS) <= packages, packages
    assert all(p == "ddlearn" or _layer(p) is not None for p in packages), packages
