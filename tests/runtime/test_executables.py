"""The executable catalogue: logical name + version to a binary whose SHA-256 is checked."""

from __future__ import annotations

import hashlib
from pathlib import Path

import anyio
import pytest

from mirbad_protocol import ExecutableRef
from mirbad_runtime import CatalogedExecutable, ExecutableCatalog, sha256_of_file
from mirbad_runtime.exceptions import (
    DuplicateExecutableError,
    ExecutableIntegrityError,
    LaunchRejectedError,
    UnknownExecutableError,
)

pytestmark = pytest.mark.anyio

CONTENT = b"#!/bin/sh\necho server\n"
DIGEST = hashlib.sha256(CONTENT).hexdigest()


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    path = tmp_path / "bin" / "llama-server"
    path.parent.mkdir()
    path.write_bytes(CONTENT)
    path.chmod(0o755)
    return path


def _entry(
    path: Path, *, name: str = "llama-server", version: str = "b1", sha256: str = DIGEST
) -> CatalogedExecutable:
    return CatalogedExecutable(name=name, version=version, path=path, sha256=sha256)


async def test_resolve_returns_the_verified_path(binary: Path) -> None:
    catalog = ExecutableCatalog([_entry(binary)])

    assert await catalog.resolve(ExecutableRef(name="llama-server", version="b1")) == binary
    assert await catalog.resolve(ExecutableRef(name="LLAMA-Server", version="b1")) == binary


async def test_a_symlink_resolves_to_the_file_it_leads_to(binary: Path, tmp_path: Path) -> None:
    link = tmp_path / "current"
    link.symlink_to(binary)

    resolved = await ExecutableCatalog([_entry(link)]).resolve(
        ExecutableRef(name="llama-server", version="b1")
    )

    assert resolved == binary


async def test_an_unlisted_name_or_version_is_rejected(binary: Path) -> None:
    catalog = ExecutableCatalog([_entry(binary)])

    for ref in (ExecutableRef(name="llama-server", version="b2"), ExecutableRef(name="mlx", version="b1")):
        with pytest.raises(UnknownExecutableError) as caught:
            await catalog.resolve(ref)
        assert (caught.value.name, caught.value.version) == (ref.name, ref.version)
        assert isinstance(caught.value, LaunchRejectedError)


async def test_a_changed_binary_is_refused_before_launch(binary: Path) -> None:
    catalog = ExecutableCatalog([_entry(binary)])
    assert await catalog.verify_all() == []
    await anyio.Path(binary).write_bytes(CONTENT + b"# tampered\n")

    with pytest.raises(ExecutableIntegrityError, match="SHA-256") as caught:
        await catalog.resolve(ExecutableRef(name="llama-server", version="b1"))

    assert isinstance(caught.value, LaunchRejectedError)
    assert caught.value.path == binary


async def test_a_missing_or_non_executable_file_is_refused(binary: Path, tmp_path: Path) -> None:
    await anyio.Path(binary).chmod(0o644)
    catalog = ExecutableCatalog([_entry(binary), _entry(tmp_path / "absent", version="b2")])

    problems = await catalog.verify_all()

    assert [(problem.version, problem.reason) for problem in problems] == [
        ("b1", "the file is not executable"),
        ("b2", "no such file"),
    ]


async def test_verify_all_reports_every_problem_and_keeps_the_entries(binary: Path) -> None:
    catalog = ExecutableCatalog([_entry(binary, sha256="0" * 64), _entry(binary, version="b2")])

    problems = await catalog.verify_all()

    assert [problem.version for problem in problems] == ["b1"]
    assert len(catalog) == 2


def test_a_duplicate_name_and_version_is_refused(binary: Path) -> None:
    with pytest.raises(DuplicateExecutableError) as caught:
        ExecutableCatalog([_entry(binary), _entry(binary, name="Llama-Server")])

    assert (caught.value.name, caught.value.version) == ("Llama-Server", "b1")


def test_one_name_may_be_listed_with_several_versions(binary: Path) -> None:
    catalog = ExecutableCatalog([_entry(binary, version="b2"), _entry(binary, version="b1")])

    assert [entry.version for entry in catalog.entries] == ["b1", "b2"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "../x"}, "logical executable name"),
        ({"version": " "}, "blank version"),
        ({"path": Path("relative/llama-server")}, "absolute path"),
        ({"sha256": DIGEST.upper()}, "64 lowercase hex"),
        ({"sha256": "abc"}, "64 lowercase hex"),
    ],
)
def test_entries_are_validated(binary: Path, changes: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"name": "llama-server", "version": "b1", "path": binary, "sha256": DIGEST}
    fields.update(changes)
    with pytest.raises(ValueError, match=message):
        CatalogedExecutable(**fields)  # type: ignore[arg-type]


def test_sha256_of_file_hashes_the_content(binary: Path) -> None:
    assert sha256_of_file(binary) == DIGEST
