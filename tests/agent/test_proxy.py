"""The agent's model proxy route, mounted like the agent app mounts it, in front of a real upstream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
from openai import APIError, AsyncOpenAI, InternalServerError
from openai.types.chat import ChatCompletionUserMessageParam
from starlette.applications import Starlette
from starlette.routing import Mount
from tests._support.asgi_server import announce_body, free_port, serve_asgi
from tests._support.fake_upstream import CHUNKS, WAIT_S, FakeUpstream, event
from tests._support.wedging_runtime import WEDGE_WAIT_S, WedgingRuntime

from mirbad_agent import (
    PROXY_METHODS,
    RETRY_AFTER_S,
    AgentServices,
    ComposedDriver,
    ModelServer,
    NodeRuntimes,
    create_app,
    proxy_route,
)
from mirbad_protocol import ContainerLaunch, ExecutableRef, ModelState, ProcessLaunch
from mirbad_protocol.agent import (
    AGENT_API_PREFIX,
    MAX_PROXY_BODY_BYTES,
    AgentErrorBody,
    ContainerRuntimeInfo,
    ProcessRuntimeInfo,
)
from mirbad_router import create_upstream_client
from mirbad_runtime import MemoryProbe, ModelNotFoundError
from mirbad_runtime.testing import FakeDriver

pytestmark = pytest.mark.anyio

HELLO: ChatCompletionUserMessageParam = {"role": "user", "content": "hello"}


class FakeLookup:
    """Upstreams by model id: a missing id is unknown (LookupError), ``None`` is known but stopped."""

    def __init__(self, upstreams: dict[str, ModelServer | None]) -> None:
        self.upstreams = upstreams
        self.asked: list[str] = []

    async def __call__(self, model_id: str) -> ModelServer | None:
        self.asked.append(model_id)
        if model_id not in self.upstreams:
            raise LookupError(model_id)
        return self.upstreams[model_id]


class RuntimeLookup:
    """A lookup that fails like the runtime drivers do for a model without an instance."""

    async def __call__(self, model_id: str) -> ModelServer | None:
        raise ModelNotFoundError(model_id)


@asynccontextmanager
async def agent(
    upstreams: dict[str, ModelServer | None] | None = None,
    *,
    upstream_prefix: str = "/",
    idle_timeout_s: float | None = None,
) -> AsyncIterator[tuple[str, FakeUpstream, FakeLookup]]:
    """An agent-like app with only the proxy route, a real upstream, and a test client base URL."""
    upstream = FakeUpstream()
    async with create_upstream_client() as client, serve_asgi(upstream) as upstream_base:
        key = {"Authorization": "Bearer instance-key"}
        lookup = FakeLookup(
            upstreams if upstreams is not None else {"m1": ModelServer(upstream_base + upstream_prefix, key)}
        )
        route = proxy_route(lookup, client, idle_timeout_s=idle_timeout_s)
        app = Starlette(routes=[Mount(AGENT_API_PREFIX, routes=[route])])
        async with serve_asgi(app) as base:
            yield f"{base}{AGENT_API_PREFIX}/proxy", upstream, lookup


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False, timeout=WAIT_S) as test_client:
        yield test_client


def error_of(response: httpx.Response) -> tuple[str, str]:
    error = AgentErrorBody.from_wire(response.json()).error
    return error.code, error.message


async def test_a_request_reaches_the_model_with_its_instance_key(client: httpx.AsyncClient) -> None:
    async with agent() as (proxy, upstream, lookup):
        response = await client.post(
            f"{proxy}/m1/v1/chat/completions?trace=1",
            json={"model": "m1"},
            headers={"Authorization": "Bearer from-the-master"},
        )

    assert response.status_code == 200
    assert lookup.asked == ["m1"]
    seen = upstream.requests[0]
    assert (seen.method, seen.path, seen.query) == ("POST", "/v1/chat/completions", "trace=1")
    assert seen.header("authorization") == ["Bearer instance-key"]
    assert seen.body == b'{"model":"m1"}'


async def test_the_upstream_base_path_is_kept(client: httpx.AsyncClient) -> None:
    async with agent(upstream_prefix="/base/") as (proxy, _upstream, _):
        response = await client.get(f"{proxy}/m1/v1/models")

    assert response.json()["path"] == "/base/v1/models"


@pytest.mark.parametrize("method", PROXY_METHODS)
async def test_every_method_is_forwarded(client: httpx.AsyncClient, method: str) -> None:
    async with agent() as (proxy, upstream, _):
        response = await client.request(method, f"{proxy}/m1/v1/anything")

    assert response.status_code == 200
    assert upstream.requests[0].method == method


async def test_events_are_streamed_one_by_one(client: httpx.AsyncClient) -> None:
    async with agent() as (proxy, upstream, _), client.stream("GET", f"{proxy}/m1/v1/sse") as response:
        chunks = response.aiter_raw()
        buffer = b""
        for index in range(CHUNKS):
            with anyio.fail_after(WAIT_S):
                while event(index) not in buffer:
                    buffer += await anext(chunks)
            assert upstream.sent == list(range(index + 1))
            if index + 1 < CHUNKS:
                upstream.release[index + 1].set()


async def test_a_client_leaving_cancels_the_model_request(client: httpx.AsyncClient) -> None:
    async with agent() as (proxy, upstream, _):
        async with client.stream("GET", f"{proxy}/m1/v1/first-then-wait") as response:
            with anyio.fail_after(WAIT_S):
                assert event(0) in await anext(response.aiter_raw())
        with anyio.fail_after(WAIT_S):
            await upstream.disconnected.wait()


async def test_an_unknown_model_is_404_and_reaches_nothing(client: httpx.AsyncClient) -> None:
    async with agent() as (proxy, upstream, _):
        response = await client.post(f"{proxy}/nope/v1/completions", json={"model": "nope"})

    assert response.status_code == 404
    assert error_of(response) == ("model_not_found", "model nope is not known on this node")
    assert upstream.requests == []


async def test_the_runtime_message_of_an_unknown_model_is_kept(client: httpx.AsyncClient) -> None:
    async with create_upstream_client() as upstream_client:
        app = Starlette(
            routes=[Mount(AGENT_API_PREFIX, routes=[proxy_route(RuntimeLookup(), upstream_client)])]
        )
        async with serve_asgi(app) as base:
            response = await client.get(f"{base}{AGENT_API_PREFIX}/proxy/gone/v1/models")

    assert response.status_code == 404
    assert error_of(response) == ("model_not_found", "model gone has no instance on this node")


async def test_a_stopped_model_is_503_with_retry_after(client: httpx.AsyncClient) -> None:
    async with agent({"m1": None}) as (proxy, upstream, _):
        response = await client.post(f"{proxy}/m1/v1/completions", json={"model": "m1"})

    assert response.status_code == 503
    assert response.headers["retry-after"] == str(RETRY_AFTER_S)
    assert error_of(response)[0] == "model_not_running"
    assert upstream.requests == []


async def test_a_body_over_64_mib_is_413() -> None:
    async with agent() as (proxy, upstream, _):
        path = f"{AGENT_API_PREFIX}/proxy/m1/v1/embeddings"
        status, body = await announce_body(proxy, path, MAX_PROXY_BODY_BYTES + 1)

    assert status == 413
    assert AgentErrorBody.from_wire_json(body).error.code == "request_too_large"
    assert upstream.requests == []


async def test_a_model_server_that_refuses_connections_is_502(client: httpx.AsyncClient) -> None:
    closed = ModelServer(f"http://127.0.0.1:{free_port()}/")
    async with agent({"m1": closed}) as (proxy, _, _lookup):
        response = await client.get(f"{proxy}/m1/v1/models")

    assert response.status_code == 502
    code, message = error_of(response)
    assert code == "upstream_unreachable"
    assert "cannot connect to upstream" in message


async def test_a_model_silent_past_the_idle_timeout_is_504(client: httpx.AsyncClient) -> None:
    async with agent(idle_timeout_s=0.2) as (proxy, upstream, _):
        response = await client.get(f"{proxy}/m1/v1/wait-before-headers")
        with anyio.fail_after(WAIT_S):
            await upstream.disconnected.wait()

    assert response.status_code == 504
    assert error_of(response)[0] == "upstream_timeout"


# ------------------------------------------------- through the agent app, over fake drivers


def _launch(kind: str, model_id: str) -> ContainerLaunch | ProcessLaunch:
    common: dict[str, Any] = {
        "model_id": model_id,
        "served_name": f"{model_id}-served",
        "argv": ["--model", f"/models/{model_id}"],
        "model_path": model_id,
        "budget_gib": 1.0,
        "config_hash": "0123456789abcdef",
    }
    if kind == "container":
        return ContainerLaunch(runtime="vllm", image="vllm/vllm-openai:test", **common)
    return ProcessLaunch(
        runtime="llamacpp", executable=ExecutableRef(name="llama-server", version="t"), **common
    )


@dataclass
class AgentApp:
    """The real agent app over fake drivers, served on loopback, with a real model server behind it."""

    proxy: str
    upstream: FakeUpstream
    drivers: dict[str, FakeDriver]

    async def run(self, kind: str, model_id: str, state: ModelState, *, listening: bool = True) -> None:
        """Give a driver an instance of ``model_id`` in ``state``, on the real upstream or a closed port."""
        driver = self.drivers[kind]
        await driver.start(_launch(kind, model_id))
        driver.set_upstream(model_id, self.upstream_base if listening else f"http://127.0.0.1:{free_port()}/")
        driver.set_state(model_id, state, error="exited with code 1" if state is ModelState.FAILED else None)

    upstream_base: str = ""


@asynccontextmanager
async def agent_app() -> AsyncIterator[AgentApp]:
    drivers = {"container": FakeDriver(), "process": FakeDriver(port_range_start=8500)}
    composed = [
        ComposedDriver(drivers["container"], (ContainerRuntimeInfo(runtime="vllm"),)),
        ComposedDriver(drivers["process"], (ProcessRuntimeInfo(runtime="llamacpp"),)),
    ]
    upstream = FakeUpstream()
    async with serve_asgi(upstream) as upstream_base:
        services = AgentServices(
            runtimes=NodeRuntimes(composed),
            memory=MemoryProbe(linux=False),
            node_name="node-1",
            version="0.0.test",
        )
        async with services, serve_asgi(create_app(services, background=False)) as base:
            yield AgentApp(f"{base}{AGENT_API_PREFIX}/proxy", upstream, drivers, upstream_base)


@pytest.mark.parametrize("kind", ["container", "process"])
@pytest.mark.parametrize("state", [ModelState.STOPPED, ModelState.FAILED, ModelState.STARTING])
async def test_a_known_model_that_is_not_ready_is_503_with_retry_after(
    client: httpx.AsyncClient, kind: str, state: ModelState
) -> None:
    # Its address no longer answers (an exited container, a dead process, a server still loading).
    async with agent_app() as node:
        await node.run(kind, "m1", state, listening=False)
        response = await client.post(f"{node.proxy}/m1/v1/completions", json={"model": "m1"})

    assert response.status_code == 503
    assert response.headers["retry-after"] == str(RETRY_AFTER_S)
    assert error_of(response) == ("model_not_running", "model m1 is not running on this node")
    assert node.upstream.requests == []


async def test_a_ready_model_whose_server_refuses_connections_is_502(client: httpx.AsyncClient) -> None:
    async with agent_app() as node:
        await node.run("process", "m1", ModelState.READY, listening=False)
        response = await client.get(f"{node.proxy}/m1/v1/models")

    assert response.status_code == 502
    assert error_of(response)[0] == "upstream_unreachable"


async def test_a_ready_model_is_forwarded_by_the_agent_app(client: httpx.AsyncClient) -> None:
    async with agent_app() as node:
        await node.run("process", "m1", ModelState.READY)
        response = await client.get(f"{node.proxy}/m1/v1/models")

    assert response.status_code == 200
    assert [seen.path for seen in node.upstream.requests] == ["/v1/models"]


async def test_an_unknown_model_is_404_through_the_agent_app(client: httpx.AsyncClient) -> None:
    async with agent_app() as node:
        await node.run("container", "m1", ModelState.READY)
        response = await client.get(f"{node.proxy}/nobody/v1/models")

    assert response.status_code == 404
    assert error_of(response) == ("model_not_found", "model nobody has no instance on this node")
    assert node.upstream.requests == []


# ------------------------------------------------- a model server that wedges (issue 27)


@asynccontextmanager
async def wedging_agent(
    idle_timeout_s: float, runtime: WedgingRuntime | None = None
) -> AsyncIterator[tuple[AsyncOpenAI, WedgingRuntime]]:
    """The proxy route in front of a stand-in runtime (one that wedges by default), and an OpenAI client."""
    runtime = runtime or WedgingRuntime()
    async with create_upstream_client() as client, serve_asgi(runtime) as runtime_base:
        lookup = FakeLookup({"m1": ModelServer(f"{runtime_base}/")})
        route = proxy_route(lookup, client, idle_timeout_s=idle_timeout_s)
        app = Starlette(routes=[Mount(AGENT_API_PREFIX, routes=[route])])
        async with serve_asgi(app) as base:
            openai = AsyncOpenAI(
                base_url=f"{base}{AGENT_API_PREFIX}/proxy/m1/v1",
                api_key="unused",
                max_retries=0,
                timeout=WAIT_S,
            )
            async with openai:
                yield openai, runtime


async def test_a_model_that_wedges_mid_stream_ends_it_with_an_openai_error_event() -> None:
    async with wedging_agent(idle_timeout_s=0.3) as (openai, runtime):
        stream = await openai.chat.completions.create(model="m", messages=[HELLO], stream=True)
        tokens: list[str] = []

        async def read() -> None:
            async for chunk in stream:
                tokens.append(chunk.choices[0].delta.content or "")

        with anyio.fail_after(WAIT_S), pytest.raises(APIError) as caught:
            await read()
        with anyio.fail_after(WEDGE_WAIT_S):
            await runtime.left.wait()  # the wedged request was ended, not left hanging

    assert tokens == ["t0 ", "t1 ", "t2 "]
    assert "idle timeout" in caught.value.message
    assert caught.value.body == {
        "message": caught.value.message,
        "type": "server_error",
        "param": None,
        "code": "upstream_failed",
    }


async def test_a_model_that_wedges_before_answering_is_an_error_body() -> None:
    async with wedging_agent(idle_timeout_s=0.3) as (openai, runtime):
        with anyio.fail_after(WAIT_S), pytest.raises(InternalServerError) as caught:
            await openai.chat.completions.create(model="m", messages=[HELLO])
        with anyio.fail_after(WEDGE_WAIT_S):
            await runtime.left.wait()

    assert caught.value.status_code == 504
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["code"] == "upstream_timeout"


async def test_a_slow_model_that_keeps_sending_is_not_cut() -> None:
    # The idle timeout bounds each silence, not the answer: tokens slower than a wedge's bound still end.
    crawling = WedgingRuntime(tokens=6, wedges=False, pause_s=0.1)
    async with wedging_agent(idle_timeout_s=1.0, runtime=crawling) as (openai, _):
        stream = await openai.chat.completions.create(model="m", messages=[HELLO], stream=True)
        with anyio.fail_after(WAIT_S):
            tokens = [chunk.choices[0].delta.content async for chunk in stream]

    assert tokens == [f"t{index} " for index in range(6)]
