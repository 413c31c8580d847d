"""The streaming reverse-proxy core, between a real client, a real uvicorn proxy and a real upstream.

No test measures time: streaming is proved by ordering (the upstream sends event i+1 only after the
client has seen event i), and every wait is bounded so a regression fails instead of hanging.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Literal

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from tests._support.asgi_server import announce_body, free_port, serve_asgi
from tests._support.fake_upstream import CHUNKS, WAIT_S, FakeUpstream, event
from tests.router._raw_upstream import Connection, RawUpstream, Script, json_response, raw_upstream

from mirbad_router import (
    MAX_BODY_BYTES,
    UPSTREAM_KEEPALIVE_S,
    create_upstream_client,
    forward,
    join_upstream_url,
    read_body,
)
from mirbad_router.exceptions import (
    MirbadRouterError,
    RequestTooLargeError,
    UpstreamConnectError,
    UpstreamError,
    UpstreamTimeoutError,
)

pytestmark = pytest.mark.anyio

METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]

# Every test runs three times: on the proxy's own client, whose requests go to its pool as httpcore's
# (``create_upstream_client``), on the same client sending with aiohttp (the master's hop to its
# agents), and on a client with httpx's stock transport, which ``forward`` sends httpx's Request to
# (as it does for any transport but the proxy's own).
_client_kind = "proxy"


@pytest.fixture(autouse=True, params=["proxy", "aiohttp", "httpx"])
def _upstream_client_kind(request: pytest.FixtureRequest) -> str:
    global _client_kind
    kind: str = request.param
    _client_kind = kind
    return kind


def upstream_client() -> httpx.AsyncClient:
    if _client_kind == "proxy":
        return create_upstream_client()
    if _client_kind == "aiohttp":
        return create_upstream_client(forward_with="aiohttp")
    limits = httpx.Limits(max_keepalive_connections=64, keepalive_expiry=UPSTREAM_KEEPALIVE_S)
    timeout = httpx.Timeout(None, connect=10.0, pool=10.0)
    return httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(limits=limits), trust_env=False, timeout=timeout
    )


@dataclass
class ProxyOptions:
    extra: Mapping[str, str] | None = None
    idle_timeout_s: float | None = None
    read_first: bool = False
    limit: int = MAX_BODY_BYTES


def proxy_app(upstream_base: str, client: httpx.AsyncClient, options: ProxyOptions) -> Starlette:
    """A minimal embedding app: forward everything, map the core's errors to plain JSON errors."""

    async def failed(exc: UpstreamError) -> Response:
        if isinstance(exc, UpstreamTimeoutError):
            return JSONResponse({"code": "upstream_timeout", "message": str(exc)}, status_code=504)
        return JSONResponse({"code": type(exc).__name__, "message": str(exc)}, status_code=502)

    async def endpoint(request: Request) -> Response:
        url = join_upstream_url(upstream_base, request.path_params["path"], request.url.query)
        try:
            body = await read_body(request, limit=options.limit) if options.read_first else None
            return await forward(
                request,
                url,
                client,
                on_failure=failed,
                headers=options.extra,
                body=body,
                idle_timeout_s=options.idle_timeout_s,
                limit=options.limit,
            )
        except RequestTooLargeError as exc:
            return JSONResponse({"code": "request_too_large", "message": str(exc)}, status_code=413)

    return Starlette(routes=[Route("/{path:path}", endpoint, methods=METHODS)])


@asynccontextmanager
async def proxied(
    options: ProxyOptions | None = None,
    *,
    upstream_base: str | None = None,
    http: Literal["auto", "h11", "httptools"] = "auto",
) -> AsyncIterator[tuple[str, FakeUpstream]]:
    upstream = FakeUpstream()
    async with upstream_client() as client, serve_asgi(upstream) as real_base:
        upstream.port = int(real_base.rsplit(":", 1)[1])
        app = proxy_app(upstream_base or real_base, client, options or ProxyOptions())
        async with serve_asgi(app, http=http) as proxy:
            yield proxy, upstream


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False, timeout=WAIT_S) as test_client:
        yield test_client


async def read_until(chunks: AsyncIterator[bytes], buffer: bytes, wanted: bytes) -> bytes:
    with anyio.fail_after(WAIT_S):
        while wanted not in buffer:
            buffer += await anext(chunks)
    return buffer


@pytest.mark.parametrize("server", ["h11", "httptools"])
async def test_each_event_reaches_the_client_before_the_next_is_sent(
    client: httpx.AsyncClient, server: Literal["h11", "httptools"]
) -> None:
    async with proxied(http=server) as (proxy, upstream), client.stream("GET", f"{proxy}/sse") as response:
        assert response.status_code == 200
        chunks = response.aiter_raw()
        buffer = b""
        for index in range(CHUNKS):
            buffer = await read_until(chunks, buffer, event(index))
            assert upstream.sent == list(range(index + 1))  # the next event does not exist yet
            if index + 1 < CHUNKS:
                upstream.release[index + 1].set()
        rest = [chunk async for chunk in chunks]
    assert buffer + b"".join(rest) == b"".join(event(i) for i in range(CHUNKS))


async def test_hop_by_hop_headers_are_dropped_both_ways(client: httpx.AsyncClient) -> None:
    options = ProxyOptions(extra={"Authorization": "Bearer instance-key"})
    async with (
        proxied(options) as (proxy, upstream),
        client.stream(
            "GET",
            f"{proxy}/sse",
            headers={
                "Authorization": "Bearer from-the-master",
                "Connection": "keep-alive, X-Client-Private",
                "X-Client-Private": "for the first hop",
                "Keep-Alive": "timeout=5",
                "TE": "trailers",
                "Proxy-Authorization": "Basic c2VjcmV0",
                "X-Kept": "yes",
            },
        ) as response,
    ):
        for index in range(1, CHUNKS):
            upstream.release[index].set()
        await response.aread()

    seen = upstream.requests[0]
    for dropped in ["connection", "x-client-private", "keep-alive", "te", "proxy-authorization"]:
        assert seen.header(dropped) == [], dropped
    assert seen.header("authorization") == ["Bearer instance-key"]
    assert seen.header("x-kept") == ["yes"]
    assert seen.header("host") == [f"127.0.0.1:{upstream.port}"]
    for dropped in ["x-upstream-private", "keep-alive", "proxy-authenticate"]:
        assert dropped not in response.headers, dropped
    assert response.headers.get_list("set-cookie") == ["a=1", "b=2"]
    assert response.headers["x-kept"] == "yes"
    assert response.headers["content-type"] == "text/event-stream"
    assert len(response.headers.get_list("date")) == 1
    assert len(response.headers.get_list("server")) == 1


@pytest.mark.parametrize("method", METHODS)
async def test_method_path_query_and_body_are_forwarded(client: httpx.AsyncClient, method: str) -> None:
    body = b'{"model": "m"}' if method in ("POST", "PUT", "PATCH") else b""
    async with proxied() as (proxy, upstream):
        response = await client.request(method, f"{proxy}/v1/with%20space?a=1&b=two%20words", content=body)

    assert response.status_code == 200
    echo = response.json()
    assert (echo["method"], echo["path"], echo["rawPath"]) == (method, "/v1/with space", "/v1/with%20space")
    assert echo["query"] == "a=1&b=two%20words"
    assert echo["bodyLength"] == len(body)
    assert upstream.requests[0].body == body


async def test_a_chunked_body_reaches_the_upstream_with_a_length(client: httpx.AsyncClient) -> None:
    parts = [b"x" * 1000, b"y" * 5000, b"z"]

    async def chunked() -> AsyncIterator[bytes]:
        for part in parts:
            yield part

    async with proxied() as (proxy, upstream):
        response = await client.post(f"{proxy}/v1/completions", content=chunked())

    assert response.json()["bodySha256"] == hashlib.sha256(b"".join(parts)).hexdigest()
    assert upstream.requests[0].header("transfer-encoding") == []
    assert upstream.requests[0].header("content-length") == ["6001"]


async def test_an_already_read_body_is_forwarded_as_given(client: httpx.AsyncClient) -> None:
    async with proxied(ProxyOptions(read_first=True)) as (proxy, upstream):
        response = await client.post(f"{proxy}/v1/chat/completions", json={"model": "m", "stream": False})

    assert response.status_code == 200
    assert upstream.requests[0].body == b'{"model":"m","stream":false}'


async def test_a_chunked_body_one_byte_over_64_mib_is_refused_unseen(client: httpx.AsyncClient) -> None:
    mebibyte = b"\0" * (1024 * 1024)

    async def oversized() -> AsyncIterator[bytes]:
        for _ in range(64):
            yield mebibyte
        yield b"!"

    async with proxied() as (proxy, upstream):
        response = await client.post(f"{proxy}/v1/embeddings", content=oversized())

    assert response.status_code == 413
    assert response.json()["code"] == "request_too_large"
    assert upstream.requests == []


@pytest.mark.parametrize(("size", "status"), [(1000, 200), (1001, 413)])
async def test_the_limit_is_inclusive(client: httpx.AsyncClient, size: int, status: int) -> None:
    async def chunked() -> AsyncIterator[bytes]:
        yield b"a" * (size - 1)
        yield b"b"

    async with proxied(ProxyOptions(limit=1000)) as (proxy, upstream):
        response = await client.post(f"{proxy}/v1/completions", content=chunked())

    assert response.status_code == status
    assert len(upstream.requests) == (1 if status == 200 else 0)


@pytest.mark.parametrize("read_first", [False, True])
async def test_a_content_length_over_the_limit_is_refused_before_reading(read_first: bool) -> None:
    async with proxied(ProxyOptions(read_first=read_first)) as (proxy, upstream):
        status, body = await announce_body(proxy, "/v1/completions", MAX_BODY_BYTES + 1)

    assert status == 413
    assert json.loads(body)["code"] == "request_too_large"
    assert upstream.requests == []


async def test_a_client_leaving_mid_stream_closes_the_upstream_request(client: httpx.AsyncClient) -> None:
    async with proxied() as (proxy, upstream):
        async with client.stream("GET", f"{proxy}/first-then-wait") as response:
            await read_until(response.aiter_raw(), b"", event(0))
        # Leaving the block closed the client's connection mid-body.
        with anyio.fail_after(WAIT_S):
            await upstream.disconnected.wait()


async def test_a_client_leaving_before_the_headers_closes_the_upstream_request(
    client: httpx.AsyncClient,
) -> None:
    async with proxied() as (proxy, upstream):
        async with anyio.create_task_group() as group:
            group.start_soon(client.get, f"{proxy}/wait-before-headers")
            with anyio.fail_after(WAIT_S):
                await upstream.arrived.wait()
            group.cancel_scope.cancel()
        with anyio.fail_after(WAIT_S):
            await upstream.disconnected.wait()


async def test_a_silent_upstream_ends_the_stream_after_the_idle_timeout(client: httpx.AsyncClient) -> None:
    async with proxied(ProxyOptions(idle_timeout_s=0.2)) as (proxy, upstream):
        async with client.stream("GET", f"{proxy}/first-then-wait") as response:
            assert response.status_code == 200
            chunks = response.aiter_raw()
            buffer = await read_until(chunks, b"", event(0))
            rest = b"".join([chunk async for chunk in chunks])  # complete, not truncated
        with anyio.fail_after(WAIT_S):
            await upstream.disconnected.wait()
    # An event stream says it broke off with an OpenAI error event, not by stopping short.
    last = (buffer + rest).split(b"\n\n")[-2]
    assert json.loads(last.removeprefix(b"data: "))["error"]["code"] == "upstream_failed"


async def test_an_upstream_silent_before_its_headers_is_a_timeout(client: httpx.AsyncClient) -> None:
    async with proxied(ProxyOptions(idle_timeout_s=0.2)) as (proxy, upstream):
        response = await client.get(f"{proxy}/wait-before-headers")
        with anyio.fail_after(WAIT_S):
            await upstream.disconnected.wait()

    assert response.status_code == 504
    assert response.json()["code"] == "upstream_timeout"


async def test_a_refused_connection_is_an_upstream_connect_error(client: httpx.AsyncClient) -> None:
    closed = f"http://127.0.0.1:{free_port()}/"
    async with proxied(upstream_base=closed) as (proxy, _):
        response = await client.post(f"{proxy}/v1/completions", json={"model": "m"})

    assert response.status_code == 502
    assert response.json()["code"] == "UpstreamConnectError"
    assert "cannot connect to upstream" in response.json()["message"]


def test_errors_share_the_router_root() -> None:
    assert issubclass(RequestTooLargeError, MirbadRouterError)
    assert issubclass(UpstreamConnectError, UpstreamError)
    assert str(RequestTooLargeError(10, 11)) == "the request body is larger than 10 bytes (Content-Length 11)"


@pytest.mark.parametrize(
    ("base", "path", "query", "expected"),
    [
        ("http://127.0.0.1:8001/", "v1/models", "", "http://127.0.0.1:8001/v1/models"),
        ("http://127.0.0.1:8001", "/v1/models", "a=1", "http://127.0.0.1:8001/v1/models?a=1"),
        ("http://ss-m:8000/base/", "v1/a b", "", "http://ss-m:8000/base/v1/a%20b"),
        ("http://h/", "", "", "http://h/"),
    ],
)
def test_upstream_url_joins_base_path_and_query(base: str, path: str, query: str, expected: str) -> None:
    assert join_upstream_url(base, path, query) == expected


# ------------------------------------------------------------------------ stale keep-alive connections


def _answer(connection: Connection, request: bytes) -> bytes:
    return json_response(json.dumps({"connection": connection.index, "bytes": len(request)}).encode())


async def _closes_its_first_connection_when_reused(connection: Connection) -> None:
    # The first connection answers once, then closes when the next request arrives on it: what a
    # server whose keep-alive timeout fires just as the pool reuses the connection looks like.
    while (request := await connection.read_request()) is not None:
        if connection.index == 0 and connection.requests > 1:
            return
        await connection.send(_answer(connection, request))


async def _never_answers(connection: Connection) -> None:
    await connection.read_request()


@asynccontextmanager
async def proxied_raw(script: Script) -> AsyncIterator[tuple[str, RawUpstream]]:
    async with (
        upstream_client() as client,
        raw_upstream(script) as upstream,
        serve_asgi(proxy_app(upstream.base_url, client, ProxyOptions())) as proxy,
    ):
        yield proxy, upstream


@pytest.mark.parametrize("method", ["POST", "GET"])
async def test_a_request_on_a_pooled_connection_the_upstream_closed_is_sent_again(
    client: httpx.AsyncClient, method: str
) -> None:
    async with proxied_raw(_closes_its_first_connection_when_reused) as (proxy, upstream):
        first = await client.request(method, f"{proxy}/v1/chat/completions", content=b"x" * 100)
        second = await client.request(method, f"{proxy}/v1/chat/completions", content=b"y" * 100)
    assert (first.status_code, second.status_code) == (200, 200)
    assert first.json()["connection"] == 0
    assert second.json()["connection"] == 1  # sent again, on a new connection, body and all
    assert second.json()["bytes"] == first.json()["bytes"]
    assert [connection.requests for connection in upstream.connections] == [2, 1]


async def test_a_new_connection_closed_without_an_answer_is_not_retried(client: httpx.AsyncClient) -> None:
    async with proxied_raw(_never_answers) as (proxy, upstream):
        response = await client.post(f"{proxy}/v1/chat/completions", content=b"{}")
    assert response.status_code == 502
    assert [connection.requests for connection in upstream.connections] == [1]


def test_the_proxy_reuses_an_idle_model_connection_only_well_inside_the_servers_idle_timeout() -> None:
    # llama-server and vLLM close idle connections after 5 s; with httpx's 5 s reuse a request now and then
    # went out on a connection being closed ("Server disconnected without sending a response").
    model_server_idle_timeout_s = 5.0
    assert model_server_idle_timeout_s / 2 >= UPSTREAM_KEEPALIVE_S
    client = create_upstream_client()
    # httpcore's pool keeps the expiry privately; reading it is the only way to see what the client does.
    assert client._transport._pool._keepalive_expiry == UPSTREAM_KEEPALIVE_S  # type: ignore[attr-defined]
