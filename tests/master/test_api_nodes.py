"""``/api/nodes`` over a real master composition and fake agents: removal, tokens for taken names."""

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
