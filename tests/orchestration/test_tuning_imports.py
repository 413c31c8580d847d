"""The tuning package's modules import one another one way: no cycle, not even under TYPE_CHECKING."""

from __future__ import annotations

import ast
from pathlib import Path

import mirbad_orchestration.tuning as tuning

PACKAGE = Path(tuning.__file__).parent


def _imports(path: Path) -> set[str]:
    """The package's own modules ``path`` imports (``from ._x import …``, wherever the statement is)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_tuning_modules_import_each_other_without_a_cycle() -> None:
    graph = {path.stem: _imports(path) for path in PACKAGE.glob("_*.py") if path.stem != "__init__"}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import cycle: {' -> '.join((*path, module))}"
        if module in done:
            return
        for imported in sorted(graph.get(module, ())):
            visit(imported, (*path, module))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())
    assert "_engine" not in graph["_confirmation"]
