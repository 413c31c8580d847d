"""A full disk under the admin API: a stop or a delete still stops the model; the answer names the file."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.master._stack import running_master
from tests.master.test_api import QWEN, create, error_of
from tests.orchestration._fake_agent import Refusal

from mirbad_orchestration.keys import API_KEYS_FILE, _api_key_file
from mirbad_orchestration.registry import REGISTRY_FILE_NAME
from mirbad_orchestration.stores import _state_file
from mirbad_orchestration.supervision import RECOVERY_FILE_NAME
from mirbad_protocol.agent import AgentErrorCode
from mirbad_protocol.support import write_json_atomic

pytestmark = pytest.mark.anyio


def _full_disk_for(file_name: str) -> Callable[..., None]:
    """A ``write_json_atomic`` that fails with ENOSPC for ``file_name`` and writes every other file."""

    def full_disk(path: Path, value: object, **options: Any) -> None:
        if path.name == file_name:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        write_json_atomic(path, value, **options)

    return full_disk


async def test_with_the_disk_full_a_stop_reaches_the_node_and_is_507_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full_disk = _full_disk_for(RECOVERY_FILE_NAME)
    async with running_master(tmp_path) as master:
        await create(master, QWEN)
        await master.admin.post("/api/models/qwen/start")
        monkeypatch.setattr(_state_file, "write_json_atomic", full_disk)
        stopped = await master.admin.post("/api/models/qwen/stop")
        running = await master.local.driver.list_statuses()
        listed = await master.services.recovery.running("local")

    error = error_of(stopped, 507, "insufficient_storage")
    assert str(master.services.recovery.path) in error["message"]
    assert "'qwen' was stopped" in error["message"]
    assert running == []
    assert listed == frozenset({"qwen"})  # memory kept to what the file says


async def test_with_the_disk_full_deleting_a_model_stops_it_and_is_507_naming_the_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full_disk = _full_disk_for(REGISTRY_FILE_NAME)
    async with running_master(tmp_path) as master:
        await create(master, QWEN)
        await master.admin.post("/api/models/qwen/start")
        monkeypatch.setattr(_state_file, "write_json_atomic", full_disk)
        deleted = await master.admin.delete("/api/models/qwen")
        running = await master.local.driver.list_statuses()
        kept = await master.services.models.get("qwen")

    error = error_of(deleted, 507, "insufficient_storage")
    assert str(master.services.models.path) in error["message"]
    assert running == []
    assert kept.id == "qwen"  # still registered, in memory as on disk


async def test_with_the_disk_full_creating_a_key_is_507_naming_the_key_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 31 item 18: the key store's write failure carried no disk-full mark, so it read as a 500.
    full_disk = _full_disk_for(API_KEYS_FILE)
    async with running_master(tmp_path) as master:
        monkeypatch.setattr(_api_key_file, "write_json_atomic", full_disk)
        created = await master.admin.post("/api/keys", json={"name": "ci"})
        listed = await master.admin.get("/api/keys")

    error = error_of(created, 507, "insufficient_storage")
    assert API_KEYS_FILE in error["message"]
    assert listed.json() == []  # nothing half-made


async def test_a_node_whose_disk_is_full_at_a_stop_is_507_not_502(tmp_path: Path) -> None:
    # Issue 31 item 18: the node stopped the model but could not write its record (the agent's 507);
    # the admin API passes that on as insufficient_storage instead of a 502 node_refused.
    async with running_master(tmp_path) as master:
        await create(master, QWEN)
        await master.admin.post("/api/models/qwen/start")
        message = "model 'qwen' was stopped, but cannot write /state/processes.json: No space left on device"
        master.local.refusals["stop"] = Refusal(507, AgentErrorCode.INSUFFICIENT_STORAGE, message)
        stopped = await master.admin.post("/api/models/qwen/stop")

    error = error_of(stopped, 507, "insufficient_storage")
    assert "'qwen' was stopped" in error["message"]
    assert error["nodeId"] == "local"
