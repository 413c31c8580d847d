"""Every library exposes its implementation through ``__init__`` and ``__all__`` (DESIGN.md, Style).

A library may be split into public subpackages by concept (``mirbad_orchestration.fleet``); each
``_private`` module's public names are then re-exported by the nearest public package above it, or by a
public module beside it that gathers one concern (``mirbad_protocol.agent``: the root keeps its core).
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

PACKAGES = ["mirbad_protocol", "mirbad_runtime", "mirbad_orchestration", "mirbad_router", "mirbad_client"]


def _is_private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def _public_packages(package: str) -> list[ModuleType]:
    """``package`` and every public package below it (no part of the dotted name starts with ``_``)."""
    root = importlib.import_module(package)
    found = [root]
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        if info.ispkg and not _is_private(info.name):
            found.append(importlib.import_module(info.name))
    return found


def _private_modules(package: ModuleType) -> list[ModuleType]:
    """The ``_private`` modules directly inside ``package``: the ones it is the nearest public package of."""
    return [
        importlib.import_module(f"{package.__name__}.{info.name}")
        for info in pkgutil.iter_modules(package.__path__)
        if info.name.startswith("_") and not info.name.startswith("__")
    ]


def _all_public_packages() -> list[ModuleType]:
    return [found for package in PACKAGES for found in _public_packages(package)]


PUBLIC_PACKAGES = _all_public_packages()


def _public_modules(package: ModuleType) -> list[ModuleType]:
    """The public plain modules directly inside ``package`` (``mirbad_protocol.agent``)."""
    return [
        importlib.import_module(f"{package.__name__}.{info.name}")
        for info in pkgutil.iter_modules(package.__path__)
        if not info.ispkg and not info.name.startswith("_")
    ]


@pytest.mark.parametrize("package", PUBLIC_PACKAGES, ids=lambda package: package.__name__)
def test_every_private_public_name_is_reexported(package: ModuleType) -> None:
    exported = set(getattr(package, "__all__", []))
    for public in _public_modules(package):
        exported |= set(getattr(public, "__all__", []))
    for module in _private_modules(package):
        missing = set(getattr(module, "__all__", [])) - exported
        where = f"{package.__name__}.__all__ (or a public module beside it)"
        assert not missing, f"{module.__name__} defines {sorted(missing)} but {where} does not re-export them"


@pytest.mark.parametrize("package", PUBLIC_PACKAGES, ids=lambda package: package.__name__)
def test_all_names_resolve(package: ModuleType) -> None:
    for name in getattr(package, "__all__", []):
        assert hasattr(package, name), f"{package.__name__}.__all__ names {name!r}, which does not exist"


@pytest.mark.parametrize("package", PUBLIC_PACKAGES, ids=lambda package: package.__name__)
def test_public_packages_declare_all_and_say_what_they_are(package: ModuleType) -> None:
    assert hasattr(package, "__all__"), f"{package.__name__} has no __all__"
    assert (package.__doc__ or "").strip(), f"{package.__name__} has no docstring"


@pytest.mark.parametrize("package", PUBLIC_PACKAGES, ids=lambda package: package.__name__)
def test_private_modules_declare_all(package: ModuleType) -> None:
    for module in _private_modules(package):
        assert hasattr(module, "__all__"), f"{module.__name__} has no __all__"


def test_a_subpackage_is_found_with_its_private_modules() -> None:
    # Guards the walk above: were subpackages missed, the checks would pass on nothing.
    names = {package.__name__ for package in PUBLIC_PACKAGES}
    assert {"mirbad_orchestration.fleet", "mirbad_orchestration.stores"} <= names
    fleet = importlib.import_module("mirbad_orchestration.fleet")
    assert "mirbad_orchestration.fleet._nodes" in {module.__name__ for module in _private_modules(fleet)}


def test_an_exception_name_means_one_class_across_the_libraries() -> None:
    # Two classes under one name (a driver's LaunchRejectedError and the agent client's) make an
    # `except` clause catch something else than its reader thinks once both libraries are imported.
    seen: dict[str, tuple[str, type[BaseException]]] = {}
    clashes: list[str] = []
    for package in PUBLIC_PACKAGES:
        for name in getattr(package, "__all__", []):
            value = getattr(package, name)
            if not (isinstance(value, type) and issubclass(value, BaseException)):
                continue
            first = seen.setdefault(name, (package.__name__, value))
            if first[1] is not value:
                clashes.append(f"{name} ({first[0]} and {package.__name__})")
    assert clashes == []


TESTS = Path(__file__).parent


def _nearest_public(dotted: str) -> str | None:
    """The package above the first ``_private`` part of ``dotted``; None when no part is private."""
    parts = dotted.split(".")
    for index, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:index]) or None
    return None


def _private_path_imports(path: Path) -> Iterator[tuple[int, str, str, str]]:
    """(line, private module, public package, name) for each name a test imports by a private path."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        if not node.module.startswith("mirbad_"):
            continue
        public = _nearest_public(node.module)
        if public is not None:
            yield from ((node.lineno, node.module, public, alias.name) for alias in node.names)


def test_tests_import_public_names_from_the_public_package() -> None:
    # A test that reaches a public name through a private path breaks on every internal move and shows a
    # newcomer the wrong import; names a package keeps private may still be tested where they live.
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        for line, module, public, name in _private_path_imports(path):
            if name in getattr(importlib.import_module(public), "__all__", ()):
                offenders.append(
                    f"{path.relative_to(TESTS)}:{line}: from {module} import {name} → from {public}"
                )
    assert not offenders, "\n".join(offenders)
