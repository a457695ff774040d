"""The package's layout shows its architecture: the pattern at the top, topics and pictures
beside it, the course's machinery above everything, and imports that flow one way."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "idemlib"
TOPICS = ("brokers", "http", "long_work", "retention_and_ordering", "operating", "case_study")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Every idemlib module ``path`` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from idemlib.x import y` may name a submodule y or a name inside x.
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [name if name in known else node.module for name in names]
        else:
            continue
        found |= {name for name in names if name in known}
    return found


def layer(module: str) -> int:
    """0 the pattern (top-level modules, stores, servers), 1 the pictures, 2 a topic, 3 the course."""
    parts = module.split(".")
    if len(parts) == 1:
        return 0
    return {"pictures": 1, "course": 3, **{topic: 2 for topic in TOPICS}}.get(parts[1], 0)


def graph() -> dict[str, set[str]]:
    known = set(modules())
    return {name: imports_of(path, known) - {name} for name, path in modules().items()}


def test_at_most_fifteen_modules_at_the_top() -> None:
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= 15, f"{len(top)} modules at the top of idemlib/: {top}; move topic modules into their subpackage"


def test_every_subpackage_says_what_it_holds_and_is_in_the_readme_map() -> None:
    readme = (PACKAGE.parent / "README.md").read_text(encoding="utf-8")
    for init in PACKAGE.glob("*/__init__.py"):
        package = init.parent.name
        assert ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))), f"idemlib/{package} needs a docstring"
        assert f"`{package}/`" in readme, f"the README's map of idemlib does not name {package}/"


def test_imports_flow_one_way() -> None:
    wrong = [f"{source} imports {target}" for source, targets in graph().items() for target in targets
             if layer(target) > layer(source) and not (source == "idemlib" and layer(target) == 0)
             # The deliver-twice helper is re-exported, on first use, for readers' own suites.
             and (source, target) != ("idemlib", "idemlib.operating.testing")]
    assert not wrong, "a lower layer imports a higher one:\n" + "\n".join(wrong)


def test_no_import_cycle_even_inside_functions() -> None:
    edges = graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(edges[node]):
            if state.get(target) == 1:
                cycle = stack[stack.index(target):] + [target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)


def test_the_layer_rule_catches_a_core_module_importing_the_course() -> None:
    assert layer("idemlib.course.grade") > layer("idemlib.handlers")
    assert layer("idemlib.pictures.plots") > layer("idemlib.stores.sql")
    assert layer("idemlib.operating.testing") > layer("idemlib.pictures.scenes")
