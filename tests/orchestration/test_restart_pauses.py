"""Paused automatic restarts in restart-pauses.json: one per model, surviving a master restart."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mirbad_orchestration.supervision import RESTART_PAUSES_FILE_NAME, RestartPause, RestartPauses

pytestmark = pytest.mark.anyio

_AT = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def _pause(model_id: str, crashes: int = 3, error: str | None = "CUDA out of memory") -> RestartPause:
    return RestartPause(model_id=model_id, node_id="spark", crashes=crashes, last_error=error, paused_at=_AT)


async def test_pauses_survive_a_new_store(tmp_path: Path) -> None:
    pauses = RestartPauses(tmp_path)
    await pauses.pause(_pause("zeta"))
    await pauses.pause(_pause("alpha", error=None))

    reloaded = RestartPauses(tmp_path)
    assert [p.model_id for p in await reloaded.list()] == ["alpha", "zeta"]
    assert await reloaded.get("zeta") == _pause("zeta")
    assert await reloaded.get("other") is None


async def test_the_file_names_model_node_crashes_error_and_time(tmp_path: Path) -> None:
    await RestartPauses(tmp_path).pause(_pause("qwen"))
    assert json.loads((tmp_path / RESTART_PAUSES_FILE_NAME).read_text()) == {
        "version": 1,
        "pauses": [
            {
                "modelId": "qwen",
                "nodeId": "spark",
                "crashes": 3,
                "lastError": "CUDA out of memory",
                "pausedAt": "2025-03-01T12:00:00Z",
            }
        ],
    }


async def test_a_new_pause_replaces_the_old_one(tmp_path: Path) -> None:
    pauses = RestartPauses(tmp_path)
    await pauses.pause(_pause("qwen", crashes=3))
    await pauses.pause(_pause("qwen", crashes=4))
    assert [p.crashes for p in await pauses.list()] == [4]


async def test_clear_returns_the_removed_pause(tmp_path: Path) -> None:
    pauses = RestartPauses(tmp_path)
    await pauses.pause(_pause("qwen"))
    assert await pauses.clear("qwen") == _pause("qwen")
    assert await pauses.clear("qwen") is None
    assert await RestartPauses(tmp_path).list() == []


async def test_a_corrupt_file_is_set_aside(tmp_path: Path) -> None:
    (tmp_path / RESTART_PAUSES_FILE_NAME).write_text('{"version": 1, "pauses": [{"modelId": 3}]}')
    pauses = RestartPauses(tmp_path)
    assert await pauses.list() == []
    assert (tmp_path / f"{RESTART_PAUSES_FILE_NAME}.corrupt").exists()
