"""StateFile: the one lock-guarded atomic JSON store the registries and recovery hints are built on."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from mirbad_orchestration.exceptions import RegistryError, StateFileError
from mirbad_orchestration.stores import StateFile, StoreAction
from mirbad_protocol import WireModel
from mirbad_protocol.support import BeforeReplace

pytestmark = pytest.mark.anyio


class Counter(WireModel):
    count: int = 0


class SimulatedCrashError(Exception):
    """Raised between writing the temporary file and renaming it over the store's file."""


def _refuse(path: Path, raw: bytes) -> list[int]:
    values = json.loads(raw)
    if not isinstance(values, list):
        raise RegistryError(f"{path} is not a list")
    return [int(value) for value in values]


def _failure(path: Path, action: StoreAction, detail: str, disk_full: bool) -> Exception:
    return RegistryError(f"cannot {action} {path}: {detail}", disk_full=disk_full)


def numbers(
    path: Path, *, seed: Callable[[], list[int]] | None = None, before_replace: BeforeReplace | None = None
) -> StateFile[list[int]]:
    return StateFile(
        path, [], decode=_refuse, encode=list, seed=seed, failure=_failure, before_replace=before_replace
    )


def listing(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


async def test_a_document_file_round_trips_and_an_invalid_one_is_set_aside(tmp_path: Path) -> None:
    path = tmp_path / "counter.json"
    await StateFile(path, Counter()).update(lambda c: Counter(count=c.count + 1))
    assert await StateFile(path, Counter()).read() == Counter(count=1)

    path.write_text('{"count": "many"}')
    assert await StateFile(path, Counter()).read() == Counter()
    assert (tmp_path / "counter.json.corrupt").exists()


async def test_an_owner_that_fails_closed_sees_its_error_on_every_read_and_the_file_is_kept(
    tmp_path: Path,
) -> None:
    path = tmp_path / "numbers.json"
    path.write_text('{"not": "a list"}')
    store = numbers(path)

    for _ in range(2):
        with pytest.raises(RegistryError, match="is not a list"):
            await store.read()
    with pytest.raises(RegistryError):
        await store.update(lambda values: [*values, 1])
    assert path.read_text() == '{"not": "a list"}'

    path.write_text("[7]")  # fixed by hand: the next call reads it
    assert await store.read() == [7]


async def test_a_seed_is_written_once_for_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "numbers.json"
    seeded: list[int] = []

    def seed() -> list[int]:
        seeded.append(1)
        return [42]

    assert await numbers(path, seed=seed).read() == [42]
    assert json.loads(path.read_text()) == [42]
    assert await numbers(path, seed=seed).read() == [42]
    assert seeded == [1]


async def test_a_crash_on_the_first_write_leaves_no_file_and_a_later_store_starts_empty(
    tmp_path: Path,
) -> None:
    path = tmp_path / "numbers.json"

    def crash(temp: Path) -> None:
        raise SimulatedCrashError(temp.name)

    store = numbers(path, before_replace=crash)
    with pytest.raises(SimulatedCrashError):
        await store.update(lambda values: [*values, 1])

    assert listing(tmp_path) == []
    assert await store.read() == []  # memory still matches the (missing) file
    assert await numbers(path).read() == []


async def test_an_unchanged_value_is_written_only_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "numbers.json"
    writes: list[str] = []
    store = numbers(path, before_replace=lambda temp: writes.append(temp.name))
    await store.update(lambda values: [1])
    await store.update(lambda values: values)
    assert len(writes) == 1
    await store.update(lambda values: values, write_unchanged=True)
    assert len(writes) == 2


async def test_a_failed_write_is_the_owners_error_naming_the_file(tmp_path: Path) -> None:
    def disk_full(temp: Path) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(StateFileError, match="cannot write it: No space left") as refused:
        await StateFile(tmp_path / "counter.json", Counter(), before_replace=disk_full).update(
            lambda c: Counter(count=1)
        )
    assert refused.value.disk_full
    with pytest.raises(RegistryError, match=r"cannot write .*numbers\.json: No space left") as registry:
        await numbers(tmp_path / "numbers.json", before_replace=disk_full).update(lambda values: [1])
    assert registry.value.disk_full
