"""MIRBAD_DEFAULT_NODE: where a model without a placement runs (compose's master runs nothing itself)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from tests.master._stack import running_master
from tests.master.test_api_benchmarks import QWEN, WAIT_S, chatty, v1_chat

from mirbad_master._settings import load_master_settings
from mirbad_protocol import InvalidFieldError, ModelState

pytestmark = pytest.mark.anyio


def test_the_default_node_is_local_unless_named() -> None:
    assert load_master_settings({}).default_node == "local"
    assert load_master_settings({"MIRBAD_DEFAULT_NODE": "host"}).default_node == "host"
    with pytest.raises(InvalidFieldError) as bad:
        load_master_settings({"MIRBAD_DEFAULT_NODE": "Not A Node"})
    assert bad.value.field == "MIRBAD_DEFAULT_NODE"


async def test_a_model_without_a_placement_runs_on_the_named_default_node(tmp_path: Path) -> None:
    async with running_master(tmp_path, "local", "host", agent=chatty, default_node="host") as master:
        assert (await master.admin.post("/api/models", json=QWEN)).status_code == 201
        started = await master.admin.post("/api/models/qwen/start")
        assert started.status_code == 200, started.text

        host, local = master.agents.agents["host"], master.agents.agents["local"]
        assert (await host.driver.status("qwen")).state is not ModelState.STOPPED
        assert (await local.driver.status("qwen")).state is ModelState.STOPPED
        view = (await master.admin.get("/api/models/qwen")).json()
        assert view["status"]["nodeId"] == "host", view

        # The router resolves the unplaced model to the same node: /v1 reaches host's agent.
        with anyio.fail_after(WAIT_S):
            while (reply := await v1_chat(master, QWEN["servedName"])).status_code != 200:  # noqa: ASYNC110 - polled: nothing signals Ready to the client
                await anyio.sleep(0.05)
        assert reply.json()["choices"], reply.text
