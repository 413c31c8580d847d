"""The agent endpoint resolver: served names to nodes and agent proxy URLs, from registry and cache."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.orchestration._fleet import Fleet, fleet_of

from mirbad_orchestration import ModelRegistry, launch_spec_for
from mirbad_orchestration.fleet import AgentClients, AgentEndpointResolver, NodeMonitor, NodeRegistry
from mirbad_protocol import ModelDefinition, ModelState, Placement

pytestmark = pytest.mark.anyio

QWEN = ModelDefinition(
    id="qwen", served_name="Qwen3-8B", model_path="qwen/qwen3-8b", auto_start_on_request=True
)
GEMMA = ModelDefinition(
    id="gemma", served_name="gemma-3", model_path="gemma/3", placement=Placement(node_id="spark-2")
)


@dataclass
class Setup:
    fleet: Fleet
    nodes: NodeRegistry
    clients: AgentClients
    monitor: NodeMonitor
    resolver: AgentEndpointResolver


@asynccontextmanager
async def resolver_of(tmp_path: Path, *definitions: ModelDefinition) -> AsyncIterator[Setup]:
    async with fleet_of(tmp_path, "local", "spark-2") as (fleet, nodes, clients):
        models = ModelRegistry(tmp_path)
        for definition in definitions:
            await models.upsert(definition)
        monitor = NodeMonitor(nodes, clients)
        resolver = AgentEndpointResolver(models, nodes, clients, monitor.cache, default_node_id="local")
        yield Setup(fleet, nodes, clients, monitor, resolver)


async def test_a_ready_model_resolves_to_its_agent_proxy(tmp_path: Path) -> None:
    async with resolver_of(tmp_path, QWEN) as setup:
        await setup.fleet.agents["local"].driver.start(launch_spec_for(QWEN))
        await setup.monitor.poll_all()
        endpoint = await setup.resolver.resolve("qwen3-8b")
        client = setup.clients.client_for(await setup.nodes.get("local")).http

    assert endpoint is not None
    assert (endpoint.model_id, endpoint.served_name, endpoint.node_id) == ("qwen", "Qwen3-8B", "local")
    assert endpoint.state is ModelState.READY
    assert endpoint.ready
    assert endpoint.auto_start_on_request
    assert endpoint.base_url == "https://local.lan:9443/agent/v1/proxy/qwen/"
    assert endpoint.client is client


async def test_an_unknown_name_resolves_to_nothing(tmp_path: Path) -> None:
    async with resolver_of(tmp_path, QWEN) as setup:
        await setup.monitor.poll_all()
        assert await setup.resolver.resolve("nope") is None


async def test_a_stopped_model_resolves_to_its_placement(tmp_path: Path) -> None:
    async with resolver_of(tmp_path, GEMMA) as setup:
        await setup.monitor.poll_all()
        endpoint = await setup.resolver.resolve("GEMMA-3")

    assert endpoint is not None
    assert (endpoint.node_id, endpoint.state, endpoint.error) == ("spark-2", ModelState.STOPPED, None)
    assert endpoint.base_url == "https://spark-2.lan:9443/agent/v1/proxy/gemma/"
    assert not endpoint.ready


async def test_a_running_model_resolves_to_where_it_runs(tmp_path: Path) -> None:
    async with resolver_of(tmp_path, GEMMA) as setup:
        # Placement says spark-2, but it still runs on the local node (a move in progress).
        await setup.fleet.agents["local"].driver.start(launch_spec_for(GEMMA))
        await setup.monitor.poll_all()
        endpoint = await setup.resolver.resolve("gemma-3")

    assert endpoint is not None
    assert (endpoint.node_id, endpoint.state) == ("local", ModelState.READY)


async def test_a_failed_model_carries_its_error(tmp_path: Path) -> None:
    async with resolver_of(tmp_path, QWEN) as setup:
        await setup.fleet.agents["local"].driver.start(launch_spec_for(QWEN))
        setup.fleet.agents["local"].driver.set_state("qwen", ModelState.FAILED, error="CUDA out of memory")
        await setup.monitor.poll_all()
        endpoint = await setup.resolver.resolve("Qwen3-8B")

    assert endpoint is not None
    assert (endpoint.state, endpoint.error) == (ModelState.FAILED, "CUDA out of memory")


async def test_an_unreachable_node_makes_the_state_unknown(tmp_path: Path) -> None:
    async with resolver_of(tmp_path, QWEN) as setup:
        await setup.fleet.agents["local"].driver.start(launch_spec_for(QWEN))
        await setup.monitor.poll_all()
        setup.fleet.down.add("local")
        await setup.monitor.poll_all()
        endpoint = await setup.resolver.resolve("Qwen3-8B")

    assert endpoint is not None
    assert endpoint.state is ModelState.UNKNOWN
    assert endpoint.error is not None
    assert "unreachable" in endpoint.error
    assert not endpoint.ready


async def test_a_node_not_polled_yet(tmp_path: Path) -> None:
    async with resolver_of(tmp_path, QWEN) as setup:
        endpoint = await setup.resolver.resolve("Qwen3-8B")

    assert endpoint is not None
    assert endpoint.state is ModelState.UNKNOWN
    assert endpoint.error == "node 'local' has not been polled yet"


async def test_a_placement_on_an_unregistered_node(tmp_path: Path) -> None:
    lost = QWEN.model_copy(update={"placement": Placement(node_id="gone")})
    async with resolver_of(tmp_path, lost) as setup:
        await setup.monitor.poll_all()
        endpoint = await setup.resolver.resolve("Qwen3-8B")

    assert endpoint is not None
    assert (endpoint.node_id, endpoint.state, endpoint.base_url, endpoint.client) == (
        "gone",
        ModelState.UNKNOWN,
        None,
        None,
    )
    assert endpoint.error == "node 'gone' is not registered"


async def test_list_ready(tmp_path: Path) -> None:
    async with resolver_of(tmp_path, QWEN, GEMMA) as setup:
        await setup.fleet.agents["local"].driver.start(launch_spec_for(QWEN))
        await setup.fleet.agents["spark-2"].driver.start(launch_spec_for(GEMMA))
        setup.fleet.agents["spark-2"].driver.set_state("gemma", ModelState.STARTING)
        await setup.monitor.poll_all()
        ready = await setup.resolver.list_ready()

    assert [endpoint.served_name for endpoint in ready] == ["Qwen3-8B"]


async def test_an_endpoint_carries_the_models_context_for_token_reservations(tmp_path: Path) -> None:
    short = ModelDefinition(id="short", served_name="short", model_path="s", max_model_len=2048)
    async with resolver_of(tmp_path, short) as setup:
        await setup.monitor.poll_all()
        endpoint = await setup.resolver.resolve("short")

    # A keyed request without max_tokens reserves this much (mirbad_router's request_token_bound).
    assert endpoint is not None
    assert endpoint.context_tokens == 2048
