"""Which saved models miss files on their node, over a real master composition and fake agents.

A node that cannot say (stalled, refusing) gives no answer rather than a false "missing"; running
models are never asked about.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from starlette.requests import Request
from starlette.responses import Response
from tests._support.polling import eventually
from tests.master._stack import Master, running_master
from tests.master.test_ui_missing_files import QWEN, agent, model, polled
from tests.orchestration._fake_agent import FakeAgent, Refusal

from mirbad_master.models._model_files import MissingFiles, missing_model_files
from mirbad_protocol import ModelState
from mirbad_protocol.admin import ModelView
from mirbad_protocol.agent import AgentErrorCode

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


class AskedTogether(FakeAgent):
    """A node that answers which files it has only once the other node was asked too.

    Asked one node after the other, the first one's answer never comes within the agent client's read
    timeout, so its note is lost; asked at the same time, both answer.
    """

    def __init__(self, node_id: str, both_asked: anyio.Event) -> None:
        super().__init__(node_name=node_id)
        self.present_files = set()
        self._both_asked = both_asked

    async def _model_files(self, request: Request) -> Response:
        if self.node_name == "local":
            await self._both_asked.wait()
        else:
            self._both_asked.set()
        return await super()._model_files(request)


async def test_the_nodes_are_asked_at_the_same_time(tmp_path: Path) -> None:
    both_asked = anyio.Event()
    async with running_master(
        tmp_path, "local", "gpu-1", agent=lambda node_id: AskedTogether(node_id, both_asked)
    ) as master:

        def read() -> bool:
            states = [master.services.cache.node(node) for node in ("local", "gpu-1")]
            return all(state is not None and state.info is not None for state in states)

        await eventually(read, timeout_s=10)
        for definition in (model("on-local", "local", "a"), model("on-gpu", "gpu-1", "b")):
            assert (await master.admin.post("/api/models", json=definition)).status_code == 201
        with anyio.fail_after(30):
            missing = await missing_model_files(master.services, await views(master), wait_s=10)

    assert missing["on-local"] == MissingFiles("local", ["a"])
    assert missing["on-gpu"] == MissingFiles("gpu-1", ["b"])
