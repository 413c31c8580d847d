"""Every workspace member builds with ``uv build`` and its wheel installs alone in a fresh virtualenv.

The virtualenvs are made with ``uv venv`` and filled with ``uv pip install --python`` (never the
project's own environment): the wheel and those of its Mirbad siblings by path, so no ``mirbad-*``
name is ever looked up on an index, and the third-party dependencies from PyPI through uv's cache.
The client library must come without anything of the master. ``twine check --strict`` (a dev
dependency) passes on every wheel and sdist, and the metadata an index shows is checked field by field.
"""

from __future__ import annotations

import email.parser
import email.policy
import os
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from tests._support.real_parts import uv_path

pytestmark = [pytest.mark.deploy, pytest.mark.timeout(180)]

ROOT = Path(__file__).parents[2]
BUILD_TIMEOUT_S = 150
INSTALL_TIMEOUT_S = 120
# What `import` proves each wheel works, and the command it installs (None: a library).
IMPORTS = {
    "mirbad-protocol": ("mirbad_protocol", None),
    "mirbad-runtime": ("mirbad_runtime", None),
    "mirbad-orchestration": ("mirbad_orchestration", None),
    "mirbad-router": ("mirbad_router", None),
    "mirbad-client": ("mirbad_client", None),
    "mirbad-master": ("mirbad_master.cli", "mirbad"),
    "mirbad-agent": ("mirbad_agent.cli", "mirbad-agent"),
    "mirbad-hostd": ("mirbad_hostd", "mirbad-hostd"),
}
# Nothing of the master, the agent or their servers may come with the notebook client.
NOT_WITH_THE_CLIENT = {"mirbad-master", "mirbad-orchestration", "nicegui", "fastapi", "docker", "uvicorn"}


@dataclass(frozen=True)
class Member:
    name: str
    version: Version
    requires: tuple[Requirement, ...]
    folder: Path


@cache
def members() -> dict[str, Member]:
    """The workspace's members, by canonical name, from their pyproject.toml."""
    found: dict[str, Member] = {}
    for pyproject in sorted([*ROOT.glob("libs/*/pyproject.toml"), *ROOT.glob("apps/*/pyproject.toml")]):
        project = tomllib.loads(pyproject.read_text())["project"]
        name = canonicalize_name(project["name"])
        requires = tuple(Requirement(text) for text in project.get("dependencies", []))
        # An extra's requirements travel in the wheel with the extra as their marker.
        requires += tuple(
            Requirement(f'{text}; extra == "{extra}"')
            for extra, texts in project.get("optional-dependencies", {}).items()
            for text in texts
        )
        found[name] = Member(name, Version(project["version"]), requires, pyproject.parent)
    return found


def siblings(member: Member) -> list[Requirement]:
    return [req for req in member.requires if canonicalize_name(req.name) in members()]


def closure(name: str) -> list[str]:
    """``name`` and every Mirbad package it needs, directly or not."""
    seen: list[str] = []
    pending = [name]
    while pending:
        current = pending.pop()
        if current not in seen:
            seen.append(current)
            pending += [canonicalize_name(req.name) for req in siblings(members()[current])]
    return seen


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdists and wheels of every member, built by ``uv build`` into a folder of their own."""
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [uv(), "build", "--all-packages", "--out-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return out


def uv() -> str:
    found = uv_path()
    assert found is not None  # the deploy tier's probe says so before any test runs
    return found


def wheel(dist: Path, name: str) -> Path:
    member = members()[name]
    return dist / f"{name.replace('-', '_')}-{member.version}-py3-none-any.whl"


def metadata(dist: Path, name: str) -> email.message.EmailMessage:
    path = wheel(dist, name)
    with zipfile.ZipFile(path) as archive:
        [entry] = [item for item in archive.namelist() if item.endswith(".dist-info/METADATA")]
        text = archive.read(entry).decode("utf-8")
    message = email.parser.Parser(policy=email.policy.default).parsestr(text)
    assert isinstance(message, email.message.EmailMessage)
    return message


def test_the_workspace_lists_every_member_and_imports_each_one() -> None:
    assert set(members()) == set(IMPORTS)
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert {canonicalize_name(name) for name in root["tool"]["uv"]["sources"]} == set(members())


@pytest.mark.parametrize("name", sorted(IMPORTS))
def test_each_sibling_dependency_has_a_range_the_sibling_satisfies(name: str) -> None:
    member = members()[name]
    for requirement in siblings(member):
        sibling = members()[canonicalize_name(requirement.name)]
        assert sibling.version in requirement.specifier, f"{name}: {requirement} but {sibling.version}"
        # A floor and a ceiling, so an install never mixes two incompatible releases.
        operators = {spec.operator for spec in requirement.specifier}
        assert operators & {">=", "==", "~="}, f"{name}: {requirement} has no floor"
        assert operators & {"<", "==", "~="}, f"{name}: {requirement} has no ceiling"


def test_every_member_builds_an_sdist_and_a_wheel(dist: Path) -> None:
    for name, member in members().items():
        stem = f"{name.replace('-', '_')}-{member.version}"
        assert (dist / f"{stem}.tar.gz").is_file(), name
        assert wheel(dist, name).is_file(), name


@pytest.mark.parametrize("name", sorted(IMPORTS))
def test_each_wheel_carries_what_an_index_shows(dist: Path, name: str) -> None:
    # What twine check looks at: the fields, and a description it can render (markdown).
    message = metadata(dist, name)
    member = members()[name]
    assert message["Name"] == name
    assert message["Version"] == str(member.version)
    assert message["Summary"]
    assert message["Requires-Python"] == ">=3.11"
    assert message["License"] or message["License-Expression"]
    assert message["Description-Content-Type"] == "text/markdown"
    assert str(message.get_content()).strip()
    requires = sorted(str(Requirement(text)) for text in message.get_all("Requires-Dist", []))
    assert requires == sorted(str(req) for req in member.requires)


def test_twine_check_passes(dist: Path) -> None:
    files = sorted(str(path) for path in dist.iterdir() if path.suffix in {".whl", ".gz"})
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *files],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", sorted(IMPORTS))
def test_each_wheel_installs_alone_and_imports(dist: Path, tmp_path: Path, name: str) -> None:
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    run([uv(), "venv", "--quiet", "--python", sys.executable, str(venv)], tmp_path)
    wheels = [str(wheel(dist, package)) for package in closure(name)]
    run([uv(), "pip", "install", "--quiet", "--python", str(python), *wheels], tmp_path)

    module, command = IMPORTS[name]
    probe = f"import sys, {module}; print(sorted(m.split('.')[0] for m in sys.modules))"
    imported = run([str(python), "-c", probe], tmp_path)
    assert f"'{module.split('.')[0]}'" in imported
    if command is not None:
        run([str(venv / "bin" / command), "--help"], tmp_path)
    installed = run([str(python), "-c", _LIST_DISTRIBUTIONS], tmp_path).split()
    assert {package for package in installed if package.startswith("mirbad-")} == set(closure(name))
    if name == "mirbad-client":
        assert NOT_WITH_THE_CLIENT.isdisjoint(installed)
        assert "mirbad_master" not in imported


_LIST_DISTRIBUTIONS = (
    "import importlib.metadata as m, re; "
    "print(' '.join(sorted(re.sub(r'[-_.]+', '-', d.metadata['Name']).lower() for d in m.distributions())))"
)


def run(argv: list[str], cwd: Path) -> str:
    # Without the worktree's sources on the path: only what the wheels installed may be imported.
    env = {key: value for key, value in os.environ.items() if key not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env.pop("UV_PROJECT_ENVIRONMENT", None)
    result = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False
    )
    assert result.returncode == 0, f"{argv[:3]}: {result.stdout[-2000:]}{result.stderr[-4000:]}"
    return result.stdout
