"""The node monitor and its status cache, polling fake agents on a fake clock."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import anyio
import pytest
from tests.orchestration._fake_agent import Refusal
from tests.orchestration._fleet import fleet_of

from mirbad_orchestration import launch_spec_for
from mirbad_orchestration.exceptions import NodeUnreachableError
from mirbad_orchestration.fleet import NodeMonitor, NodeState, StatusCache
from mirbad_orchestration.testing import FakeClock
from mirbad_protocol import MemorySnapshot, ModelDefinition, ModelState, ModelStatus
from mirbad_protocol.agent import AgentErrorCode, AgentInfo

pytestmark = pytest.mark.anyio

QWEN = ModelDefinition(id="qwen", served_name="Qwen3-8B", model_path="qwen/qwen3-8b")


def polls(agent_requests: list[tuple[str, str]]) -> int:
    return sum(1 for request in agent_requests if request == ("GET", "/agent/v1/runtimes"))


async def test_a_poll_reads_every_node(tmp_path: Path) -> None:
    clock = FakeClock()
    async with fleet_of(tmp_path, "spark-1", "spark-2") as (fleet, registry, clients):
        await fleet.agents["spark-1"].driver.start(launch_spec_for(QWEN))
        fleet.down.add("spark-2")
        monitor = NodeMonitor(registry, clients, clock=clock.now)

        states = await monitor.poll_all()

    up, down = states
    assert (up.node_id, up.reachable, up.error) == ("spark-1", True, None)
    assert up.last_seen == up.polled_at == clock.now()
    assert [(status.id, status.node_id, status.state) for status in up.models] == [
        ("qwen", "spark-1", ModelState.READY)
    ]
    assert up.memory is not None
    assert up.memory.total_gib == 128.0
    assert up.info is not None
    assert up.info.node_name == "spark-1"
    assert (down.node_id, down.reachable, down.last_seen) == ("spark-2", False, None)
    assert down.error is not None
    assert "unreachable" in down.error
    assert monitor.cache.nodes() == states


async def test_an_unreachable_node_keeps_its_last_known_state(tmp_path: Path) -> None:
    clock = FakeClock()
    async with fleet_of(tmp_path, "spark-1") as (fleet, registry, clients):
        await fleet.agents["spark-1"].driver.start(launch_spec_for(QWEN))
        monitor = NodeMonitor(registry, clients, clock=clock.now)
        seen = (await monitor.poll_all())[0]

        fleet.down.add("spark-1")
        await clock.advance(5)
        lost = (await monitor.poll_all())[0]

        fleet.down.clear()
        await clock.advance(5)
        back = (await monitor.poll_all())[0]

    assert seen.last_seen is not None
    assert seen.polled_at is not None
    assert not lost.reachable
    assert lost.models == seen.models
    assert lost.last_seen == seen.last_seen
    assert lost.polled_at == seen.polled_at + timedelta(seconds=5)
    assert back.reachable
    assert back.error is None
    assert back.last_seen == seen.last_seen + timedelta(seconds=10)


async def test_a_dropped_kept_alive_connection_is_retried_on_a_fresh_one(tmp_path: Path) -> None:
    async with fleet_of(tmp_path, "spark-1") as (fleet, registry, clients):
        fleet.stale["spark-1"] = 1
        monitor = NodeMonitor(registry, clients)

        state = (await monitor.poll_all())[0]

    assert (state.reachable, state.error) == (True, None)
    assert fleet.transports["spark-1"] == 2  # the retry did not reuse the pool that failed


async def test_a_node_whose_fresh_connection_drops_too_is_unreachable(tmp_path: Path) -> None:
    async with fleet_of(tmp_path, "spark-1") as (fleet, registry, clients):
        fleet.stale["spark-1"] = 2
        monitor = NodeMonitor(registry, clients)

        state = (await monitor.poll_all())[0]

    assert not state.reachable
    assert state.error is not None
    assert "Server disconnected" in state.error


async def test_a_start_on_a_dropped_connection_is_never_sent_again(tmp_path: Path) -> None:
    async with fleet_of(tmp_path, "spark-1") as (fleet, registry, clients):
        fleet.stale["spark-1"] = 1
        client = clients.client_for(await registry.get("spark-1"))

        with pytest.raises(NodeUnreachableError):
            await client.start(launch_spec_for(QWEN))

    assert fleet.transports["spark-1"] == 1
    assert await fleet.agents["spark-1"].driver.list_statuses() == []


async def test_a_failing_memory_probe_keeps_the_node_reachable(tmp_path: Path) -> None:
    async with fleet_of(tmp_path, "spark-1") as (fleet, registry, clients):
        monitor = NodeMonitor(registry, clients)
        first = (await monitor.poll_all())[0]
        fleet.agents["spark-1"].refusals["memory"] = Refusal(503, AgentErrorCode.PROBE_FAILED, "meminfo")
        second = (await monitor.poll_all())[0]

    assert second.reachable
    assert second.memory == first.memory
    assert second.error is not None
    assert "meminfo" in second.error


async def test_a_wedged_agent_is_bounded_by_the_poll_timeout(tmp_path: Path) -> None:
    async with fleet_of(tmp_path, "spark-1") as (fleet, registry, clients):
        fleet.agents["spark-1"].stall = anyio.Event()
        monitor = NodeMonitor(registry, clients, poll_timeout_s=0.2)
        with anyio.fail_after(10):
            state = (await monitor.poll_all())[0]
        fleet.agents["spark-1"].stall.set()

    assert not state.reachable
    assert state.error is not None
    assert "0.2" in state.error


async def test_removed_nodes_are_forgotten(tmp_path: Path) -> None:
    async with fleet_of(tmp_path, "spark-1", "spark-2") as (_, registry, clients):
        monitor = NodeMonitor(registry, clients)
        await monitor.poll_all()
        await registry.remove("spark-2")
        states = await monitor.poll_all()

    assert [state.node_id for state in states] == ["spark-1"]
    assert monitor.cache.node("spark-2") is None


async def test_run_polls_every_interval_on_the_clock(tmp_path: Path) -> None:
    clock = FakeClock()
    async with fleet_of(tmp_path, "spark-1") as (fleet, registry, clients):
        agent = fleet.agents["spark-1"]
        monitor = NodeMonitor(registry, clients, interval_s=5, clock=clock.now, sleep=clock.sleep)
        async with anyio.create_task_group() as group:
            await group.start(monitor.run)
            after_start = polls(agent.requests)
            await clock.advance(4.9)
            early = polls(agent.requests)
            await clock.advance(0.1)
            on_time = polls(agent.requests)
            await clock.advance(10)
            later = polls(agent.requests)
            group.cancel_scope.cancel()

    assert (after_start, early, on_time, later) == (1, 1, 2, 4)
    state = monitor.cache.node("spark-1")
    assert state is not None
    assert state.polled_at == clock.now()


def status(model_id: str, state: ModelState) -> ModelStatus:
    return ModelStatus(id=model_id, served_name=model_id.upper(), state=state)


def test_the_cache_locates_a_running_instance_first() -> None:
    cache = StatusCache()
    cache.put(NodeState("a", True, models=(status("qwen", ModelState.FAILED),)))
    cache.put(NodeState("b", True, models=(status("qwen", ModelState.READY),)))
    cache.put(NodeState("c", True))

    located = cache.locate("qwen")
    assert located is not None
    assert located.node_id == "b"
    assert cache.locate("ghost") is None


def test_record_status_folds_in_starts_and_stops() -> None:
    cache = StatusCache()
    cache.record_status("a", status("qwen", ModelState.STARTING))
    cache.record_status("a", status("gemma", ModelState.STARTING))

    state = cache.node("a")
    assert state is not None
    assert [(known.id, known.node_id) for known in state.models] == [("gemma", "a"), ("qwen", "a")]

    cache.record_status("a", status("qwen", ModelState.STOPPED))
    state = cache.node("a")
    assert state is not None
    assert [known.id for known in state.models] == ["gemma"]


def test_a_node_state_knows_its_boot_id_when_the_agent_reports_one() -> None:
    info = AgentInfo.model_validate({"nodeName": "a", "version": "1", "bootId": "b-1"})
    assert NodeState("a", True, info=info).boot_id == "b-1"
    assert NodeState("a").boot_id is None


def test_a_node_state_without_memory() -> None:
    state = NodeState("a", True, memory=MemorySnapshot(total_gib=1, available_gib=1))
    assert state.model("x") is None
