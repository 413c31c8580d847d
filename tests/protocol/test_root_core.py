"""mirbad_protocol's root exports its core and nothing else; every other name has one public home.

The rule is in the package's docstring: the root holds what every side of the fleet speaks (the wire
base and its field rules, the model definition, statuses, the launch spec, the exceptions tree); each
conversation's names come from its public submodule, and the helpers that are no protocol from
``mirbad_protocol.support``.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import mirbad_protocol

CORE = [
    "MODEL_ID_PATTERN",
    "USER_INPUT",
    "USER_INPUT_LIMITS",
    "CertificateRequestError",
    "ComputeAppsFormatError",
    "ContainerLaunch",
    "ExecutableRef",
    "GpuMemory",
    "GpuSelection",
    "InsecureKeyFileError",
    "InvalidFieldError",
    "LaunchSpec",
    "MemorySnapshot",
    "MirbadError",
    "MirbadProtocolError",
    "ModelDefinition",
    "ModelMetrics",
    "ModelSource",
    "ModelState",
    "ModelStatus",
    "PinMismatchError",
    "PkiError",
    "Placement",
    "ProcessLaunch",
    "RouterModelStats",
    "RuntimeKind",
    "SpeculativeDecoding",
    "UserCheck",
    "UserMaximum",
    "WireModel",
    "check_storable_text",
    "field_error_from_validation",
    "is_image_reference",
    "is_user_input",
    "printable_name",
    "unknown_field_reason",
]
"""The core, as the package's docstring describes it."""

HOMES = [
    "admin",
    "agent",
    "hostd",
    "benchmarks",
    "tuning",
    "releases",
    "downloads",
    "restore",
    "pki",
    "openai",
    "support",
]
"""The public submodules, one per conversation, and the shared helpers."""

REPO = Path(__file__).resolve().parents[2]
PACKAGE = Path(mirbad_protocol.__file__).parent


def _exports(name: str) -> set[str]:
    return set(importlib.import_module(f"mirbad_protocol.{name}").__all__)


def _private_modules() -> list[str]:
    found = []
    for info in pkgutil.walk_packages([str(PACKAGE)], prefix="mirbad_protocol."):
        if info.name.rsplit(".", 1)[-1].startswith("_") and not info.ispkg:
            found.append(info.name)
    return found


def test_the_root_exports_exactly_the_core() -> None:
    assert sorted(mirbad_protocol.__all__) == sorted(CORE)


def test_the_public_homes_are_every_public_module_of_the_package() -> None:
    # A new public submodule must be added here, so the checks below cover it.
    public = {
        info.name
        for info in pkgutil.iter_modules([str(PACKAGE)])
        if not info.name.startswith("_") and info.name != "exceptions"
    }
    assert public == set(HOMES)


def test_every_name_has_exactly_one_home() -> None:
    homes: dict[str, list[str]] = {}
    for home in ["", *HOMES]:
        names = set(mirbad_protocol.__all__) if not home else _exports(home)
        for name in names:
            homes.setdefault(name, []).append(home or "mirbad_protocol")
    twice = {name: where for name, where in homes.items() if len(where) > 1}
    assert twice == {}
    declared = set().union(*(set(importlib.import_module(m).__all__) for m in _private_modules()))
    assert declared - set(homes) == set(), "names a private module declares but no public home exports"


def _root_imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        (node.lineno, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "mirbad_protocol"
        for alias in node.names
    ]


def test_no_module_imports_a_non_core_name_from_the_root() -> None:
    # An import inside TYPE_CHECKING or a function fails only when it runs; this finds it now.
    sources = [*REPO.glob("libs/*/src/**/*.py"), *REPO.glob("apps/*/src/**/*.py")]
    sources += [*REPO.glob("tests/**/*.py"), *REPO.glob("bench/**/*.py"), REPO / "dev.py"]
    assert len(sources) > 300  # the globs found the tree
    core = set(CORE)
    offenders = [
        f"{path.relative_to(REPO)}:{line}: {name}"
        for path in sources
        if path.is_file()
        for line, name in _root_imports(path)
        if name not in core
    ]
    assert offenders == []
