"""The package's layout holds: four layers that import only downward (the library, then the
tasks, then the studies, then the command line), no import circles, files one reads in a
sitting and no one-caller fragments, and design references that lead somewhere.

A fragment is a module under MIN_LINES lines that exactly one other module of the package
imports: it belongs in that module. Exempt are a package's `__init__.py`, `__main__.py`, the
command modules under `cli/` (one file per command, whatever its length) and the entry points
pyproject.toml names (console scripts, plugins), which are reached from outside the package."""

from __future__ import annotations

import ast
import functools
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SRC = Path(__file__).resolve().parents[1] / "src"
DESIGN = Path(__file__).resolve().parents[1] / "docs" / "design.md"
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
LAYERS = ("fixedfirst.tasks", "fixedfirst.studies", "fixedfirst.cli")
"""The layers above the library, lowest first: a module may import its own layer and those
below it, never one above (the library is every module outside these)."""
MAX_LINES = 600
MIN_LINES = 40


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / "fixedfirst").rglob("*.py")):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The fixedfirst modules `name` imports, at any level (inside functions too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        for target in targets:
            while target and target not in known:  # `from pkg import name`: name may be no module
                target = target.rpartition(".")[0]
            if target.startswith("fixedfirst") and target != name:
                found.add(target)
    return found


@functools.cache
def graph() -> dict[str, set[str]]:
    """Every module's imports, parsed once for the tests of this module (0.4 s of CPU a parse):
    they read it and never change it."""
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def layer(name: str) -> int:
    """0 for the library, 1 + the index in LAYERS above it."""
    for i, prefix in enumerate(LAYERS, 1):
        if name == prefix or name.startswith(prefix + "."):
            return i
    return 0


def test_layers_import_only_downward():
    """library <- tasks <- studies <- cli; the package root and `python -m fixedfirst` sit
    outside the layers (the root imports lazily by name, __main__ starts the command line)."""
    upward = [
        f"{name} imports {dep}"
        for name, deps in graph().items()
        if name not in ("fixedfirst", "fixedfirst.__main__")
        for dep in deps
        if layer(dep) > layer(name)
    ]
    assert upward == []


def test_every_layer_is_present():
    """A renamed layer would make the rule above vacuous for it."""
    assert {layer(name) for name in modules()} == set(range(len(LAYERS) + 1))


def test_no_import_circles():
    """Between files: a package __init__ that re-exports its own children is no circle."""
    edges = graph()
    circles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(edges.get(node, ())):
            if dep.startswith(node + ".") or node.startswith(dep + "."):
                continue  # a package and its own modules
            if state.get(dep) == 1:
                circles.append(" -> ".join([*path[path.index(dep) :], dep]))
            elif dep not in state:
                visit(dep, [*path, dep])
        state[node] = 2

    for name in sorted(edges):
        if name not in state:
            visit(name, [name])
    assert circles == []


def enclosing_packages(name: str, known: dict[str, Path]) -> list[str]:
    """The packages below the root that hold module `name`, outermost first; a module directly
    under the root (fixedfirst.schedules) stands for itself. `known` is `modules()`, listed once
    by the caller (listing the tree for every pair of the graph cost 9 s of CPU)."""
    parts = name.split(".")
    return [
        prefix
        for i in range(2, len(parts) + 1)
        if (prefix := ".".join(parts[:i])) in known
        and (i == 2 or known[prefix].name == "__init__.py")
    ]


def test_no_two_packages_import_each_other():
    """At every level (fixedfirst.train and fixedfirst.evaluation; studies.sweep and
    studies.chains): a package that stands both above and below another is two packages' worth
    of dependencies with no order between them."""
    known = modules()
    edges: dict[str, set[str]] = {}
    for name, deps in graph().items():
        for dep in deps:
            for a in enclosing_packages(name, known):
                for b in enclosing_packages(dep, known):
                    if not (a == b or a.startswith(b + ".") or b.startswith(a + ".")):
                        edges.setdefault(a, set()).add(b)
    mutual = sorted(
        f"{a} <-> {b}" for a in edges for b in edges[a] if a < b and a in edges.get(b, ())
    )
    assert mutual == []


RUN_READERS = (
    "fixedfirst.runs",
    "fixedfirst.evaluation",
    "fixedfirst.serve",
    "fixedfirst.export",
    "fixedfirst.harness",
    "fixedfirst.inspection",
    *(f"fixedfirst.cli.{c}_cmd" for c in ("eval", "generate", "export", "inspect", "downstream")),
)
"""What reads a run without training one: a run on disk is `fixedfirst.runs`, below the trainer."""


def test_nothing_that_reads_runs_imports_the_trainer():
    """Not directly, nor through anything it imports."""
    edges = graph()

    def reached(name: str) -> set[str]:
        seen: set[str] = set()
        todo = [name]
        while todo:
            for dep in edges.get(todo.pop(), ()):
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return seen

    trainer = {
        f"{name} -> {dep}"
        for name in edges
        if any(name == r or name.startswith(r + ".") for r in RUN_READERS)
        for dep in reached(name)
        if dep == "fixedfirst.train" or dep.startswith("fixedfirst.train.")
    }
    assert trainer == set()


def test_files_are_read_in_one_sitting():
    long = {
        str(p.relative_to(SRC)): n
        for p in modules().values()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def entry_points() -> set[str]:
    """The modules pyproject.toml names as console scripts or plugin entry points."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    groups = [project.get("scripts", {}), *project.get("entry-points", {}).values()]
    return {target.partition(":")[0] for group in groups for target in group.values()}


def fragment_exempt(name: str, path: Path) -> bool:
    return (
        path.name in ("__init__.py", "__main__.py")
        or name.startswith("fixedfirst.cli.")
        or name in entry_points()
    )


def test_no_module_is_a_small_fragment_of_its_one_importer():
    importers: dict[str, set[str]] = {}
    for name, deps in graph().items():
        for dep in deps:
            importers.setdefault(dep, set()).add(name)
    fragments = {
        f"{name} ({n} lines)": sorted(importers[name])
        for name, path in modules().items()
        if not fragment_exempt(name, path)
        and (n := len(path.read_text().splitlines())) < MIN_LINES
        and len(importers.get(name, ())) == 1
    }
    assert fragments == {}


def test_the_entry_points_exist():
    """The exemption names real modules (a renamed entry point would silently exempt nothing)."""
    assert entry_points() and entry_points() <= set(modules())


def test_design_references_point_at_sections_that_exist():
    sections = set(re.findall(r"^## (\d+)\. ", DESIGN.read_text(), flags=re.M))
    assert sections, "docs/design.md has no numbered sections"
    for path in modules().values():
        text = path.read_text()
        assert "DESIGN.md" not in text, path
        for number in re.findall(r"docs/design\.md §(\d+)", text):
            assert number in sections, f"{path} cites docs/design.md §{number}"


def test_the_package_and_its_command_line_start_without_the_optional_extras():
    """transformers, lm-eval and its datasets are optional (`[hf]`, `[eval]`): the package, the
    serving, harness and export packages and the CLI parser import without them, in a process
    of their own (one for all three: each costs seconds of CPU importing torch)."""
    import subprocess

    code = (
        "import sys, fixedfirst, fixedfirst.serve, fixedfirst.harness, fixedfirst.export.hf\n"
        "from fixedfirst.cli.main import build_parser\n"
        "build_parser()\n"
        "imported = {'transformers', 'lm_eval', 'datasets'} & set(sys.modules)\n"
        "assert not imported, f'imported at start: {sorted(imported)}'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=SRC.parent)


MAX_PARAMETERS = 7
WIDE_CHECKED = ("serve", "train", "model")
"""Packages whose public functions take at most MAX_PARAMETERS parameters: past that, what
travels together is one typed value (a decoding mode, a step's context)."""


def parameters(function: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> list[str]:
    """The names a caller may pass: self/cls of a method not counted, *args and **kwargs are."""
    a = function.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    names += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
    static = any(getattr(d, "id", None) == "staticmethod" for d in function.decorator_list)
    return names[1:] if method and not static else names


def wide_functions(tree: ast.Module) -> list[str]:
    found = []
    scopes: list[tuple[list[ast.stmt], bool]] = [(tree.body, False)]
    while scopes:
        body, method = scopes.pop()
        for node in body:
            if isinstance(node, ast.ClassDef):
                scopes.append((node.body, True))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names = parameters(node, method)
                if not node.name.startswith("_") and len(names) > MAX_PARAMETERS:
                    found.append(f"{node.name}({', '.join(names)})")
    return found


def test_public_functions_take_at_most_seven_parameters():
    """Module-level functions and methods of serve/, train/ and model/ whose names do not start
    with `_`."""
    wide = {
        str(path.relative_to(SRC)): found
        for package in WIDE_CHECKED
        for path in sorted((SRC / "fixedfirst" / package).rglob("*.py"))
        if (found := wide_functions(ast.parse(path.read_text())))
    }
    assert wide == {}


KIT = "fixedfirst.studies.kit"
COMPOSED = {"fixedfirst.studies.ablation": {"fixedfirst.studies.bios", "fixedfirst.studies.chains"}}
"""A study that stands on other studies: the ablation trains bios's or chains's preset."""


def study_of(name: str) -> str | None:
    """The unit directly under fixedfirst.studies that holds module `name` (a study package, the
    kit, or a module of its own); None outside the studies layer or for the layer itself."""
    parts = name.split(".")
    if parts[:2] != ["fixedfirst", "studies"] or len(parts) < 3:
        return None
    return ".".join(parts[:3])


def test_the_study_kit_imports_no_study():
    """Everything a study stands on is below it: the kit imports the library and the tasks."""
    found = [
        f"{name} imports {dep}"
        for name, deps in graph().items()
        if study_of(name) == KIT
        for dep in deps
        if study_of(dep) not in (None, KIT)
    ]
    assert found == []


def test_every_study_is_a_leaf_on_the_kit():
    """Of the studies layer a study imports only itself and the kit (the ablation also the
    studies it composes), so a study is read, changed or removed without the others."""
    found = [
        f"{name} imports {dep}"
        for name, deps in graph().items()
        if (study := study_of(name)) not in (None, KIT)
        for dep in deps
        if study_of(dep) not in (None, KIT, study, *COMPOSED.get(study or "", ()))
    ]
    assert found == []
    assert {study_of(name) for name in modules()} >= {KIT, *COMPOSED}, "a unit was renamed"
