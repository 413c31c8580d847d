"""The proxy's lean connection pool, against a real loopback HTTP/1.1 server that counts its connections."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import httpx
import pytest
from anyio.abc import SocketStream

from mirbad_router import LeanConnectionPool, create_upstream_client, lean_transport

pytestmark = pytest.mark.anyio

WAIT_S = 10.0
_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


@dataclass
class _Server:
    """Answers ``/fast`` at once and ``/slow`` once :attr:`release` is set; keeps connections alive."""

    port: int = 0
    accepted: int = 0
    slow_waiting: int = 0
    release: anyio.Event = field(default_factory=anyio.Event)
    three_slow_waiting: anyio.Event = field(default_factory=anyio.Event)

    async def handle(self, stream: SocketStream) -> None:
        self.accepted += 1
        async with stream:
            pending = b""
            while True:
                while b"\r\n\r\n" not in pending:
                    try:
                        pending += await stream.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        return
                head, pending = pending.split(b"\r\n\r\n", 1)
                if b" /slow " in head.split(b"\r\n", 1)[0]:
                    self.slow_waiting += 1
                    if self.slow_waiting == 3:
                        self.three_slow_waiting.set()
                    await self.release.wait()
                await stream.send(_ANSWER)
                if b" /then-close " in head.split(b"\r\n", 1)[0]:
                    return  # closed while the client believes the connection kept alive


@asynccontextmanager
async def _serving() -> AsyncIterator[_Server]:
    server = _Server()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    server.port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, server.handle)
        try:
            yield server
        finally:
            server.release.set()
            group.cancel_scope.cancel()


async def _three_slow_waiting(server: _Server) -> None:
    with anyio.fail_after(WAIT_S):
        await server.three_slow_waiting.wait()


async def test_an_idle_connection_is_kept_while_more_requests_than_the_bound_are_in_flight() -> None:
    # httpcore's pool compared *all* its connections with the keep-alive bound, so with three slow
    # requests in flight and a bound of two, the connection a fast request had just used was closed
    # and the next request paid a new connection (a TLS handshake, between the master and an agent).
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=2, keepalive_expiry=30)
    transport = lean_transport(ssl.create_default_context(), limits)
    async with (
        _serving() as server,
        httpx.AsyncClient(transport=transport, base_url=f"http://127.0.0.1:{server.port}") as client,
        anyio.create_task_group() as group,
    ):
        for _ in range(3):
            group.start_soon(client.get, "/slow")
        await _three_slow_waiting(server)
        first = await client.get("/fast")
        second = await client.get("/fast")
        reused = server.accepted
        server.release.set()

    assert (first.text, second.text) == ("ok", "ok")
    assert reused == 4  # three slow connections, and one the two fast requests shared


async def test_idle_connections_beyond_the_bound_are_closed_at_the_sweep() -> None:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=1, keepalive_expiry=30)
    transport = lean_transport(ssl.create_default_context(), limits, sweep_interval_s=0)
    async with (
        _serving() as server,
        httpx.AsyncClient(transport=transport, base_url=f"http://127.0.0.1:{server.port}") as client,
    ):
        async with anyio.create_task_group() as group:
            for _ in range(3):
                group.start_soon(client.get, "/slow")
            await _three_slow_waiting(server)
            server.release.set()
        await client.get("/fast")  # the pool sweeps as a request arrives (every time, here)
        pool = transport._pool
        assert isinstance(pool, LeanConnectionPool)
        assert len([c for c in pool.connections if not c.is_closed()]) == 1


async def test_the_proxy_client_sends_through_the_lean_pool() -> None:
    async with _serving() as server, create_upstream_client() as client:
        answers = [await client.get(f"http://127.0.0.1:{server.port}/fast") for _ in range(5)]
        assert isinstance(client._transport._pool, LeanConnectionPool)  # type: ignore[attr-defined]

    assert [answer.text for answer in answers] == ["ok"] * 5
    assert server.accepted == 1


async def test_a_connection_the_server_closed_while_idle_is_not_handed_out() -> None:
    # Between sweeps only the connection about to be used is checked; that check must still catch it.
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=4, keepalive_expiry=30)
    transport = lean_transport(ssl.create_default_context(), limits)
    async with (
        _serving() as server,
        httpx.AsyncClient(transport=transport, base_url=f"http://127.0.0.1:{server.port}") as client,
    ):
        await client.get("/fast")  # the sweep is due now; the next one is a second away
        closed = await client.get("/then-close")
        await anyio.wait_all_tasks_blocked()  # the server's side has closed
        after = await client.get("/fast")

    assert (closed.text, after.text) == ("ok", "ok")
    assert server.accepted == 2
