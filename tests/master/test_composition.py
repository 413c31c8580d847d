"""The master's composition: starts on request, idle unload, the exit of a fleet of one, maintenance."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest
from tests.master._stack import Master, running_master

from mirbad_master._maintenance import MAINTENANCE_FILE_NAME
from mirbad_orchestration.supervision import RestartPause
from mirbad_protocol import ModelState

pytestmark = pytest.mark.anyio

ON_DEMAND = {
    "id": "qwen",
    "servedName": "Qwen3-8B",
    "modelPath": "qwen",
    "memoryBudgetGiB": 16,
    "autoStartOnRequest": True,
}
CHAT = {"model": "qwen3-8b", "messages": [{"role": "user", "content": "hi"}]}


async def until(check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    with anyio.fail_after(timeout_s):
        while True:  # the monitor polls on its own clock: look again until it has acted
            if check():
                return
            await anyio.sleep(0.05)


def state(master: Master, model_id: str) -> ModelState | None:
    node = master.services.cache.node("local")
    status = node.model(model_id) if node is not None else None
    return status.state if status is not None else None


async def test_a_request_starts_a_model_that_starts_on_request(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        await master.admin.post("/api/models", json=ON_DEMAND)
        await master.anonymous.post("/v1/chat/completions", json=CHAT)
        audit = await master.services.audit.read(datetime.now(UTC).date())

    # The fake agent has no proxy, so only the start is checked here (test_up_real covers the rest).
    assert [spec.model_id for spec in master.local.driver.starts] == ["qwen"]
    assert ("system:on-request", "model.start", "qwen") in [(e.actor, e.action, e.target) for e in audit]


async def test_a_paused_model_is_not_started_by_a_request(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        await master.admin.post("/api/models", json=ON_DEMAND)
        pause = RestartPause(model_id="qwen", node_id="local", crashes=3, paused_at=datetime.now(UTC))
        await master.services.pauses.pause(pause)
        answer = await master.anonymous.post("/v1/chat/completions", json=CHAT)

    assert answer.status_code == 503
    assert "paused" in answer.json()["error"]["message"]
    assert master.local.driver.starts == []


async def test_an_idle_model_that_starts_on_request_is_unloaded(tmp_path: Path) -> None:
    kept = {**ON_DEMAND, "id": "kept", "servedName": "kept", "autoStartOnRequest": False}
    async with running_master(tmp_path, idle_unload_s=0.3) as master:
        await master.admin.post("/api/models", json=ON_DEMAND)
        await master.admin.post("/api/models", json=kept)
        await master.admin.post("/api/models/qwen/start")
        await master.admin.post("/api/models/kept/start")
        ttls = dict(master.services.idle_ttls)
        await until(lambda: state(master, "qwen") is None)
        audit = await master.services.audit.read(datetime.now(UTC).date())

    assert ttls == {"qwen": 0.3}
    assert master.local.driver.stops == ["qwen"]
    assert state(master, "kept") is ModelState.READY
    assert ("system:idle-unload", "model.stop", "qwen") in [(e.actor, e.action, e.target) for e in audit]


async def test_a_models_own_idle_ttl_wins_over_the_default(tmp_path: Path) -> None:
    pinned = {**ON_DEMAND, "id": "pinned", "servedName": "pinned", "autoStartOnRequest": False}
    async with running_master(tmp_path, idle_unload_s=600) as master:
        await master.admin.post("/api/models", json=ON_DEMAND)
        await master.admin.post("/api/models", json={**pinned, "idleUnloadSeconds": 30})
        await master.admin.post("/api/models", json={**pinned, "id": "always", "servedName": "always"})
        ttls = dict(master.services.idle_ttls)

    # The default covers models a request brings back; a ttl of its own covers any model.
    assert ttls == {"qwen": 600, "pinned": 30}


async def test_leaving_stops_the_node_models_but_keeps_them_listed(tmp_path: Path) -> None:
    async with running_master(tmp_path, stop_models_on_exit="local") as master:
        await master.admin.post("/api/models", json=ON_DEMAND)
        await master.admin.post("/api/models/qwen/start")

    assert [status.id for status in master.services.stopped_on_exit] == ["qwen"]
    assert master.services.left_on_exit == []
    assert master.local.driver.stops == ["qwen"]
    assert await master.services.recovery.running("local") == {"qwen"}


async def test_leaving_names_the_models_that_keep_running_on_other_nodes(tmp_path: Path) -> None:
    placed = {**ON_DEMAND, "id": "big", "servedName": "big", "placement": {"nodeId": "gpu-2"}}
    async with running_master(tmp_path, "local", "gpu-2", stop_models_on_exit="local") as master:
        await master.admin.post("/api/models", json=ON_DEMAND)
        await master.admin.post("/api/models", json=placed)
        (await master.admin.post("/api/models/qwen/start")).raise_for_status()
        (await master.admin.post("/api/models/big/start")).raise_for_status()
        await master.services.node_monitor.poll_all()

    elsewhere = [
        (status.id, status.node_id, reachable) for status, reachable in master.services.elsewhere_on_exit
    ]
    assert [status.id for status in master.services.stopped_on_exit] == ["qwen"]
    assert elsewhere == [("big", "gpu-2", True)]
    assert master.agents.agents["gpu-2"].driver.stops == []


async def test_a_maintenance_flag_left_behind_is_cleared_at_start(tmp_path: Path) -> None:
    flag = tmp_path / "data" / MAINTENANCE_FILE_NAME
    flag.parent.mkdir(parents=True)
    flag.write_text('{"message": "tuning", "retryAfterS": 60}')

    async with running_master(tmp_path) as master:
        answer = await master.anonymous.get("/v1/models")
        await master.services.maintenance.enter("benchmark", 30, ["qwen"])
        written = flag.exists()
        owned = master.services.maintenance.owns("qwen", "local")
        await master.services.maintenance.leave()

    assert answer.status_code == 200
    assert written
    assert owned
    assert not flag.exists()
