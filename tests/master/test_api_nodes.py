"""The fleet in the admin API over a real master and fake agents: node removal, tokens for taken names,
and what the views say of models on an unreachable node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.master._stack import running_master
from tests.master.test_api import create, error_of

pytestmark = pytest.mark.anyio

ON_GPU_1: dict[str, Any] = {
    "id": "qwen",
    "servedName": "Qwen3-8B",
    "modelPath": "qwen/qwen3-8b",
    "placement": {"nodeId": "gpu-1"},
}


async def test_removing_a_node_that_models_are_placed_on_is_refused_naming_them(tmp_path: Path) -> None:
    async with running_master(tmp_path, "local", "gpu-1") as master:
        await create(master, ON_GPU_1)
        await create(master, {**ON_GPU_1, "id": "gemma", "servedName": "gemma"})
        refused = await master.admin.delete("/api/nodes/gpu-1")
        still = await master.admin.get("/api/nodes/gpu-1")

    error = error_of(refused, 409, "node_has_models")
    assert "'gemma'" in error["message"]
    assert "'qwen'" in error["message"]
    assert still.status_code == 200


async def test_removing_a_node_with_unplace_clears_its_models_placement(tmp_path: Path) -> None:
    async with running_master(tmp_path, "local", "gpu-1") as master:
        await create(master, ON_GPU_1)
        removed = await master.admin.delete("/api/nodes/gpu-1", params={"unplace": "true"})
        gone = await master.admin.get("/api/nodes/gpu-1")
        model = (await master.admin.get("/api/models/qwen")).json()
        stored = await master.services.models.get("qwen")

    assert removed.status_code == 204
    error_of(gone, 404, "node_not_found")
    assert model["definition"]["placement"] is None
    assert stored.placement is None


async def test_models_on_an_unreachable_node_read_unknown_in_every_view(tmp_path: Path) -> None:
    async with running_master(tmp_path, "local", "gpu-1") as master:
        await create(master, ON_GPU_1)
        await master.admin.post("/api/models/qwen/start")
        master.agents.down.add("gpu-1")
        await master.services.node_monitor.poll_all()
        view = (await master.admin.get("/api/models/qwen")).json()
        listed = (await master.admin.get("/api/models")).json()
        report = (await master.admin.get("/api/status")).json()
        chat = await master.admin.post(
            "/v1/chat/completions",
            json={"model": "Qwen3-8B", "messages": [{"role": "user", "content": "hi"}]},
        )

    assert view["status"]["state"] == "Unknown"
    assert "node 'gpu-1' is unreachable" in view["status"]["error"]
    assert [item["status"] for item in listed if item["definition"]["id"] == "qwen"] == [view["status"]]
    assert [model for model in report["models"] if model["id"] == "qwen"] == [
        {**view["status"], "restartPending": False}
    ]
    assert chat.status_code == 503
    assert "state Unknown: node 'gpu-1' is unreachable" in chat.json()["error"]["message"]


async def test_a_token_for_an_existing_nodes_name_is_409_unless_re_enrolling(tmp_path: Path) -> None:
    async with running_master(tmp_path, "local", "gpu-1") as master:
        local = await master.admin.post("/api/nodes/enrollment-tokens", json={"nodeName": "local"})
        taken = await master.admin.post("/api/nodes/enrollment-tokens", json={"nodeName": "gpu-1"})
        again = await master.admin.post(
            "/api/nodes/enrollment-tokens", json={"nodeName": "gpu-1", "reenroll": True}
        )
        unknown = await master.admin.post(
            "/api/nodes/enrollment-tokens", json={"nodeName": "gpu-9", "reenroll": True}
        )
        bad_url = await master.admin.post(
            "/api/nodes/enrollment-tokens", json={"nodeName": "gpu-2", "agentUrl": "http://gpu-2:9443"}
        )

    assert "'local'" in error_of(local, 409, "node_exists")["message"]
    assert "'gpu-1'" in error_of(taken, 409, "node_exists")["message"]
    assert again.status_code == 201
    error_of(unknown, 404, "node_not_found")
    assert error_of(bad_url, 400, "invalid_request")["field"] == "agentUrl"
