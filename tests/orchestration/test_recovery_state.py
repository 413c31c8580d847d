"""The recovery state: models started and never explicitly stopped, per node, in running-models.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirbad_orchestration.exceptions import StateFileError
from mirbad_orchestration.supervision import RECOVERY_FILE_NAME, RecoveryState

pytestmark = pytest.mark.anyio


async def test_a_missing_file_lists_nothing_and_is_not_created(tmp_path: Path) -> None:
    state = RecoveryState(tmp_path)
    assert await state.running("local") == frozenset()
    assert await state.boot_id("local") is None
    assert not state.path.exists()


async def test_starts_and_stops_persist_per_node(tmp_path: Path) -> None:
    state = RecoveryState(tmp_path)
    await state.add("a", "m2")
    await state.add("a", "m1")
    await state.add("b", "m3")
    await state.set_boot_id("a", "boot-1")
    await state.remove("m2")

    reloaded = RecoveryState(tmp_path)
    assert await reloaded.running("a") == {"m1"}
    assert await reloaded.running("b") == {"m3"}
    assert await reloaded.boot_id("a") == "boot-1"
    assert json.loads((tmp_path / RECOVERY_FILE_NAME).read_text()) == {
        "version": 1,
        "nodes": {"a": {"bootId": "boot-1", "models": ["m1"]}, "b": {"bootId": None, "models": ["m3"]}},
    }


async def test_a_model_is_listed_on_one_node_at_a_time(tmp_path: Path) -> None:
    state = RecoveryState(tmp_path)
    await state.add("a", "m1")
    await state.add("b", "m1")
    assert await state.snapshot() == {"b": ["m1"]}


async def test_remove_can_target_one_node(tmp_path: Path) -> None:
    state = RecoveryState(tmp_path)
    await state.add("a", "m1")
    await state.remove("m1", node_id="b")
    assert await state.running("a") == {"m1"}
    await state.remove("m1", node_id="a")
    assert await state.snapshot() == {}


async def test_a_change_that_changes_nothing_writes_nothing(tmp_path: Path) -> None:
    state = RecoveryState(tmp_path)
    await state.add("a", "m1")
    state.path.unlink()
    await state.add("a", "m1")
    await state.remove("m2")
    assert not state.path.exists()


async def test_an_unreadable_file_is_set_aside_and_the_state_starts_empty(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / RECOVERY_FILE_NAME).write_text("{not json")
    state = RecoveryState(tmp_path)
    assert await state.running("a") == frozenset()
    assert (tmp_path / f"{RECOVERY_FILE_NAME}.corrupt").read_text() == "{not json"
    assert "unreadable" in caplog.text
    await state.add("a", "m1")
    assert await RecoveryState(tmp_path).running("a") == {"m1"}


async def test_a_failed_write_raises_and_keeps_the_previous_state(tmp_path: Path) -> None:
    data = tmp_path / "data"
    state = RecoveryState(data)
    await state.add("a", "m1")
    (data / RECOVERY_FILE_NAME).unlink()
    data.rmdir()
    data.write_text("a file where the data folder was")
    with pytest.raises(StateFileError, match="cannot write"):
        await state.add("a", "m2")
    assert await state.running("a") == {"m1"}


async def test_an_unreadable_location_raises(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    with pytest.raises(StateFileError, match="cannot read"):
        await RecoveryState(blocker).running("a")
