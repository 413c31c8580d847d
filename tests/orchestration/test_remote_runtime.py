"""The remote runtime: the ModelRuntime contract over a fleet of fake agents."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.orchestration._fleet import Fleet, fleet_of

from mirbad_orchestration import launch_spec_for
from mirbad_orchestration.exceptions import (
    AgentAdmissionRefusedError,
    NodeConflictError,
    NodeUnreachableError,
    UnknownNodeError,
)
from mirbad_orchestration.fleet import (
    ModelRuntime,
    NodeMonitor,
    NodeView,
    RemoteModelRuntime,
    launch_total_gib,
)
from mirbad_orchestration.testing import FakeClock
from mirbad_protocol import (
    ContainerLaunch,
    ExecutableRef,
    GpuMemory,
    MemorySnapshot,
    ModelDefinition,
    ModelState,
    Placement,
)

pytestmark = pytest.mark.anyio

QWEN = ModelDefinition(id="qwen", served_name="Qwen3-8B", model_path="qwen/qwen3-8b", memory_budget_gib=16)


def placed(definition: ModelDefinition, node_id: str, *gpus: str) -> ModelDefinition:
    return definition.model_copy(update={"placement": Placement(node_id=node_id, gpu_uuids=list(gpus))})


def utilization(spec: object) -> str:
    assert isinstance(spec, ContainerLaunch)
    return spec.argv[spec.argv.index("--gpu-memory-utilization") + 1]


@dataclass
class Setup:
    fleet: Fleet
    monitor: NodeMonitor
    runtime: RemoteModelRuntime
    clock: FakeClock


@asynccontextmanager
async def runtime_of(tmp_path: Path, *node_ids: str, poll: bool = True) -> AsyncIterator[Setup]:
    clock = FakeClock()
    async with fleet_of(tmp_path, *node_ids) as (fleet, registry, clients):
        monitor = NodeMonitor(registry, clients, clock=clock.now)
        if poll:
            await monitor.poll_all()
        yield Setup(fleet, monitor, RemoteModelRuntime(monitor, default_node_id=node_ids[0]), clock)


def test_it_is_a_model_runtime() -> None:
    assert issubclass(RemoteModelRuntime, ModelRuntime)


async def test_start_goes_to_the_default_node_with_its_memory(tmp_path: Path) -> None:
    async with runtime_of(tmp_path, "local", "spark-2") as setup:
        status = await setup.runtime.start(QWEN)

    agent = setup.fleet.agents["local"]
    assert (status.node_id, status.state) == ("local", ModelState.READY)
    assert [spec.model_id for spec in agent.driver.starts] == ["qwen"]
    assert utilization(agent.driver.starts[0]) == "0.1250"  # 16 of the node's 128 GiB
    assert setup.fleet.agents["spark-2"].driver.starts == []
    cached = setup.monitor.cache.node("local")
    assert cached is not None
    assert cached.model("qwen") == status


async def test_start_follows_the_placement(tmp_path: Path) -> None:
    async with runtime_of(tmp_path, "local", "spark-2") as setup:
        status = await setup.runtime.start(placed(QWEN, "spark-2"))

    assert status.node_id == "spark-2"
    assert setup.runtime.node_for(placed(QWEN, "spark-2")) == "spark-2"
    assert setup.runtime.node_for(QWEN) == "local"
    assert [spec.model_id for spec in setup.fleet.agents["spark-2"].driver.starts] == ["qwen"]


async def test_start_reads_memory_live_before_the_first_poll(tmp_path: Path) -> None:
    async with runtime_of(tmp_path, "local", poll=False) as setup:
        setup.fleet.agents["local"].memory = MemorySnapshot(total_gib=64, available_gib=60)
        await setup.runtime.start(QWEN)

    agent = setup.fleet.agents["local"]
    assert ("GET", "/agent/v1/node/memory") in agent.requests
    assert utilization(agent.driver.starts[0]) == "0.2500"


async def test_a_discrete_gpu_node_sizes_by_the_placed_gpu(tmp_path: Path) -> None:
    gpus = [
        GpuMemory(index=0, uuid="GPU-a", total_mib=81_920),
        GpuMemory(index=1, uuid="GPU-b", total_mib=40_960),
    ]
    async with runtime_of(tmp_path, "local", poll=False) as setup:
        setup.fleet.agents["local"].memory = MemorySnapshot(
            total_gib=256, available_gib=200, unified=False, gpus=gpus
        )
        await setup.monitor.poll_all()
        await setup.runtime.start(placed(QWEN, "local", "GPU-b"))

    spec = setup.fleet.agents["local"].driver.starts[0]
    assert utilization(spec) == "0.4000"
    assert spec.gpus.uuids == ["GPU-b"]


def test_launch_total_gib() -> None:
    gpus = [GpuMemory(index=0, uuid="a", total_mib=8192), GpuMemory(index=1, uuid="b", total_mib=4096)]
    discrete = MemorySnapshot(total_gib=64, available_gib=60, unified=False, gpus=gpus)

    assert launch_total_gib(MemorySnapshot(total_gib=121, available_gib=100)) == 121
    assert launch_total_gib(discrete) == 4
    assert launch_total_gib(discrete, ["a"]) == 8
    assert launch_total_gib(discrete, ["missing"]) == 4
    assert launch_total_gib(MemorySnapshot(total_gib=0, available_gib=0)) == 121  # the documented default


async def test_a_process_model_needs_no_memory_read(tmp_path: Path) -> None:
    llama = ModelDefinition(
        id="tiny",
        served_name="tiny",
        runtime="llamacpp",
        executable=ExecutableRef(name="llama-server", version="b5000"),
        model_path="tiny/tiny.gguf",
    )
    async with runtime_of(tmp_path, "local", poll=False) as setup:
        status = await setup.runtime.start(llama)

    assert status.runtime == "llamacpp"
    assert ("GET", "/agent/v1/node/memory") not in setup.fleet.agents["local"].requests


async def test_admission_refusals_reach_the_caller_and_force_overrides(tmp_path: Path) -> None:
    big = QWEN.model_copy(update={"memory_budget_gib": 110.0})
    async with runtime_of(tmp_path, "local") as setup:
        with pytest.raises(AgentAdmissionRefusedError) as refused:
            await setup.runtime.start(big)
        forced = await setup.runtime.start(big, force=True)

    assert isinstance(refused.value, NodeConflictError)
    assert forced.state is ModelState.READY


async def test_a_model_running_on_another_node_is_left_alone(tmp_path: Path) -> None:
    async with runtime_of(tmp_path, "local", "spark-2") as setup:
        await setup.runtime.start(placed(QWEN, "spark-2"))
        status = await setup.runtime.start(QWEN)

    assert status.node_id == "spark-2"
    assert setup.fleet.agents["local"].driver.starts == []


async def test_stop_finds_the_node_in_the_cache(tmp_path: Path) -> None:
    async with runtime_of(tmp_path, "local", "spark-2") as setup:
        await setup.runtime.start(placed(QWEN, "spark-2"))
        await setup.runtime.stop("qwen")

    assert setup.fleet.agents["spark-2"].driver.stops == ["qwen"]
    assert setup.fleet.agents["local"].driver.stops == []
    assert setup.monitor.cache.locate("qwen") is None


async def test_stop_asks_the_nodes_when_the_cache_does_not_know(tmp_path: Path) -> None:
    async with runtime_of(tmp_path, "local", "spark-2") as setup:
        # Launched before this master started: the agent has it, the cache does not.
        await setup.fleet.agents["spark-2"].driver.start(launch_spec_for(QWEN))
        await setup.runtime.stop("qwen")
        await setup.runtime.stop("never-started")

    assert setup.fleet.agents["spark-2"].driver.stops == ["qwen"]
    assert setup.fleet.agents["local"].driver.stops == []


async def test_restart_on_the_same_node(tmp_path: Path) -> None:
    async with runtime_of(tmp_path, "local") as setup:
        await setup.runtime.start(QWEN)
        changed = QWEN.model_copy(update={"max_num_seqs": 32})
        status = await setup.runtime.restart(changed)

    agent = setup.fleet.agents["local"]
    assert status.config_hash == launch_spec_for(changed, total_gib=128).config_hash
    assert ("POST", "/agent/v1/models/qwen/restart") in agent.requests


async def test_restart_after_a_placement_change_moves_the_model(tmp_path: Path) -> None:
    async with runtime_of(tmp_path, "local", "spark-2") as setup:
        await setup.runtime.start(QWEN)
        status = await setup.runtime.restart(placed(QWEN, "spark-2"))

    assert status.node_id == "spark-2"
    assert setup.fleet.agents["local"].driver.stops == ["qwen"]
    assert await setup.fleet.agents["local"].driver.list_statuses() == []


async def test_status_reads_the_node_now(tmp_path: Path) -> None:
    async with runtime_of(tmp_path, "local", "spark-2") as setup:
        await setup.runtime.start(placed(QWEN, "spark-2"))
        setup.fleet.agents["spark-2"].driver.set_state("qwen", ModelState.FAILED, error="oom")
        failed = await setup.runtime.status("qwen")
        unknown = await setup.runtime.status("ghost")
        setup.fleet.down.add("spark-2")
        with pytest.raises(NodeUnreachableError):
            await setup.runtime.status("qwen")

    assert (failed.state, failed.error, failed.node_id) == (ModelState.FAILED, "oom", "spark-2")
    assert (unknown.id, unknown.state) == ("ghost", ModelState.STOPPED)


async def test_statuses_of_the_fleet_and_of_one_node(tmp_path: Path) -> None:
    async with runtime_of(tmp_path, "local", "spark-2") as setup:
        await setup.runtime.start(QWEN)
        await setup.runtime.start(
            placed(QWEN.model_copy(update={"id": "q2", "served_name": "q2"}), "spark-2")
        )
        everything = await setup.runtime.statuses()
        setup.fleet.down.add("spark-2")
        await setup.clock.advance(5)
        reachable = await setup.runtime.statuses()
        with pytest.raises(NodeUnreachableError):
            await setup.runtime.statuses("spark-2")
        with pytest.raises(UnknownNodeError):
            await setup.runtime.statuses("nope")

    assert sorted((status.id, status.node_id) for status in everything) == [
        ("q2", "spark-2"),
        ("qwen", "local"),
    ]
    assert [(status.id, status.node_id) for status in reachable] == [("qwen", "local")]


async def test_statuses_come_from_the_cache_while_it_is_fresh(tmp_path: Path) -> None:
    async with runtime_of(tmp_path, "local") as setup:
        await setup.fleet.agents["local"].driver.start(launch_spec_for(QWEN))
        cached = await setup.runtime.statuses("local")
        await setup.clock.advance(5)
        live = await setup.runtime.statuses("local")

    assert cached == []
    assert [status.id for status in live] == ["qwen"]


async def test_nodes_reports_reachability(tmp_path: Path) -> None:
    async with runtime_of(tmp_path, "local", "spark-2", poll=False) as setup:
        setup.fleet.down.add("spark-2")
        views = await setup.runtime.nodes()

    assert views == [NodeView("local", True, None), NodeView("spark-2", False, None)]
