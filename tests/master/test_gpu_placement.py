"""Placement by GPU: the node's GPUs offered by the editor, checked on save, and sent with the start."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from nicegui import ui
from tests._support.polling import eventually
from tests.master._rooms import api_refusal, portal_refusal
from tests.master._stack import Master, running_master
from tests.master.test_ui_pages import portal_user
from tests.orchestration._fake_agent import FakeAgent
from tests.orchestration._fake_agent import Refusal as FakeRefusal

from mirbad_master._api_errors import Refusal
from mirbad_master.models import actions
from mirbad_master.models._gpu_placement import gpu_label, gpu_options
from mirbad_master.models.actions import user_definition
from mirbad_master.ui._refusals import PORTAL_ACTOR
from mirbad_protocol import GpuMemory, MemorySnapshot
from mirbad_protocol.agent import AgentErrorCode

pytestmark = pytest.mark.anyio

GPUS = [
    GpuMemory(index=0, uuid="GPU-0a", name="NVIDIA H100 80GB HBM3", total_mib=81559),
    GpuMemory(index=1, uuid="GPU-1b", name="NVIDIA H100 80GB HBM3", total_mib=81559),
]
NODE_MEMORY = MemorySnapshot(total_gib=256, available_gib=200, reserve_gib=4, unified=False, gpus=GPUS)
MODEL: dict[str, Any] = {
    "id": "qwen",
    "servedName": "qwen3-8b",
    "modelPath": "qwen",
    "memoryBudgetGiB": 8,
    "placement": {"nodeId": "gpu-node", "gpuUuids": ["GPU-1b"]},
}
ON_GHOST = {**MODEL, "placement": {"nodeId": "gpu-node", "gpuUuids": ["GPU-1b", "GPU-ghost"]}}
GHOST_REFUSAL = Refusal(
    422,
    "unknown_gpu",
    "placement.gpuUuids: node 'gpu-node' reports no GPU 'GPU-ghost' (its GPUs: GPU-0a, GPU-1b)",
    "placement.gpuUuids",
)


def _agent(node_id: str) -> FakeAgent:
    if node_id == "gpu-node":
        return FakeAgent(node_name=node_id, memory=NODE_MEMORY, gpus=GPUS)
    return FakeAgent(node_name=node_id)  # the local node: unified memory, no discrete GPU


@asynccontextmanager
async def gpu_fleet(tmp_path: Path) -> AsyncIterator[Master]:
    """A master over the local node and ``gpu-node``, once telemetry has read both nodes' memory."""
    async with running_master(tmp_path, "local", "gpu-node", agent=_agent) as master:
        cache = master.services.cache

        def read() -> bool:
            return all(
                (state := cache.node(n)) is not None and state.memory is not None
                for n in ("local", "gpu-node")
            )

        await eventually(read, timeout_s=10)
        yield master


async def test_a_placement_on_a_gpu_the_node_does_not_report_is_422_naming_it(tmp_path: Path) -> None:
    on_local_gpu = {**MODEL, "placement": {"nodeId": "local", "gpuUuids": ["GPU-0a"]}}
    async with gpu_fleet(tmp_path) as master:
        api = master.admin
        created = await api.post("/api/models", json=ON_GHOST)
        body = created.json()["error"]
        saved = await api.post("/api/models", json=MODEL)
        edited = await api.put("/api/models/qwen", json=ON_GHOST)
        unified = await api.post("/api/models", json={**on_local_gpu, "id": "other", "servedName": "o"})
        portal = await portal_refusal(
            lambda: actions.update_model(master.services, user_definition(ON_GHOST), PORTAL_ACTOR)
        )
        stored = await master.services.models.get("qwen")

    assert api_refusal(created) == GHOST_REFUSAL
    assert body["nodeId"] == "gpu-node"
    assert saved.status_code == 201
    assert api_refusal(edited) == GHOST_REFUSAL
    assert portal == GHOST_REFUSAL  # the editor's save is refused alike
    assert stored.placement is not None
    assert stored.placement.gpu_uuids == ["GPU-1b"]
    assert api_refusal(unified) == Refusal(
        422,
        "unknown_gpu",
        "placement.gpuUuids: node 'local' reports no GPU 'GPU-0a' (its GPUs: none: it has no discrete GPUs)",
        "placement.gpuUuids",
    )


async def test_a_node_whose_gpus_were_never_read_has_its_placement_saved_unchecked(tmp_path: Path) -> None:
    def unread(node_id: str) -> FakeAgent:
        agent = _agent(node_id)
        agent.refusals["memory"] = FakeRefusal(503, AgentErrorCode.PROBE_FAILED, "nvidia-smi hung")
        return agent

    async with running_master(tmp_path, "local", "gpu-node", agent=unread) as master:
        # What the node reports is unknown, so nothing is refused: its admission checks at the start.
        saved = await master.admin.post("/api/models", json=ON_GHOST)
        memory = state.memory if (state := master.services.cache.node("gpu-node")) else None

    assert saved.status_code == 201
    assert memory is None


async def test_the_start_asks_the_node_for_the_chosen_gpus_only(tmp_path: Path) -> None:
    async with gpu_fleet(tmp_path) as master:
        (await master.admin.post("/api/models", json=MODEL)).raise_for_status()
        (await master.admin.post("/api/models/qwen/start")).raise_for_status()
        started = master.agents.agents["gpu-node"].driver.starts

    assert [spec.gpus.model_dump() for spec in started] == [{"mode": "uuids", "uuids": ["GPU-1b"]}]


def test_the_gpu_options_name_each_gpu_and_keep_a_chosen_one_the_node_lost() -> None:
    options = gpu_options(GPUS, ["GPU-1b", "GPU-gone"])

    assert options == {
        "GPU-0a": "GPU 0 · NVIDIA H100 80GB HBM3 · 80 GiB (GPU-0a)",
        "GPU-1b": "GPU 1 · NVIDIA H100 80GB HBM3 · 80 GiB (GPU-1b)",
        "GPU-gone": "GPU-gone (not reported by the node)",
    }
    assert gpu_options(None, ["GPU-x"]) == {"GPU-x": "GPU-x (telemetry not read yet)"}
    assert gpu_label(GpuMemory(index=3, uuid="GPU-3", total_mib=24 * 1024)) == "GPU 3 · GPU · 24 GiB (GPU-3)"


async def test_the_editor_offers_the_nodes_gpus_and_saves_the_selection(tmp_path: Path) -> None:
    async with gpu_fleet(tmp_path) as master, portal_user(master) as user:
        (
            await master.admin.post("/api/models", json={**MODEL, "placement": {"nodeId": "gpu-node"}})
        ).raise_for_status()
        await user.open("/models/qwen/edit")
        await user.should_see(marker="field-gpuUuids")
        (picker,) = user.find(marker="field-gpuUuids").elements
        (node,) = user.find(marker="field-nodeId").elements
        assert isinstance(picker, ui.select)
        assert isinstance(node, ui.select)
        offered = dict(picker.options)
        picker.value = ["GPU-0a"]
        user.find(marker="save-model").click()
        await user.should_see("qwen saved")
        saved = await master.services.models.get("qwen")
        node.value = "local"  # a node without discrete GPUs offers none and drops the choice
        await eventually(lambda: picker.value == [], timeout_s=5)
        on_local = dict(picker.options)

    assert offered == {uuid: gpu_label(gpu) for uuid, gpu in zip(("GPU-0a", "GPU-1b"), GPUS, strict=True)}
    assert saved.placement is not None
    assert saved.placement.gpu_uuids == ["GPU-0a"]
    assert on_local == {}
