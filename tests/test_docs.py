"""The documentation cannot rot silently.

- Every Sphinx cross-reference in a docstring of the package (``:mod:``, ``:class:``,
  ``:func:``, ``:meth:``, ``:attr:``, ``:data:``, ``:exc:``, ``:obj:``) names something that
  exists: it is resolved as Sphinx's Python domain would (``~`` dropped; a leading dot searches
  the current module and the packages above it; an unqualified name the current class, the
  current module and the packages above it), by importing the module and following attributes.
- Every file path, script and figure named in ``README.md``, ``docs/*.md``, the studies'
  reports ``benchmarks/results/*/README.md`` and their histories ``HISTORY.md`` exists (written from the repository root; ``build/``
  products must be targets of ``CMakeLists.txt``; a retired file may be named on a page that
  says where it lives in history, ``git show <commit>:<path>``); every relative markdown link
  and image resolves, ``#anchors`` included; every dotted ``ddlearn.…`` name and every
  ``python -m MODULE`` resolves.
- The Python examples in ``README.md`` run, and its headline table is the committed main job's.
- The pages are reference: ``README.md`` lists every package; ``docs/*.md`` name no commit
  (a study's ``HISTORY.md`` keeps the earlier runs); every measured table of the time-to-solution
  and coarse-space pages has the command that measured it in its section, and the time-to-solution
  maps are what their committed JSON gives.

Fast: nothing here starts a process or runs a benchmark.
"""
import ast
import importlib
import importlib.util
import inspect
import json
import re
from pathlib import Path

import pytest

from ddlearn.decomposition.partition import PARTITIONERS
from ddlearn.harness import report
from ddlearn.pc.registry import COARSE_SPACES, coarse_space_class

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ddlearn"

ROLE = re.compile(r":(mod|class|func|meth|attr|data|exc|obj):`([^`]+)`")
LINK = re.compile(r"!?\[([^\]]*)\]\(([^)\s]+)\)")
# a path written from the repository root: a top-level folder of the repository and what follows
# (one level of {a,b} alternatives allowed), or a top-level file
PATH = re.compile(r"(?<![\w/.\-])(?:\./)?((?:benchmarks|examples|scripts|docs|tests|ddlearn|solvers"
                  r"|build|\.ci)/[\w.\-/]*(?:\{[\w.,\-]*\}[\w.\-/]*)*"
                  r"|README\.md|CMakeLists\.txt|pyproject\.toml)")
DOTTED = re.compile(r"(?<![\w.\-/])ddlearn(?:\.\w+)+")
PYTHON_M = re.compile(r"python3?\s+-m\s+([\w.]+)")
PLACEHOLDER = "<*…"  # a path continued by one of these is a pattern, not a file
# a retired file, named where it lives in history: the page may name that path
HISTORY = re.compile(r"git show [0-9a-f]{7,40}:([\w./\-]+)")
CODE_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def documents() -> list[Path]:
    """README.md, the pages in docs/, the studies' reports and their histories."""
    results = ROOT / "benchmarks" / "results"
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted(results.glob("*/README.md")), *sorted(results.glob("*/HISTORY.md"))]


def modules() -> list[str]:
    """Every module of the package, by name."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


# --- resolving a Python name ---------------------------------------------------------------

def _import_longest(name: str):
    """``(object, rest)``: the longest importable module prefix of ``name`` and the attribute
    names after it (``None`` when no prefix imports). A module that exists but fails to import
    raises."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        try:
            return importlib.import_module(module), parts[i:]
        except ModuleNotFoundError as e:
            if e.name and (module == e.name or module.startswith(e.name + ".")):
                continue
            raise
    return None, parts


def _instance_attribute(cls, name: str) -> bool:
    """``name`` is an attribute that instances of ``cls`` get (a dataclass field, an annotated
    attribute or one assigned as ``self.name``)."""
    for klass in inspect.getmro(cls):
        if name in getattr(klass, "__dataclass_fields__", {}) or \
                name in getattr(klass, "__annotations__", {}):
            return True
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        if re.search(rf"\bself\.{re.escape(name)}\b", source):
            return True
    return False


def resolves(name: str) -> bool:
    """Whether the dotted ``name`` is a module or an attribute path from one."""
    obj, rest = _import_longest(name)
    if obj is None:
        return False
    for k, attr in enumerate(rest):
        try:
            obj = getattr(obj, attr)
        except AttributeError:
            return k == len(rest) - 1 and inspect.isclass(obj) and _instance_attribute(obj, attr)
    return True


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(len(parts), 0, -1)]


def candidates(target: str, module: str, cls: str | None) -> list[str]:
    """The full names a docstring's cross-reference ``target`` may mean, in Sphinx's order."""
    if "<" in target and target.endswith(">"):  # :func:`title <target>`
        target = target[target.index("<") + 1:-1]
    target = target.strip().lstrip("~").removesuffix("()")
    if target.startswith("."):
        return [f"{p}.{target.lstrip('.')}" for p in _parents(module)]
    scoped = [f"{module}.{cls}.{target}"] if cls else []
    return scoped + [f"{p}.{target}" for p in _parents(module)] + [target]


def docstring_references(module: str) -> list[tuple[int, str, str, str | None]]:
    """``(line, role, target, enclosing class)`` of every cross-reference in the docstrings of
    ``module`` (module, classes, functions, and the string literals that document attributes)."""
    path = ROOT / Path(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    tree = ast.parse(path.read_text(), str(path))
    found = []

    def visit(node, cls):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Expr) and isinstance(child.value, ast.Constant) and \
                    isinstance(child.value.value, str):
                for m in ROLE.finditer(child.value.value):
                    found.append((child.lineno, m.group(1), m.group(2), cls))
            inner = child.name if isinstance(child, ast.ClassDef) else cls
            visit(child, inner)

    visit(tree, None)
    return found


@pytest.mark.parametrize("module", modules())
def test_docstring_references_resolve(module):
    importlib.import_module(module)
    broken = [f"{module}:{line}: :{role}:`{target}`"
              for line, role, target, cls in docstring_references(module)
              if not any(resolves(c) for c in candidates(target, module, cls))]
    assert not broken, "cross-references to nothing:\n" + "\n".join(broken)


# --- what a page names ----------------------------------------------------------------------

def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


def _expand(path: str) -> list[str]:
    """``a{b,c}d`` -> ``[abd, acd]`` (one group)."""
    m = re.search(r"\{([^}]*)\}", path)
    if not m:
        return [path]
    return [path[:m.start()] + alt + path[m.end():] for alt in m.group(1).split(",")]


def _cmake_targets() -> set[str]:
    text = (ROOT / "CMakeLists.txt").read_text()
    return {m.group(2) for m in re.finditer(r"add_(executable|library)\(\s*(\w+)", text)}


def _built(path: str) -> bool:
    """A ``build/`` path: the folder, or a target of CMakeLists.txt (``libNAME.so`` for a
    library)."""
    name = path.removeprefix("build").strip("/")
    if not name:
        return True
    name = re.sub(r"^lib(\w+)\.so$", r"\1", name)
    return name in _cmake_targets()


def problems(page: Path) -> list[str]:
    """What ``page`` names that does not exist."""
    text = page.read_text()
    out = []
    for m in LINK.finditer(text):
        target = m.group(2)
        if re.match(r"[a-z][\w+.-]*:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            out.append(f"link to a missing file: {target}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"link to a missing heading: {target}")
    prose = LINK.sub(lambda m: m.group(1), text)  # link targets are checked above
    historical = set(HISTORY.findall(prose))
    for m in PATH.finditer(prose):
        if prose[m.end():m.end() + 1] in PLACEHOLDER and m.end() < len(prose):
            continue
        token = m.group(1).rstrip(".,;:")
        for path in _expand(token):
            if path in historical:
                continue
            ok = _built(path) if path.startswith("build/") or path == "build" \
                else (ROOT / path).exists()
            if not ok:
                out.append(f"missing path: {path}")
    for m in DOTTED.finditer(prose):
        if not resolves(m.group(0)):
            out.append(f"no such Python name: {m.group(0)}")
    for m in PYTHON_M.finditer(prose):
        if importlib.util.find_spec(m.group(1)) is None:
            out.append(f"no such module: python -m {m.group(1)}")
    return sorted(set(out))


@pytest.mark.parametrize("page", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_name_what_exists(page):
    found = problems(page)
    assert not found, f"{page.relative_to(ROOT)}:\n" + "\n".join(found)


def test_the_pages_are_checked():
    """The front door and every page the issue of a newcomer asks for are among the checked."""
    names = {p.relative_to(ROOT).as_posix() for p in documents()}
    for page in ("README.md", "docs/user_guide.md", "docs/coarse_spaces.md",
                 "docs/learned_coarse_space.md", "docs/insitu.md", "docs/native.md",
                 "docs/operator_learning.md", "docs/developing.md", "docs/design.md",
                 "docs/learned_preconditioner.md"):
        assert page in names


@pytest.mark.parametrize("index", range(len(CODE_BLOCK.findall((ROOT / "README.md").read_text()))))
def test_readme_python_examples_run(index):
    code = CODE_BLOCK.findall((ROOT / "README.md").read_text())[index]
    exec(compile(code, f"README.md python example {index + 1}", "exec"), {"__name__": "readme"})


# --- the lists that must follow the code ----------------------------------------------------

OPTION_READ = re.compile(r"\.get(?:String|Int|Real|Bool)\(\s*\"(\w+)\"")


def _first_column(text: str, heading: str) -> set[str]:
    """The backquoted names in the first column of the first table after ``heading``."""
    section = text[text.index(heading):]
    table = re.search(r"^\|.*?(?=^[^|])", section, re.M | re.S).group(0)
    return set(re.findall(r"^\|\s*`([\w+]+)`", table, re.M))


def test_readme_headline_is_the_committed_main_job():
    """The README's headline table is what ``python -m ddlearn.harness.report --headline``
    makes from the main job's committed JSON: it cannot drift from the data."""
    readme = (ROOT / "README.md").read_text()
    marked = re.search(r"<!-- headline -->\n(.*?)\n<!-- /headline -->", readme, re.S)
    assert marked, "README.md lost its <!-- headline --> markers"
    results = ROOT / "benchmarks" / "results" / "main_job"
    reports = [json.loads((results / name).read_text()) for name, _ in report.HEADLINE]
    assert marked.group(1) == report.headline(reports, [label for _, label in report.HEADLINE])


def test_docs_list_every_coarse_space_and_partitioner():
    readme = (ROOT / "README.md").read_text()
    assert _first_column(readme, "## Coarse spaces") == set(COARSE_SPACES)
    guide = (ROOT / "docs" / "coarse_spaces.md").read_text()
    assert _first_column(guide, "## Subdomains") == set(PARTITIONERS)


def test_user_guide_lists_every_option():
    """Every option the PCs and the coarse-space families read is in the options reference."""
    guide = (ROOT / "docs" / "user_guide.md").read_text()
    missing = []
    for path in sorted((PACKAGE / "pc").glob("*.py")):  # the PCs' own options: -ddlearn_NAME
        for name in set(OPTION_READ.findall(path.read_text())) - {"ksp_type"}:
            if f"-ddlearn_{name}" not in guide:
                missing.append(f"-ddlearn_{name} ({path.relative_to(ROOT)})")
    for family in COARSE_SPACES:  # a family's options: -ddlearn_FAMILY_NAME, or a table row
        source = inspect.getsource(inspect.getmodule(coarse_space_class(family)))
        for name in set(OPTION_READ.findall(source)):
            if f"ddlearn_{family}_{name}" not in guide and f"| `{name}" not in guide:
                missing.append(f"-ddlearn_{family}_{name}")
    assert not missing, "options missing from docs/user_guide.md: " + ", ".join(sorted(missing))


# --- reference pages: what holds now, traceable to the committed JSON --------------------------

COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
NOTEBOOK = re.compile(r"\b(?:previous|earlier|last|first) (?:run|version)s?\b|\bthis pass\b", re.I)
TABLE = re.compile(r"^\|.*\|\n\|[-:| ]+\|\n(?:\|.*\|\n?)+", re.M)
NUMBER = re.compile(r"^\**[\d.]+\**$")
COMMAND = re.compile(r"python3? (?:-m [\w.]+|benchmarks/\w+\.py|examples/\w+\.py)")


def test_readme_lists_every_package():
    """Every package of ``ddlearn`` has its row in the README's "What is here"."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## What is here"):]
    rows = set(re.findall(r"^\|\s*`([\w/]+)/?`", section, re.M))
    packages = {p.parent.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("__init__.py")}
    missing = sorted(packages - {"ddlearn"} - rows)
    assert not missing, "packages missing from README.md's What is here: " + ", ".join(missing)


@pytest.mark.parametrize("page", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_docs_pages_are_reference_not_a_notebook(page):
    """A page says what holds now: the commits and earlier runs of a study live in its
    ``HISTORY.md`` (a retired file may still be named by ``git show <commit>:<path>``)."""
    text = HISTORY.sub("", page.read_text())
    found = sorted(set(COMMIT.findall(text)) | {m.group(0) for m in NOTEBOOK.finditer(text)})
    assert not found, f"{page.name} reads as a lab notebook: " + ", ".join(found)


def _sections(text: str) -> list[str]:
    return re.split(r"^#+ .*$", text, flags=re.M)


@pytest.mark.parametrize("name", ["time_to_solution.md", "coarse_spaces.md"])
def test_measured_tables_name_their_command(name):
    """Every table holding a measured number has, in its section above it, the command that
    measured or regenerates it, or is a summary whose every row links to where it is measured."""
    bare = []
    for section in _sections((ROOT / "docs" / name).read_text()):
        for table in TABLE.finditer(section):
            cells = [c.strip() for line in table.group(0).splitlines()[2:]
                     for c in line.strip("|").split("|")]
            linked = all(LINK.search(line) for line in table.group(0).splitlines()[2:])
            if any(NUMBER.match(c) for c in cells) and not linked and \
                    not COMMAND.search(section[:table.start()]):
                bare.append(table.group(0).splitlines()[0])
    assert not bare, f"docs/{name}: tables without their command:\n" + "\n".join(bare)


def _map(rows: list[dict]) -> dict[str, tuple]:
    """Per case: ddlearn's fastest converged configuration and GAMG's fastest converged
    variant, as the time-to-solution study's map defines them."""
    out = {}
    for case in dict.fromkeys(r["case"] for r in rows):
        ok = [r for r in rows if r["case"] == case and r.get("converged")]
        ours = [r for r in ok if r["N"] is not None]
        gamg = [r for r in ok if r["N"] is None and r["method"].startswith("gamg")]
        if ours and gamg:
            a, b = min(ours, key=lambda r: r["total_s"]), min(gamg, key=lambda r: r["total_s"])
            out[case] = (f"{a['method']} N={a['N']}", a, b["method"], b,
                         f"{a['total_s'] / b['total_s']:.2f}")
    return out


def test_time_to_solution_maps_are_the_committed_json():
    """The 2-rank map and the 8-rank table of docs/time_to_solution.md are the committed runs'."""
    text = (ROOT / "docs" / "time_to_solution.md").read_text()
    results = ROOT / "benchmarks" / "results" / "time_to_solution"
    for heading, name, total in (("## The map", "time_to_solution.json", True),
                                 ("## Eight ranks on two cores", "time_to_solution_8ranks.json",
                                  False)):
        section = text[text.index(heading):]
        table = TABLE.search(section).group(0).splitlines()[2:]
        expected = _map(json.loads((results / name).read_text())["rows"])
        for line in table:
            cells = [c.strip() for c in line.strip("|").split("|")]
            ours, a, gamg, b, ratio = expected[cells[0]]

            def figure(r):
                return f"{r['total_s']:.2f}" if total else \
                    f"{r['setup_s']:.2f} + {r['solve_s']:.2f}"
            assert cells[1:8] == [ours, str(a["iterations"]), figure(a), gamg,
                                  str(b["iterations"]), figure(b), ratio], line
        assert len(table) == len(expected), f"{name}: the page's table misses cases"


# --- the checker itself fails on what is broken -----------------------------------------------

def test_checker_reports_broken_targets(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\nSee [the guide](missing.md), [here](#title), [there](#nowhere),\n"
                    "`benchmarks/no_such_study.py`, `build/no_such_program`, `examples/poisson.py`,\n"
                    "`ddlearn.pc.NoSuchPC`, `ddlearn.pc.TwoLevelSchwarzPC` and\n"
                    "`python -m ddlearn.no_such_module`; the retired `benchmarks/old.py`\n"
                    "(`git show 0123abc:benchmarks/old.py`) and the never-existing `benchmarks/new.py`.\n")
    assert problems(page) == sorted([
        "link to a missing file: missing.md",
        "link to a missing heading: #nowhere",
        "missing path: benchmarks/no_such_study.py",
        "missing path: build/no_such_program",
        "missing path: benchmarks/new.py",
        "no such Python name: ddlearn.pc.NoSuchPC",
        "no such Python name: ddlearn.no_such_module",
        "no such module: python -m ddlearn.no_such_module",
    ])


def test_resolver_follows_sphinx_scoping():
    module = "ddlearn.classical.coarse.gdsw"
    assert any(resolves(c) for c in candidates(".interface", module, None))
    assert any(resolves(c) for c in candidates("~ddlearn.pc.twolevel.TwoLevelSchwarzPC", module,
                                               None))
    assert not any(resolves(c) for c in candidates(".no_such_module", module, None))
    assert not any(resolves(c) for c in candidates("NoSuchClass.method", module, None))
    assert any(resolves(c) for c in candidates("timing", "ddlearn.pc.twolevel",
                                               "TwoLevelSchwarzPC"))
