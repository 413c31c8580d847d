"""Every library exposes its implementation through ``__init__`` and ``__all__`` (DESIGN.md, Style)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

PACKAGES = ["mirbad_protocol", "mirbad_runtime", "mirbad_orchestration", "mirbad_router", "mirbad_client"]


def _private_modules(package: str) -> list[str]:
    module = importlib.import_module(package)
    return [
        f"{package}.{info.name}"
        for info in pkgutil.iter_modules(module.__path__)
        if info.name.startswith("_") and not info.name.startswith("__")
    ]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_private_public_name_is_reexported(package: str) -> None:
    root = importlib.import_module(package)
    exported = set(getattr(root, "__all__", []))
    for name in _private_modules(package):
        module = importlib.import_module(name)
        missing = set(getattr(module, "__all__", [])) - exported
        assert not missing, f"{name} defines {sorted(missing)} but {package}.__all__ does not re-export them"


@pytest.mark.parametrize("package", PACKAGES)
def test_all_names_resolve(package: str) -> None:
    root = importlib.import_module(package)
    for name in getattr(root, "__all__", []):
        assert hasattr(root, name), f"{package}.__all__ names {name!r}, which does not exist"


@pytest.mark.parametrize("package", PACKAGES)
def test_private_modules_declare_all(package: str) -> None:
    for name in _private_modules(package):
        module = importlib.import_module(name)
        assert hasattr(module, "__all__"), f"{name} has no __all__"


def test_an_exception_name_means_one_class_across_the_libraries() -> None:
    # Two classes under one name (a driver's LaunchRejectedError and the agent client's) make an
    # `except` clause catch something else than its reader thinks once both libraries are imported.
    seen: dict[str, tuple[str, type[BaseException]]] = {}
    clashes: list[str] = []
    for package in PACKAGES:
        root = importlib.import_module(package)
        for name in getattr(root, "__all__", []):
            value = getattr(root, name)
            if not (isinstance(value, type) and issubclass(value, BaseException)):
                continue
            first = seen.setdefault(name, (package, value))
            if first[1] is not value:
                clashes.append(f"{name} ({first[0]} and {package})")
    assert clashes == []
