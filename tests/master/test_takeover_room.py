"""The takeover room: ``GET /api/master``, the takeover through ``/api`` and the portal's path, fencing.

Two masters in-process share one node: the agent app with its real fence (its file in the test's
folder), reached by both masters' own agent clients, which name each master as its identity store
says. The older master commands the node first; once the other takes over, the node refuses the
older one's commands (409 ``fenced`` at the admin API, both epochs named) and still answers its reads.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.master._rooms import api_refusal, audit_lines, ok, portal_refusal
from tests.master._stack import Master, running_master
from tests.master.test_api_services import _RealAgent
from tests.master.test_ui_pages import portal_user

from mirbad_agent import AgentServices, ComposedDriver, EpochFence, NodeRuntimes, create_app
from mirbad_master.takeover import actions
from mirbad_master.takeover.panels import identity_text
from mirbad_master.ui._refusals import PORTAL_ACTOR
from mirbad_orchestration.exceptions import AgentFencedError
from mirbad_protocol import ExecutableRef, ModelDefinition, ModelState
from mirbad_protocol.agent import ProcessRuntimeInfo
from mirbad_runtime import MemoryProbe
from mirbad_runtime.testing import FakeDriver

pytestmark = pytest.mark.anyio

TINY = ModelDefinition(
    id="tiny",
    served_name="tiny-chat",
    runtime="llamacpp",
    executable=ExecutableRef(name="llama-server", version="test"),
    model_path="tiny.gguf",
    memory_budget_gib=0.5,
)


def fenced_agent(state: Path) -> tuple[AgentServices, Any]:
    """The agent app with a fake driver and its real fence in ``state``, as the masters reach it."""
    executables = [ExecutableRef(name="llama-server", version="test")]
    driver = ComposedDriver(
        FakeDriver(port_range_start=8500), (ProcessRuntimeInfo(runtime="llamacpp", executables=executables),)
    )
    agent_services = AgentServices(
        runtimes=NodeRuntimes([driver]),
        memory=MemoryProbe(linux=False, fake_total_gib=16.0),
        node_name="local",
        version="0.0.test",
        fence=EpochFence(state),
    )
    return agent_services, _RealAgent(create_app(agent_services, background=False))


@asynccontextmanager
async def two_masters(root: Path) -> AsyncIterator[tuple[Master, Master, Path]]:
    """An older and a newer master over one fenced agent; the folder of the agent's fence."""
    state = root / "agent"
    agent_services, agent = fenced_agent(state)
    async with (
        agent_services,
        running_master(root / "older", agent=lambda node_id: agent) as older,
        running_master(root / "newer", agent=lambda node_id: agent) as newer,
    ):
        for master in (older, newer):
            await master.services.models.upsert(TINY)
        yield older, newer, state


async def test_get_master_answers_the_instance_id_and_epoch(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        identity = await master.services.identity.read()
        answer = await ok(master.admin.get("/api/master"))
        refused = await master.anonymous.get("/api/master")

    assert answer == {"instanceId": identity.instance_id, "epoch": identity.epoch}
    assert refused.status_code == 401


async def test_a_takeover_fences_the_older_master_off_the_node_through_the_api(tmp_path: Path) -> None:
    async with two_masters(tmp_path) as (older, newer, _):
        # The older master commands the node first: the node takes its epoch.
        await ok(older.admin.post("/api/models/tiny/start"))
        before = await ok(newer.admin.get("/api/master"))
        # Another master at the same epoch is a stranger to the node until it takes over.
        with pytest.raises(AgentFencedError) as same_epoch:
            await (await newer.services.client_of("local")).stop(TINY.id)
        taken = await ok(newer.admin.post("/api/master/takeover"))
        fenced = await older.admin.post("/api/models/tiny/restart")
        # Reads stay allowed for the older master.
        nodes = await ok(older.admin.get("/api/nodes"))
        seen = await (await older.services.client_of("local")).status(TINY.id)
        stopped = await (await newer.services.client_of("local")).stop(TINY.id)
        lines = [line for line in await audit_lines(newer) if line[1] == actions.TAKEOVER_ACTION]

    assert before["epoch"] == 0
    assert (same_epoch.value.epoch, same_epoch.value.request_epoch) == (0, 0)
    assert taken == {
        "instanceId": before["instanceId"],
        "epoch": 1,
        "nodes": [{"nodeId": "local", "claimed": True}],
    }
    refusal = api_refusal(fenced)
    assert (refusal.status, refusal.code) == (409, "fenced")
    assert "epoch 1" in refusal.message
    assert "epoch 0" in refusal.message
    assert nodes
    assert seen.id == TINY.id
    assert stopped.state is ModelState.STOPPED
    assert lines == [("user:admin", actions.TAKEOVER_ACTION, before["instanceId"], None, "ok")]


async def test_the_portal_takes_over_as_the_api_does(tmp_path: Path) -> None:
    async with two_masters(tmp_path / "api") as (older, newer, _):
        await ok(older.admin.post("/api/models/tiny/start"))
        await ok(newer.admin.post("/api/master/takeover"))
        api_fenced = api_refusal(await older.admin.post("/api/models/tiny/restart"))
        through_the_api = [(line[1], line[4]) for line in await audit_lines(newer)]

    async with two_masters(tmp_path / "portal") as (older, newer, _):
        await ok(older.admin.post("/api/models/tiny/start"))
        taken = await actions.take_over(newer.services, PORTAL_ACTOR)
        client = await older.services.client_of("local")
        with pytest.raises(AgentFencedError) as fenced:
            await client.stop(TINY.id)
        portal_fenced = await portal_refusal(lambda: client.stop(TINY.id))
        shown = identity_text(await actions.master_identity(newer.services))
        through_the_portal = [(line[1], line[4]) for line in await audit_lines(newer)]

    assert (fenced.value.epoch, fenced.value.request_epoch) == (1, 0)
    assert (portal_fenced.status, portal_fenced.code) == (api_fenced.status, api_fenced.code)
    assert shown == f"This master: {taken.instance_id} at fencing epoch 1"
    assert [(claim.node_id, claim.claimed) for claim in taken.nodes] == [("local", True)]
    assert (actions.TAKEOVER_ACTION, "ok") in through_the_portal
    assert [line for line in through_the_portal if line[0] == actions.TAKEOVER_ACTION] == [
        line for line in through_the_api if line[0] == actions.TAKEOVER_ACTION
    ]


async def test_a_node_away_during_the_takeover_is_named_and_follows_at_the_next_command(
    tmp_path: Path,
) -> None:
    agent_services, agent = fenced_agent(tmp_path / "agent")
    async with (
        agent_services,
        running_master(tmp_path, "local", "gpu-2", agent=lambda node_id: agent) as master,
    ):
        master.agents.down.add("gpu-2")
        taken = await ok(master.admin.post("/api/master/takeover"))
        entries = await master.services.audit.read(datetime.now(UTC).date())
        master.agents.down.discard("gpu-2")
        followed = await (await master.services.client_of("gpu-2")).claim()

    claims = {claim["nodeId"]: claim for claim in taken["nodes"]}
    assert claims["local"] == {"nodeId": "local", "claimed": True}
    assert claims["gpu-2"]["claimed"] is False
    assert "unreachable" in claims["gpu-2"]["reason"]
    takeover = [entry for entry in entries if entry.action == actions.TAKEOVER_ACTION]
    assert [entry.detail for entry in takeover] == ["epoch 0 -> 1; 1 of 2 node(s) claimed"]
    assert followed.epoch == 1


async def test_the_nodes_page_shows_the_master_and_takes_over_after_asking(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master, portal_user(master) as user:
        before = await master.services.identity.read()
        await user.open("/nodes")
        await user.should_see(f"This master: {before.instance_id} at fencing epoch 0")
        user.find(marker="master-takeover").click()
        await user.should_see("Raise the fencing epoch?")
        user.find(marker="master-takeover-confirm").click()
        await user.should_see(f"This master: {before.instance_id} at fencing epoch 1")
        after = await master.services.identity.read()
        lines = [line for line in await audit_lines(master) if line[1] == actions.TAKEOVER_ACTION]

    assert after.epoch == 1
    assert lines == [(PORTAL_ACTOR, actions.TAKEOVER_ACTION, before.instance_id, None, "ok")]
