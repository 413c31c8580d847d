"""The path rule: a /v1 request path that could leave the upstream's ``…/proxy/{id}/v1/`` is refused.

The regression tests send their request lines byte for byte over a raw socket (an HTTP client would
normalize them) to a real router app in front of a loopback fake agent that records every path it gets.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

import anyio
import httpx
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from tests._support.asgi_server import serve_asgi

import mirbad_router
from mirbad_router import (
    RouterStats,
    UnsafeProxyPathError,
    Upstream,
    check_proxy_path,
    create_router_app,
    create_upstream_client,
    join_upstream_url,
)
from mirbad_router.testing import FakeKeyStore, FakeMaintenanceGate, FakeResolver

WAIT_S = 20
PREFIX = "/agent/v1/proxy/m1/v1/"
BODY = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}).encode()

TRAVERSALS = [
    "/v1/%2e%2e/%2e%2e/%2e%2e/runtimes",
    "/v1/%2e%2e/props",
    "/v1/%2E%2E/props",
    "/v1/../props",
    "/v1/./../props",
    "/v1/.%2e/props",
    "/v1/%252e%252e/props",
    "/v1/%25252e%25252e/props",
    "/v1/chat%2f..%2f..%2fruntimes",
    "/v1/chat%2Fcompletions",
    "/v1/..%5cprops",
    "/v1/..\\props",
    "/v1/%EF%BC%8E%EF%BC%8E/props",
    "/v1/chat/completions/..",
]


@dataclass
class FakeAgent:
    """Answers every path like a model would and records the raw path of each request it gets."""

    paths: list[str] = field(default_factory=list)

    async def endpoint(self, request: Request) -> Response:
        raw = request.scope.get("raw_path", b"")
        self.paths.append(raw.decode("latin-1") if isinstance(raw, bytes) else request.url.path)
        return JSONResponse({"object": "chat.completion", "choices": [], "path": request.url.path})


@asynccontextmanager
async def router_before_agent(*, keys_required: bool = False) -> AsyncIterator[tuple[str, FakeAgent]]:
    agent = FakeAgent()
    agent_app = Starlette(routes=[Route("/{any:path}", agent.endpoint, methods=["GET", "POST", "DELETE"])])
    async with serve_asgi(agent_app) as agent_base, create_upstream_client() as client:
        resolver = FakeResolver()
        resolver.add("tiny", Upstream(f"{agent_base}/agent/v1/proxy/m1/", client))
        keys = FakeKeyStore(required=keys_required)
        router = create_router_app(resolver, keys, FakeMaintenanceGate(), RouterStats())
        async with serve_asgi(Starlette(routes=[Mount("/v1", app=router)])) as base:
            yield base, agent


async def raw_request(base: str, method: str, target: str, body: bytes = BODY) -> tuple[int, Any]:
    """Send ``target`` exactly as written and return the status and the decoded JSON body."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    head = (
        f"{method} {target} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    received = b""
    with anyio.fail_after(WAIT_S):
        async with await anyio.connect_tcp(host, int(port)) as stream:
            await stream.send(head.encode("latin-1") + body)
            try:
                while True:
                    received += await stream.receive()
            except anyio.EndOfStream:
                pass
    status_line, _, rest = received.partition(b"\r\n")
    _, _, payload = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), json.loads(payload)


@pytest.mark.anyio
async def test_traversal_paths_are_400_and_never_reach_the_agent() -> None:
    async with router_before_agent() as (base, agent):
        for target in TRAVERSALS:
            status, payload = await raw_request(base, "POST", target)
            assert status == 400, target
            assert payload["error"]["code"] == "invalid_path", target
            assert payload["error"]["type"] == "invalid_request_error"
        status, payload = await raw_request(base, "POST", "/v1/chat/completions?x=1")
    assert status == 200
    assert agent.paths == [f"{PREFIX}chat/completions"]


@pytest.mark.anyio
async def test_the_path_check_comes_after_the_key_check() -> None:
    async with router_before_agent(keys_required=True) as (base, agent):
        status, payload = await raw_request(base, "POST", "/v1/%2e%2e/props")
    assert (status, payload["error"]["code"]) == (401, "invalid_api_key")
    assert agent.paths == []


@pytest.mark.parametrize("path", [target.removeprefix("/v1/") for target in TRAVERSALS])
def test_check_proxy_path_refuses_each_traversal(path: str) -> None:
    with pytest.raises(UnsafeProxyPathError) as refused:
        check_proxy_path(path)
    assert refused.value.path == path


@pytest.mark.parametrize(
    ("raw", "decoded"),
    [
        ("chat/completions", "chat/completions"),
        ("/v1/audio/transcriptions", "/v1/audio/transcriptions"),
        ("models/org%40name%3Av1", "models/org@name:v1"),
        ("files/a%20b.jsonl", "files/a b.jsonl"),
        ("fine_tuning/jobs/.hidden/x...y", "fine_tuning/jobs/.hidden/x...y"),
    ],
)
def test_check_proxy_path_decodes_ordinary_paths(raw: str, decoded: str) -> None:
    assert check_proxy_path(raw) == decoded


def test_joining_a_dot_segment_is_refused_even_without_a_check_before() -> None:
    with pytest.raises(UnsafeProxyPathError):
        join_upstream_url("https://agent:9443/agent/v1/proxy/m1/", "v1/../../runtimes")
    # One name per meaning: the router's former alias is gone (the drivers' upstream_url looks one up).
    assert not hasattr(mirbad_router, "upstream_url")


# Characters that make paths interesting: separators, dots, percent signs and the hex digits of %2e,
# %2f and %5c, a fullwidth dot and ordinary letters.
_PIECES = st.sampled_from(
    ["/", ".", "..", "%", "2", "e", "E", "f", "F", "5", "c", "\\", "\uff0e", "a", "%2e"]
)


def _encode(text: str, how: int) -> str:
    """Percent-encode ``text`` 0, 1 or 2 times (keeping slashes, or encoding them too)."""
    for _ in range(how % 3):
        text = quote(text, safe="/" if how < 3 else "")
    return text


def _fully_decoded(path: str) -> str:
    while (decoded := unquote(path)) != path:
        path = decoded
    return path


_PATHS = st.one_of(st.lists(_PIECES, max_size=12).map("".join), st.text(max_size=24))


@example(raw="%2e%2e/%2e%2e/%2e%2e/runtimes")
@example(raw="%2e%2e/props")
@given(st.builds(_encode, _PATHS, st.integers(0, 5)))
def test_a_forwarded_url_never_leaves_the_proxy_prefix(raw: str) -> None:
    base = "https://agent:9443/agent/v1/proxy/m1/"
    try:
        decoded = check_proxy_path(f"/v1/{raw}")
    except UnsafeProxyPathError:
        return
    # As the router does: the route's decoded path parameter joined below the base's v1/.
    url = httpx.Request("POST", join_upstream_url(base, "v1/" + decoded.removeprefix("/v1/"))).url
    assert url.host == "agent"
    assert url.raw_path.decode().startswith(PREFIX)
    # However many times a hop decodes it, and however it normalizes, it stays below the prefix.
    resolved = posixpath.normpath(_fully_decoded(url.raw_path.decode()).replace("\\", "/"))
    assert (resolved + "/").startswith(PREFIX)
