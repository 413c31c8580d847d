"""The forwarding core's aiohttp sender (the master's hop to its agents), against real loopback servers.

What ``forward`` does with it (streaming, bodies, timeouts, the stale keep-alive retry, a client that
leaves) runs in ``test_forward.py`` on every kind of client; this file covers what only the sender does:
mutual TLS on aiohttp's connections, its errors as httpcore's, and its session's life cycle.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterable
from dataclasses import dataclass
from typing import Any

import anyio
import httpcore
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from tests._support.agent_fleet import create_fleet
from tests._support.asgi_server import serve_asgi

from mirbad_router import LeanTransport, create_upstream_client, lean_transport

pytestmark = pytest.mark.anyio

WAIT_S = 10.0
_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=8, keepalive_expiry=2.0)
_TIMEOUT: dict[str, float | None] = {"connect": WAIT_S, "read": WAIT_S, "write": WAIT_S, "pool": WAIT_S}


@dataclass
class _Attempt:
    connected: bool = False


async def _whoami(request: Request) -> PlainTextResponse:
    tls = request.scope.get("extensions", {}).get("tls", {})
    return PlainTextResponse(f"{request.method} {request.url.path} {bool(tls)}")


_APP = Starlette(routes=[Route("/{path:path}", _whoami, methods=["GET", "POST"])])


def _sender(transport: LeanTransport) -> Any:  # the sender module is private (it imports aiohttp)
    sender = transport.sender
    assert sender is not None
    return sender


async def _read(answer_body: AsyncIterable[bytes]) -> bytes:
    return b"".join([chunk async for chunk in answer_body])


async def test_a_request_goes_over_mutual_tls_and_records_its_new_connection() -> None:
    fleet = create_fleet()
    transport = lean_transport(fleet.master.client_context(), _LIMITS, forward_with="aiohttp")
    async with serve_asgi(_APP, ssl_context=fleet.agent.server_context()) as url, transport:
        sender = _sender(transport)
        first, again = _Attempt(), _Attempt()
        answer = await sender.send("POST", f"{url}/agent/v1/x", [(b"x-a", b"1")], b"{}", _TIMEOUT, first)
        body = await _read(answer.body)
        await answer.close()
        reused = await sender.send("GET", f"{url}/agent/v1/y", [], b"", _TIMEOUT, again)
        await _read(reused.body)
        await reused.close()

    assert (answer.status, body) == (200, b"POST /agent/v1/x False")
    assert (first.connected, again.connected) == (True, False)  # the second reused the kept-alive one


async def test_a_server_the_client_does_not_trust_is_a_connect_error() -> None:
    fleet, stranger = create_fleet(), create_fleet()
    transport = lean_transport(stranger.master.client_context(), _LIMITS, forward_with="aiohttp")
    async with serve_asgi(_APP, ssl_context=fleet.agent.server_context()) as url, transport:
        with pytest.raises(httpcore.ConnectError, match="certificate verify failed"):
            await _sender(transport).send("GET", f"{url}/agent/v1/x", [], b"", _TIMEOUT, _Attempt())


async def test_a_refused_connection_is_a_connect_error() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening
        transport = lean_transport(ssl.create_default_context(), _LIMITS, forward_with="aiohttp")
        async with transport:
            with pytest.raises(httpcore.ConnectError):
                await _sender(transport).send(
                    "GET", f"http://127.0.0.1:{port}/", [], b"", _TIMEOUT, _Attempt()
                )


async def test_a_silent_server_is_a_read_timeout() -> None:
    async def silent(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            await stream.receive()
            await anyio.sleep(WAIT_S)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    transport = lean_transport(ssl.create_default_context(), _LIMITS, forward_with="aiohttp")
    async with listener, anyio.create_task_group() as group, transport:
        group.start_soon(listener.serve, silent)
        timeout = {**_TIMEOUT, "read": 0.2}
        with anyio.fail_after(WAIT_S), pytest.raises(httpcore.ReadTimeout):
            await _sender(transport).send("GET", f"http://127.0.0.1:{port}/", [], b"", timeout, _Attempt())
        group.cancel_scope.cancel()


async def test_the_session_is_made_at_the_first_request_and_closed_with_the_client() -> None:
    client = create_upstream_client(forward_with="aiohttp")
    transport = client._transport
    assert isinstance(transport, LeanTransport)
    sender = _sender(transport)
    assert _session(sender) is None  # no loop is needed to build the client
    async with serve_asgi(_APP) as url:
        async with client:
            answer = await sender.send("GET", f"{url}/v1/models", [], b"", _TIMEOUT, _Attempt())
            await _read(answer.body)
            await answer.close()
            session = _session(sender)
        assert session is not None
        assert session.closed
        with pytest.raises(RuntimeError, match="closed"):
            await sender.send("GET", f"{url}/v1/models", [], b"", _TIMEOUT, _Attempt())


def test_the_proxy_client_forwards_with_httpcore_unless_asked() -> None:
    assert _sender_of(create_upstream_client()) is None
    assert _sender_of(create_upstream_client(forward_with="aiohttp")) is not None


def _session(sender: Any) -> Any:
    return sender._session


def _sender_of(client: httpx.AsyncClient) -> object:
    transport = client._transport
    assert isinstance(transport, LeanTransport)
    return transport.sender
