"""The proxy's network layer on asyncio streams, against real loopback servers (plain and mutual TLS)."""

from __future__ import annotations

import socket
import ssl

import anyio
import httpcore
import httpx
import pytest
from tests._support.agent_fleet import create_fleet
from tests.router._raw_upstream import Connection, raw_upstream

from mirbad_router import AsyncioNetworkBackend, create_upstream_client

pytestmark = pytest.mark.anyio

WAIT_S = 10.0
_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


async def _answer_each(connection: Connection) -> None:
    # Every request gets ``ok`` on the kept-alive connection.
    while await connection.read_request() is not None:
        await connection.send(_ANSWER)


async def _silent(connection: Connection) -> None:
    await connection.read_request()
    await anyio.sleep_forever()


def _bodies(connection: Connection) -> list[bytes]:
    """The body of each request on ``connection``, as each arrived in one piece."""
    return [chunk.partition(b"\r\n\r\n")[2] for chunk in connection.received]


def _stream_of(response: httpx.Response) -> httpcore.AsyncNetworkStream:
    stream = response.extensions["network_stream"]
    assert isinstance(stream, httpcore.AsyncNetworkStream)
    return stream


async def test_a_request_goes_out_head_and_body_in_one_send() -> None:
    # httpcore writes the head and the body apart; held until the answer is awaited, they reach the
    # server as one send: one wake-up of the upstream per request instead of two.
    head, body = b"POST /v1/chat HTTP/1.1\r\nHost: x\r\nContent-Length: 300\r\n\r\n", b"x" * 300
    async with raw_upstream(_answer_each) as upstream:
        stream = await AsyncioNetworkBackend().connect_tcp("127.0.0.1", upstream.port, timeout=WAIT_S)
        await stream.write(head)
        await stream.write(body)
        await anyio.wait_all_tasks_blocked()  # the server has run: nothing has reached it yet
        [connection] = upstream.connections
        held = list(connection.received)
        with anyio.fail_after(WAIT_S):
            answer = await stream.read(65536)
        await stream.aclose()

    assert held == []
    assert answer == _ANSWER
    assert connection.received == [head + body]
    assert connection.requests == 1


async def test_the_proxy_client_sends_its_requests_whole() -> None:
    async with raw_upstream(_answer_each) as upstream, create_upstream_client() as client:
        answers = [
            await client.post(f"{upstream.base_url}/v1/chat", content=fill * 300) for fill in (b"x", b"y")
        ]

    assert [answer.text for answer in answers] == ["ok", "ok"]
    [connection] = upstream.connections
    assert _bodies(connection) == [b"x" * 300, b"y" * 300]


async def test_a_body_larger_than_the_coalescing_bound_arrives_whole() -> None:
    body = bytes(range(256)) * 8192  # 2 MiB: written at once, under asyncio's flow control
    async with raw_upstream(_answer_each) as upstream, create_upstream_client() as client:
        answer = await client.post(f"{upstream.base_url}/upload", content=body)

    assert answer.text == "ok"
    [connection] = upstream.connections
    assert b"".join(connection.received).partition(b"\r\n\r\n")[2] == body
    assert connection.requests == 1


async def test_mutual_tls_runs_on_the_event_loop_and_presents_the_client_certificate() -> None:
    fleet = create_fleet()
    async with (
        raw_upstream(_answer_each, tls=fleet.agent.server_context()) as upstream,
        create_upstream_client(ssl_context=fleet.master.client_context()) as client,
    ):
        answers = [await client.get(f"{upstream.base_url}/agent/v1/runtimes") for _ in range(3)]
        tls = _stream_of(answers[0]).get_extra_info("ssl_object")

    assert [answer.text for answer in answers] == ["ok"] * 3
    assert isinstance(tls, ssl.SSLObject)  # the loop's TLS, not a Python record layer
    assert tls.version() in ("TLSv1.2", "TLSv1.3")
    [connection] = upstream.connections  # one kept-alive connection
    assert connection.peer_certificate is not None


async def test_a_server_certificate_the_client_does_not_trust_is_a_connect_error() -> None:
    fleet, stranger = create_fleet(), create_fleet()
    async with (
        raw_upstream(_answer_each, tls=fleet.agent.server_context()) as upstream,
        create_upstream_client(ssl_context=stranger.master.client_context()) as client,
    ):
        with pytest.raises(httpx.ConnectError, match="certificate verify failed"):
            await client.get(f"{upstream.base_url}/agent/v1/runtimes")


async def test_a_refused_connection_is_a_connect_error() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connections to it are refused
        async with create_upstream_client() as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(f"http://127.0.0.1:{port}/health")


async def test_a_silent_server_is_a_read_timeout_where_one_is_asked_for() -> None:
    async with raw_upstream(_silent) as upstream, create_upstream_client() as client:
        with anyio.fail_after(WAIT_S), pytest.raises(httpx.ReadTimeout):
            await client.get(f"{upstream.base_url}/slow", timeout=httpx.Timeout(5, read=0.2))


async def test_the_stream_reports_its_addresses_and_socket() -> None:
    async with raw_upstream(_answer_each) as upstream, create_upstream_client() as client:
        answer = await client.get(f"{upstream.base_url}/fast")
        stream = _stream_of(answer)
        client_addr, server_addr = stream.get_extra_info("client_addr"), stream.get_extra_info("server_addr")
        raw = stream.get_extra_info("socket")
        readable = stream.get_extra_info("is_readable")

    assert server_addr == ("127.0.0.1", upstream.port)
    assert client_addr[0] == "127.0.0.1"
    assert raw is not None
    assert readable is False  # an idle kept-alive connection the server has not closed
    assert stream.get_extra_info("no such thing") is None
