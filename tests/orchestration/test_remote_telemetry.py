"""The remote telemetry collector: agents' rings into a bounded per-model history with rates."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from tests.orchestration._fleet import fleet_of

from mirbad_orchestration.fleet import NodeMonitor, RemoteTelemetryCollector
from mirbad_orchestration.testing import FakeClock
from mirbad_protocol import ModelMetrics
from mirbad_protocol.agent import HostGpuSample, ServiceGpuMemory

pytestmark = pytest.mark.anyio

T0 = datetime(2025, 6, 1, 8, 0, tzinfo=UTC)


def sample(
    model_id: str, seconds: float, generated: float | None, *, rate: float | None = None
) -> ModelMetrics:
    return ModelMetrics(
        model_id=model_id,
        at=T0 + timedelta(seconds=seconds),
        requests_running=1,
        generation_tokens_total=generated,
        prompt_tokens_total=None if generated is None else generated * 2,
        generation_tokens_per_second=rate,
    )


async def test_a_first_read_keeps_every_sample_and_the_agents_rates(tmp_path: Path) -> None:
    async with fleet_of(tmp_path, "local") as (fleet, nodes, clients):
        fleet.agents["local"].telemetry = {
            "qwen": [sample("qwen", 0, 100), sample("qwen", 5, 150, rate=10.0)],
            "gemma": [sample("gemma", 0, 7)],
        }
        collector = RemoteTelemetryCollector(nodes, clients)
        await collector.poll_all()

    history = collector.history("qwen")
    assert [entry.at for entry in history] == [T0, T0 + timedelta(seconds=5)]
    assert history[1].generation_tokens_per_second == 10.0  # the agent's own rate is kept
    assert history[1].prompt_tokens_per_second == 20.0  # missing: recomputed from the counters
    assert collector.latest("gemma") == sample("gemma", 0, 7)
    assert collector.node_of("qwen") == "local"


async def test_later_reads_ask_only_for_newer_samples_and_continue_the_rates(tmp_path: Path) -> None:
    async with fleet_of(tmp_path, "local") as (fleet, nodes, clients):
        agent = fleet.agents["local"]
        agent.telemetry = {"qwen": [sample("qwen", 0, 100)]}
        collector = RemoteTelemetryCollector(nodes, clients)
        await collector.poll_all()
        agent.telemetry["qwen"].append(sample("qwen", 10, 300))
        added = await collector.poll_node(await nodes.get("local"))

    assert added == 1
    assert agent.requests[0] == ("GET", "/agent/v1/telemetry")
    assert agent.requests[1][1].startswith("/agent/v1/telemetry?since=2025-06-01T08%3A00%3A00%2B00%3A00")
    latest = collector.latest("qwen")
    assert latest is not None
    assert latest.generation_tokens_per_second == 20.0
    assert latest.prompt_tokens_per_second == 40.0


async def test_overlapping_samples_are_kept_once(tmp_path: Path) -> None:
    async with fleet_of(tmp_path, "local") as (fleet, nodes, clients):
        fleet.agents["local"].telemetry = {"qwen": [sample("qwen", 0, 1), sample("qwen", 5, 2)]}
        collector = RemoteTelemetryCollector(nodes, clients)
        record = await nodes.get("local")
        await collector.poll_node(record)
        collector._since.clear()  # as after a master restart with the history kept: the agent resends all
        again = await collector.poll_node(record)

    assert again == 0
    assert len(collector.history("qwen")) == 2


async def test_no_rate_across_a_counter_reset_or_a_missing_counter(tmp_path: Path) -> None:
    async with fleet_of(tmp_path, "local") as (fleet, nodes, clients):
        fleet.agents["local"].telemetry = {
            "qwen": [
                sample("qwen", 0, 500),
                sample("qwen", 5, 20),
                sample("qwen", 10, None),
                sample("qwen", 15, 70),
            ]
        }
        collector = RemoteTelemetryCollector(nodes, clients)
        await collector.poll_all()

    rates = [entry.generation_tokens_per_second for entry in collector.history("qwen")]
    assert rates == [None, None, None, None]


async def test_the_history_is_bounded(tmp_path: Path) -> None:
    async with fleet_of(tmp_path, "local") as (fleet, nodes, clients):
        fleet.agents["local"].telemetry = {"qwen": [sample("qwen", s, s) for s in range(10)]}
        collector = RemoteTelemetryCollector(nodes, clients, capacity=3)
        await collector.poll_all()

    assert [entry.generation_tokens_total for entry in collector.history("qwen")] == [7, 8, 9]
    with pytest.raises(ValueError, match="at least one"):
        RemoteTelemetryCollector(nodes, clients, capacity=0)


async def test_history_filters(tmp_path: Path) -> None:
    async with fleet_of(tmp_path, "local") as (fleet, nodes, clients):
        fleet.agents["local"].telemetry = {"qwen": [sample("qwen", s, s) for s in range(5)]}
        collector = RemoteTelemetryCollector(nodes, clients)
        await collector.poll_all()

    since = collector.history("qwen", since=T0 + timedelta(seconds=1))
    assert [entry.generation_tokens_total for entry in since] == [2, 3, 4]
    assert [entry.generation_tokens_total for entry in collector.history("qwen", limit=2)] == [3, 4]
    assert collector.history("qwen", limit=0) == []
    assert collector.history("ghost") == []
    assert collector.latest("ghost") is None


async def test_retain_forgets_other_models(tmp_path: Path) -> None:
    async with fleet_of(tmp_path, "local") as (fleet, nodes, clients):
        fleet.agents["local"].telemetry = {"qwen": [sample("qwen", 0, 1)], "old": [sample("old", 0, 1)]}
        collector = RemoteTelemetryCollector(nodes, clients)
        await collector.poll_all()
        collector.retain(["qwen"])

    assert collector.history("old") == []
    assert collector.node_of("old") is None
    assert len(collector.history("qwen")) == 1


async def test_unreachable_and_failing_nodes_are_skipped(tmp_path: Path) -> None:
    async with fleet_of(tmp_path, "local", "spark-2", "spark-3") as (fleet, nodes, clients):
        for node_id in ("local", "spark-2", "spark-3"):
            fleet.agents[node_id].telemetry = {f"m-{node_id}": [sample(f"m-{node_id}", 0, 1)]}
        monitor = NodeMonitor(nodes, clients)
        fleet.down.add("spark-2")
        await monitor.poll_all()
        fleet.down = {"spark-3"}  # spark-3 drops after the monitor's poll; spark-2 came back
        collector = RemoteTelemetryCollector(nodes, clients, cache=monitor.cache)
        await collector.poll_all()

    assert collector.latest("m-local") is not None
    assert collector.latest("m-spark-2") is None  # the cache still says unreachable: not asked
    assert collector.latest("m-spark-3") is None
    assert not any(path.startswith("/agent/v1/telemetry") for _, path in fleet.agents["spark-2"].requests)


async def test_a_model_that_moved_gets_no_rate_across_nodes(tmp_path: Path) -> None:
    async with fleet_of(tmp_path, "local", "spark-2") as (fleet, nodes, clients):
        fleet.agents["local"].telemetry = {"qwen": [sample("qwen", 0, 100)]}
        collector = RemoteTelemetryCollector(nodes, clients)
        await collector.poll_node(await nodes.get("local"))
        fleet.agents["spark-2"].telemetry = {"qwen": [sample("qwen", 60, 900)]}
        await collector.poll_node(await nodes.get("spark-2"))

    latest = collector.latest("qwen")
    assert latest is not None
    assert latest.generation_tokens_per_second is None
    assert collector.node_of("qwen") == "spark-2"


async def test_run_reads_every_interval(tmp_path: Path) -> None:
    clock = FakeClock()
    async with fleet_of(tmp_path, "local") as (fleet, nodes, clients):
        agent = fleet.agents["local"]
        collector = RemoteTelemetryCollector(nodes, clients, interval_s=10, sleep=clock.sleep)
        async with anyio.create_task_group() as group:
            await group.start(collector.run)
            await clock.advance(0)
            first = len(agent.requests)
            await clock.advance(10)
            second = len(agent.requests)
            group.cancel_scope.cancel()

    assert (first, second) == (1, 2)


def host(seconds: float, **services: int) -> HostGpuSample:
    return HostGpuSample(
        at=T0 + timedelta(seconds=seconds),
        source="hostd",
        services=[
            ServiceGpuMemory(unit=f"{n}.service", name=n, gpu_memory_bytes=b) for n, b in services.items()
        ],
    )


async def test_host_samples_are_kept_per_node_once_and_bounded(tmp_path: Path) -> None:
    async with fleet_of(tmp_path, "local", "gpu-2") as (fleet, nodes, clients):
        fleet.agents["local"].host_samples = [host(0, ollama=5), host(5, ollama=6)]
        fleet.agents["gpu-2"].host_samples = [host(1)]
        collector = RemoteTelemetryCollector(nodes, clients, capacity=2)
        await collector.poll_all()
        # The next read asks from the newest host sample on: one new, one overlapping (kept once).
        fleet.agents["local"].host_samples += [host(10, comfy=1)]
        await collector.poll_node(await nodes.get("local"))
        await collector.poll_node(await nodes.get("local"))

    kept = collector.host_histories()
    assert [sample.at for sample in kept["local"]] == [T0 + timedelta(seconds=5), T0 + timedelta(seconds=10)]
    assert kept["local"][-1].services[0].name == "comfy"
    assert [sample.services for sample in kept["gpu-2"]] == [[]]
    assert (
        fleet.agents["local"].requests[-1][1].startswith("/agent/v1/telemetry?since=2025-06-01T08%3A00%3A10")
    )


async def test_a_removed_nodes_host_samples_go_with_it(tmp_path: Path) -> None:
    async with fleet_of(tmp_path, "local", "gpu-2") as (fleet, nodes, clients):
        fleet.agents["gpu-2"].host_samples = [host(1, ollama=5)]
        collector = RemoteTelemetryCollector(nodes, clients)
        await collector.poll_all()
        assert list(collector.host_histories()) == ["gpu-2"]
        await nodes.remove("gpu-2")
        await collector.poll_all()
    assert collector.host_histories() == {}
