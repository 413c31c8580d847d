"""The agent client against a real agent-like app, served by uvicorn over real mutual TLS on loopback."""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, asynccontextmanager
from datetime import UTC, datetime, timedelta

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from syrupy.assertion import SnapshotAssertion
from tests._support.asgi_server import free_port, serve_asgi
from tests.orchestration._fake_agent import FakeAgent, Refusal
from tests.orchestration._fleet_pki import FleetPki

from mirbad_orchestration import launch_spec_for
from mirbad_orchestration.exceptions import (
    AgentAdmissionRefusedError,
    AgentLaunchRejectedError,
    AgentProtocolError,
    AgentRequestError,
    AgentStartConflictError,
    LogStreamError,
    ModelNotOnNodeError,
    NodeConflictError,
    NodeError,
    NodeIdentityError,
    NodeTimeoutError,
    NodeUnreachableError,
    UnknownModelError,
)
from mirbad_orchestration.fleet import (
    AgentClient,
    AgentClients,
    AgentTimeouts,
    NodeRecord,
    PooledTransportBuilder,
)
from mirbad_protocol import ContainerLaunch, GpuMemory, ModelDefinition, ModelMetrics, ModelState
from mirbad_protocol.agent import AgentErrorCode, GgufInfo
from mirbad_protocol.pki import TlsCredentials, spki_pin
from mirbad_router import UpstreamError, forward, lean_transport

pytestmark = pytest.mark.anyio

# Every round trip runs on httpx's own transport and on the master's (mirbad_router's lean transport:
# its pool on asyncio's streams, where the event loop does the TLS and the node-identity check).
_build: PooledTransportBuilder | None = None


@pytest.fixture(autouse=True, params=["httpx", "lean"])
def _transport_kind(request: pytest.FixtureRequest) -> str:
    global _build
    kind: str = request.param
    _build = lean_transport if kind == "lean" else None
    return kind


WAIT_S = 20
DEFINITION = ModelDefinition(
    id="qwen", served_name="Qwen3-8B", model_path="qwen/qwen3-8b", memory_budget_gib=16
)


@pytest.fixture(scope="module")
def pki() -> FleetPki:
    return FleetPki.create()


@pytest.fixture(scope="module")
def agent_tls(pki: FleetPki) -> TlsCredentials:
    return pki.agent("node-1")


@pytest.fixture(scope="module")
def master_tls(pki: FleetPki) -> TlsCredentials:
    return pki.master()


def spec() -> ContainerLaunch:
    launch = launch_spec_for(DEFINITION, total_gib=128.0)
    assert isinstance(launch, ContainerLaunch)
    return launch


@asynccontextmanager
async def agent(
    fake: FakeAgent,
    server: TlsCredentials,
    master: TlsCredentials,
    *,
    name: str = "node-1",
    pin: str | None = None,
    timeouts: AgentTimeouts | None = None,
) -> AsyncIterator[AgentClient]:
    """Serve ``fake`` over mutual TLS and yield a client of it for a node named ``name``."""
    with anyio.fail_after(WAIT_S):
        async with serve_asgi(fake.app, ssl_context=server.server_context()) as url:
            record = NodeRecord(id="node-1", name=name, agent_url=url, pin_sha256=pin)
            clients = AgentClients.mutual_tls(master, timeouts=timeouts, build=_build)
            try:
                yield clients.client_for(record)
            finally:
                if fake.stall is not None:
                    fake.stall.set()
                await clients.aclose()


# ---------------------------------------------------------------- round trips


async def test_info_reads_runtimes_and_keeps_unknown_feature_flags(
    agent_tls: TlsCredentials, master_tls: TlsCredentials
) -> None:
    async with agent(FakeAgent(), agent_tls, master_tls) as client:
        info = await client.info()

    assert info.node_name == "node-1"
    assert [runtime.runtime for runtime in info.runtimes] == ["vllm"]
    assert "some.future-flag" in info.features


async def test_start_status_statuses_restart_and_stop(
    agent_tls: TlsCredentials, master_tls: TlsCredentials
) -> None:
    fake = FakeAgent()
    async with agent(fake, agent_tls, master_tls) as client:
        started = await client.start(spec())
        listed = await client.statuses()
        read = await client.status("qwen")
        restarted = await client.restart(spec())
        stopped = await client.stop("qwen")
        after = await client.statuses()

    assert started.state is ModelState.READY
    assert started.config_hash == spec().config_hash
    assert [status.id for status in listed] == ["qwen"]
    assert read.served_name == "Qwen3-8B"
    assert restarted.state is ModelState.READY
    assert stopped.state is ModelState.STOPPED
    assert after == []
    assert fake.driver.stops == ["qwen", "qwen"]


async def test_the_start_request_on_the_wire(
    agent_tls: TlsCredentials, master_tls: TlsCredentials, snapshot_json: SnapshotAssertion
) -> None:
    fake = FakeAgent()
    async with agent(fake, agent_tls, master_tls) as client:
        await client.start(spec(), force=True)

    assert fake.requests == [("POST", "/agent/v1/models/qwen/start")]
    assert fake.bodies == snapshot_json


async def test_logs_tail(agent_tls: TlsCredentials, master_tls: TlsCredentials) -> None:
    fake = FakeAgent()
    async with agent(fake, agent_tls, master_tls) as client:
        await client.start(spec())
        fake.driver.add_log("qwen", "two", "three")
        lines = await client.logs("qwen", tail=2)

    assert lines == ["two", "three"]
    assert fake.requests[-1] == ("GET", "/agent/v1/models/qwen/logs?tail=2")


async def test_node_reads(agent_tls: TlsCredentials, master_tls: TlsCredentials) -> None:
    at = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
    fake = FakeAgent(
        gpus=[GpuMemory(index=0, uuid="GPU-1", name="H200", total_mib=143_771)],
        telemetry={"qwen": [ModelMetrics(model_id="qwen", at=at + timedelta(seconds=s)) for s in (0, 5, 10)]},
        gguf={"tiny/tiny.gguf": GgufInfo(version=3, architecture="llama", block_count=2)},
        present_files={"qwen"},
    )
    async with agent(fake, agent_tls, master_tls) as client:
        memory = await client.memory()
        gpus = await client.gpus()
        telemetry = await client.telemetry(model_id="qwen", since=at, limit=1)
        gguf = await client.gguf_inspect("tiny/tiny.gguf")
        listing = await client.folders(root=0, path="qwen")
        files = await client.model_files(["qwen", "gone/model.gguf"])

    assert memory.total_gib == 128.0
    assert [gpu.uuid for gpu in gpus] == ["GPU-1"]
    assert [sample.at for model in telemetry.models for sample in model.samples] == [
        at + timedelta(seconds=10)
    ]
    assert gguf.block_count == 2
    assert [entry.name for entry in listing.entries] == ["qwen", "a.gguf"]
    assert listing.path == "qwen"
    assert [(file.path, file.present) for file in files] == [("qwen", True), ("gone/model.gguf", False)]
    assert fake.bodies[-1] == {"paths": ["qwen", "gone/model.gguf"]}


async def test_proxy_base_url_names_the_model(agent_tls: TlsCredentials, master_tls: TlsCredentials) -> None:
    async with agent(FakeAgent(), agent_tls, master_tls) as client:
        assert client.proxy_base_url("qwen") == f"{client.agent_url}/agent/v1/proxy/qwen/"


# ---------------------------------------------------------------- refusals


async def test_memory_admission_refused_carries_the_message_and_force_overrides(
    agent_tls: TlsCredentials, master_tls: TlsCredentials
) -> None:
    fake = FakeAgent()
    big = spec().model_copy(update={"budget_gib": 200.0})
    async with agent(fake, agent_tls, master_tls) as client:
        with pytest.raises(AgentAdmissionRefusedError) as refused:
            await client.start(big)
        forced = await client.start(big, force=True)

    assert isinstance(refused.value, NodeConflictError)
    assert refused.value.status_code == 409
    assert refused.value.code == "admission_refused"
    assert "200.0 GiB" in refused.value.message
    assert refused.value.node_id == "node-1"
    assert forced.state is ModelState.READY


async def test_a_rejected_spec_is_launch_rejected(
    agent_tls: TlsCredentials, master_tls: TlsCredentials
) -> None:
    from mirbad_runtime import LaunchRejectedError as DriverRejected

    fake = FakeAgent()
    fake.driver.fail_next_start(DriverRejected("no such image"))
    async with agent(fake, agent_tls, master_tls) as client:
        with pytest.raises(AgentLaunchRejectedError, match="no such image") as rejected:
            await client.start(spec())

    assert rejected.value.status_code == 422


async def test_a_start_conflict_is_a_conflict(agent_tls: TlsCredentials, master_tls: TlsCredentials) -> None:
    fake = FakeAgent(refusals={"start": Refusal(409, AgentErrorCode.START_CONFLICT, "gemma is starting")})
    async with agent(fake, agent_tls, master_tls) as client:
        with pytest.raises(AgentStartConflictError, match="gemma is starting"):
            await client.start(spec())


async def test_an_unknown_model_is_an_unknown_model(
    agent_tls: TlsCredentials, master_tls: TlsCredentials
) -> None:
    async with agent(FakeAgent(), agent_tls, master_tls) as client:
        with pytest.raises(ModelNotOnNodeError) as missing:
            await client.logs("ghost")

    assert isinstance(missing.value, UnknownModelError)
    assert missing.value.model_id == "ghost"
    assert missing.value.status_code == 404


async def test_other_refusals_keep_their_code_and_status(
    agent_tls: TlsCredentials, master_tls: TlsCredentials
) -> None:
    fake = FakeAgent(refusals={"memory": Refusal(503, AgentErrorCode.PROBE_FAILED, "nvidia-smi hung")})
    async with agent(fake, agent_tls, master_tls) as client:
        with pytest.raises(AgentRequestError) as probe:
            await client.memory()
        with pytest.raises(AgentRequestError) as path:
            await client.gguf_inspect("missing.gguf")

    assert (probe.value.status_code, probe.value.code) == (503, "probe_failed")
    assert (path.value.status_code, path.value.code) == (404, "path_not_found")
    assert not isinstance(path.value, ModelNotOnNodeError)


async def test_a_refusal_without_an_envelope(agent_tls: TlsCredentials, master_tls: TlsCredentials) -> None:
    fake = FakeAgent(refusals={"models": Refusal(502, raw="upstream proxy broke")})
    async with agent(fake, agent_tls, master_tls) as client:
        with pytest.raises(AgentRequestError, match="upstream proxy broke") as refused:
            await client.statuses()

    assert (refused.value.status_code, refused.value.code) == (502, None)


async def test_an_answer_outside_the_contract(agent_tls: TlsCredentials, master_tls: TlsCredentials) -> None:
    fake = FakeAgent(refusals={"runtimes": Refusal(200, raw="<html>hello</html>")})
    async with agent(fake, agent_tls, master_tls) as client:
        with pytest.raises(AgentProtocolError, match="outside the contract"):
            await client.info()


# ---------------------------------------------------------------- transport failures


async def test_nothing_listening_is_unreachable(master_tls: TlsCredentials) -> None:
    record = NodeRecord(id="gone", name="gone", agent_url=f"https://127.0.0.1:{free_port()}")
    clients = AgentClients.mutual_tls(master_tls)
    try:
        with anyio.fail_after(WAIT_S), pytest.raises(NodeUnreachableError, match="'gone'"):
            await clients.client_for(record).statuses()
    finally:
        await clients.aclose()


async def test_an_agent_that_does_not_answer_in_time_is_a_timeout(
    agent_tls: TlsCredentials, master_tls: TlsCredentials
) -> None:
    fake = FakeAgent(stall=anyio.Event())
    async with agent(fake, agent_tls, master_tls, timeouts=AgentTimeouts(read_s=0.2)) as client:
        with pytest.raises(NodeTimeoutError) as late:
            await client.statuses()

    assert not isinstance(late.value, NodeUnreachableError)


async def test_an_agent_with_another_nodes_certificate_gets_no_request(
    agent_tls: TlsCredentials, master_tls: TlsCredentials
) -> None:
    fake = FakeAgent()
    async with agent(fake, agent_tls, master_tls, name="node-2") as client:
        with pytest.raises(NodeIdentityError, match="'node-1'"):
            await client.start(spec())

    assert fake.requests == []
    assert fake.driver.starts == []


async def test_the_routers_hop_through_aiohttp_checks_the_node_as_every_call_does(
    agent_tls: TlsCredentials, master_tls: TlsCredentials
) -> None:
    # The master's /v1 hop sends with aiohttp on the node's transport: the node-identity check rides on
    # the TLS context, so it holds there too (the agent's certificate names node-1).
    build = functools.partial(lean_transport, forward_with="aiohttp")

    def front(client: AgentClient) -> Starlette:
        async def failed(exc: UpstreamError) -> Response:
            return PlainTextResponse(str(exc), status_code=502)

        async def hop(request: Request) -> Response:
            return await forward(
                request, f"{client.agent_url}/agent/v1/runtimes", client.http, on_failure=failed
            )

        return Starlette(routes=[Route("/", hop)])

    answers: dict[str, httpx.Response] = {}
    with anyio.fail_after(WAIT_S):
        async with serve_asgi(FakeAgent().app, ssl_context=agent_tls.server_context()) as url:
            for name in ("node-1", "node-2"):
                clients = AgentClients.mutual_tls(master_tls, build=build)
                record = NodeRecord(id="node-1", name=name, agent_url=url)
                try:
                    async with (
                        serve_asgi(front(clients.client_for(record))) as base,
                        httpx.AsyncClient() as http,
                    ):
                        answers[name] = await http.get(f"{base}/")
                finally:
                    await clients.aclose()

    assert answers["node-1"].status_code == 200
    assert "runtimes" in answers["node-1"].json()
    assert answers["node-2"].status_code == 502
    assert "presented the certificate of 'node-1', not of 'node-2'" in answers["node-2"].text


async def test_a_pinned_key_is_checked(
    agent_tls: TlsCredentials, master_tls: TlsCredentials, pki: FleetPki
) -> None:
    other_pin = spki_pin(pki.agent("node-1").certificate)
    async with agent(FakeAgent(), agent_tls, master_tls, pin=spki_pin(agent_tls.certificate)) as client:
        assert (await client.info()).node_name == "node-1"
    async with agent(FakeAgent(), agent_tls, master_tls, pin=other_pin) as client:
        with pytest.raises(NodeIdentityError, match="pinned"):
            await client.info()


async def test_an_agent_from_another_fleet_is_unreachable(master_tls: TlsCredentials) -> None:
    stranger = FleetPki.create("Another fleet").agent("node-1")
    async with agent(FakeAgent(), stranger, master_tls) as client:
        with pytest.raises(NodeUnreachableError) as refused:
            await client.info()

    assert not isinstance(refused.value, NodeIdentityError)


# ---------------------------------------------------------------- followed logs


async def drain(lines: AsyncGenerator[str, None]) -> list[str]:
    async with aclosing(lines):
        return [line async for line in lines]


async def test_follow_logs_streams_lines_until_the_model_exits(
    agent_tls: TlsCredentials, master_tls: TlsCredentials
) -> None:
    fake = FakeAgent()
    async with agent(fake, agent_tls, master_tls) as client:
        await client.start(spec())
        fake.driver.add_log("qwen", "loading weights")
        async with aclosing(client.follow_logs("qwen", tail=1)) as lines:
            first = await anext(lines)
            fake.driver.add_log("qwen", "ready on 8000")
            second = await anext(lines)
            fake.driver.set_state("qwen", ModelState.FAILED, error="oom")
            rest = [line async for line in lines]

    assert (first, second, rest) == ("loading weights", "ready on 8000", [])
    assert fake.requests[-1] == ("GET", "/agent/v1/models/qwen/logs?tail=1&follow=true")


async def test_follow_logs_can_be_closed_early(agent_tls: TlsCredentials, master_tls: TlsCredentials) -> None:
    fake = FakeAgent()
    async with agent(fake, agent_tls, master_tls) as client:
        await client.start(spec())
        async with aclosing(client.follow_logs("qwen", tail=5)) as lines:
            assert (await anext(lines)).startswith("fake driver: started qwen")
        assert (await client.status("qwen")).state is ModelState.READY


async def test_follow_logs_reports_a_reading_error(
    agent_tls: TlsCredentials, master_tls: TlsCredentials
) -> None:
    fake = FakeAgent(log_error="the log file vanished")
    async with agent(fake, agent_tls, master_tls) as client:
        await client.start(spec())
        fake.driver.set_state("qwen", ModelState.FAILED)
        with pytest.raises(LogStreamError, match="vanished"):
            await drain(client.follow_logs("qwen", tail=10))


async def test_follow_logs_of_an_unknown_model(agent_tls: TlsCredentials, master_tls: TlsCredentials) -> None:
    async with agent(FakeAgent(), agent_tls, master_tls) as client:
        with pytest.raises(ModelNotOnNodeError):
            async with aclosing(client.follow_logs("ghost")) as lines:
                await anext(lines)


async def test_follow_logs_with_an_idle_timeout(
    agent_tls: TlsCredentials, master_tls: TlsCredentials
) -> None:
    fake = FakeAgent()
    async with agent(fake, agent_tls, master_tls) as client:
        await client.start(spec())
        with pytest.raises(NodeTimeoutError):
            async with aclosing(client.follow_logs("qwen", idle_timeout_s=0.2)) as lines:
                await anext(lines)


def test_every_node_error_names_its_node() -> None:
    error = NodeUnreachableError("node-9", "gone")
    assert isinstance(error, NodeError)
    assert error.node_id == "node-9"


async def test_the_pool_keeps_one_client_per_node_and_replaces_it_when_the_record_changes() -> None:
    made: list[str] = []

    def transports(record: NodeRecord) -> httpx.AsyncBaseTransport:
        made.append(record.agent_url)
        return httpx.MockTransport(lambda request: httpx.Response(204))

    clients = AgentClients(transports)
    first = clients.client_for(NodeRecord(id="n", name="n", agent_url="https://a:9443"))
    same = clients.client_for(NodeRecord(id="n", name="n", agent_url="https://a:9443", labels={"x": "y"}))
    moved = clients.client_for(NodeRecord(id="n", name="n", agent_url="https://b:9443"))
    await clients.aclose()

    assert first is same
    assert moved is not first
    assert made == ["https://a:9443", "https://b:9443"]
    assert first.http.is_closed
    assert moved.http.is_closed
