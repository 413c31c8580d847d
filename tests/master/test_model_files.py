"""Which saved models miss files on their node, over a real master composition and fake agents.

A node that cannot say (stalled, refusing) gives no answer rather than a false "missing"; running
models are never asked about.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from tests.master._stack import Master, running_master
from tests.master.test_ui_missing_files import QWEN, agent, polled
from tests.orchestration._fake_agent import Refusal

from mirbad_master._model_files import MissingFiles, missing_model_files
from mirbad_protocol import AgentErrorCode, ModelState, ModelView

pytestmark = pytest.mark.anyio


async def views(master: Master) -> list[ModelView]:
    return [ModelView.from_wire(view) for view in (await master.admin.get("/api/models")).json()]


async def test_missing_paths_are_named_and_running_models_are_not_asked(tmp_path: Path) -> None:
    async with running_master(tmp_path, "local", "gpu-1", "old", agent=agent) as master:
        await polled(master)
        assert (await master.admin.post("/api/models", json=QWEN)).status_code == 201
        master.local.present_files = {"qwen3/model.gguf"}
        stopped = await missing_model_files(master.services, await views(master))
        listed = await views(master)
        running = [
            view.model_copy(update={"status": view.status.model_copy(update={"state": ModelState.READY})})
            for view in listed
        ]
        master.local.bodies.clear()
        none_asked = await missing_model_files(master.services, running)

    assert stopped["qwen"] == MissingFiles("local", ["drafter"])
    assert none_asked == {}
    assert master.local.bodies == []


@pytest.mark.parametrize("trouble", ["stalled", "refusing"])
async def test_a_node_that_cannot_say_gives_no_note(tmp_path: Path, trouble: str) -> None:
    async with running_master(tmp_path, "local", "gpu-1", "old", agent=agent) as master:
        await polled(master)
        assert (await master.admin.post("/api/models", json=QWEN)).status_code == 201
        listed = await views(master)
        if trouble == "stalled":
            master.local.stall = anyio.Event()
        else:
            master.local.refusals["model_files"] = Refusal(503, AgentErrorCode.RUNTIME_UNAVAILABLE)
        with anyio.fail_after(30):
            missing = await missing_model_files(master.services, listed, wait_s=0.5)
        if master.local.stall is not None:
            master.local.stall.set()

    assert missing == {}
