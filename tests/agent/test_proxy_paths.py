"""The proxy forwards only plain paths under the model server's /v1/ (issue 8: path traversal)."""

from __future__ import annotations

import posixpath
import unicodedata
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import quote, unquote

import anyio
import httpx
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from tests._support.asgi_server import serve_asgi
from tests._support.fake_upstream import WAIT_S, FakeUpstream

from mirbad_agent import AgentServices, ComposedDriver, NodeRuntimes, ProxyPathError, checked_path, create_app
from mirbad_protocol import ContainerLaunch
from mirbad_protocol.agent import AGENT_API_PREFIX, AgentErrorBody, ContainerRuntimeInfo
from mirbad_router import join_upstream_url
from mirbad_runtime import MemoryProbe
from mirbad_runtime.testing import FakeDriver

BASE = "http://127.0.0.1:8080/base/"

# Pieces an attacker combines: every spelling of a dot, a slash and a backslash, one and two layers deep.
FULLWIDTH_DOT, FULLWIDTH_SLASH = "\uff0e", "\uff0f"
_PIECES = st.sampled_from(
    [
        *("v1", "/", ".", "..", "%2e", "%2E", "%2f", "%2F", "%5c", "%5C", "\\", "%25", "%252e", "%252f"),
        *("%", "%00", FULLWIDTH_DOT, FULLWIDTH_SLASH, "props", "slots", "models", "a", "\u00e9", "%C3%A9"),
        *("?", "#", ";", "%3b", "~", " "),
    ]
)
# Most start like an API path, so the property is exercised on paths that pass as well as refusals.
_STARTS = st.sampled_from(["v1/", "v1/chat/", "", "v1", "/v1/", "%76%31/"])
_ENCODED_PATHS = st.tuples(_STARTS, st.lists(_PIECES, max_size=12).map("".join) | st.text(max_size=30)).map(
    "".join
)
_PLAIN_SEGMENTS = st.lists(st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True), min_size=1, max_size=5)


def fully_decoded(path: str) -> str:
    """``path`` percent-decoded until nothing changes (what the deepest server behind us could see)."""
    for _ in range(10):
        decoded = unquote(path)
        if decoded == path:
            return path
        path = decoded
    raise AssertionError(f"{path!r} still decodes after 10 layers")


@given(_ENCODED_PATHS)
@example("%2e%2e/%2e%2e/runtimes")
@example("v1/%2e%2e/props")
@example("v1/../props")
@example("v1/%252e%252e/props")
@example("v1%2f..%2fprops")
@example(f"v1/{FULLWIDTH_DOT * 2}/props")
def test_a_forwarded_url_always_stays_under_the_servers_v1(raw: str) -> None:
    try:
        path = checked_path(raw)
    except ProxyPathError:
        return
    url = httpx.URL(join_upstream_url(BASE, path))
    deepest = unicodedata.normalize("NFKC", fully_decoded(url.raw_path.decode("ascii").partition("?")[0]))
    assert url.path.startswith("/base/v1/")
    assert posixpath.normpath(deepest).startswith("/base/v1")
    assert not {".", ".."} & set(deepest.split("/"))
    assert "\\" not in deepest


@given(_PLAIN_SEGMENTS)
def test_a_plain_path_under_v1_is_forwarded_as_it_came(segments: list[str]) -> None:
    path = "/".join(["v1", *segments])
    assert checked_path(quote(path)) == path


@pytest.mark.parametrize("raw", ["", "v1", "props", "health", "metrics", "v2/models", "/v1/models"])
def test_a_path_outside_v1_is_refused(raw: str) -> None:
    with pytest.raises(ProxyPathError, match="only paths under /v1/"):
        checked_path(raw)


def test_three_layers_of_encoding_are_refused() -> None:
    with pytest.raises(ProxyPathError, match="layers of percent-encoding"):
        checked_path("v1/%25252e")


# ------------------------------------------------------------------ through the real agent app


def _spec(model_id: str) -> ContainerLaunch:
    return ContainerLaunch(
        model_id=model_id,
        served_name=model_id,
        runtime="vllm",
        argv=["--model", f"/models/{model_id}"],
        model_path=model_id,
        budget_gib=1.0,
        config_hash="0123456789abcdef",
        image="vllm/vllm-openai:test",
    )


@asynccontextmanager
async def agent_before_a_model() -> AsyncIterator[tuple[int, FakeUpstream]]:
    """The agent app on a loopback port with model ``m1`` whose server is a real loopback upstream."""
    upstream = FakeUpstream()
    driver = FakeDriver()
    services = AgentServices(
        runtimes=NodeRuntimes([ComposedDriver(driver, (ContainerRuntimeInfo(runtime="vllm", network="n"),))]),
        memory=MemoryProbe(linux=False, fake_total_gib=16.0, reserve_gib=1.0),
        node_name="node-1",
        version="0.0.test",
    )
    async with services, serve_asgi(upstream) as upstream_base:
        await driver.start(_spec("m1"))
        driver.set_upstream("m1", upstream_base)
        async with serve_asgi(create_app(services, background=False)) as base:
            yield int(base.rsplit(":", 1)[1].rstrip("/")), upstream


async def raw_get(port: int, target: str) -> tuple[int, bytes]:
    """GET ``target`` exactly as written (no client normalizing it), and return (status, body)."""
    head = f"GET {target} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n"
    received = b""
    with anyio.fail_after(WAIT_S):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(head.encode("latin-1"))
            try:
                while True:
                    received += await stream.receive()
            except anyio.EndOfStream:
                pass
    header_block, _, body = received.partition(b"\r\n\r\n")
    return int(header_block.split(b" ")[1]), body


ATTACKS = [
    "%2e%2e/%2e%2e/runtimes",
    "v1/%2e%2e/props",
    "v1/../props",
    "v1/./../props",
    "v1/%252e%252e/props",
    "v1%2fmodels",
    "v1/%2F..%2Fprops",
    "v1/%5c..%5cprops",
    "v1/%EF%BC%8E%EF%BC%8E/props",
    "props",
    "slots",
]


@pytest.mark.anyio
@pytest.mark.parametrize("tail", ATTACKS)
async def test_the_agent_refuses_a_path_that_could_leave_v1(tail: str) -> None:
    async with agent_before_a_model() as (port, upstream):
        status, body = await raw_get(port, f"{AGENT_API_PREFIX}/proxy/m1/{tail}")

    error = AgentErrorBody.from_wire_json(body).error
    assert (status, error.code, error.field) == (400, "invalid_request", "path")
    assert upstream.requests == []


@pytest.mark.anyio
async def test_the_agent_still_forwards_a_plain_v1_path() -> None:
    async with agent_before_a_model() as (port, upstream):
        status, _ = await raw_get(port, f"{AGENT_API_PREFIX}/proxy/m1/v1/models?x=1")

    assert status == 200
    assert (upstream.requests[0].path, upstream.requests[0].query) == ("/v1/models", "x=1")
