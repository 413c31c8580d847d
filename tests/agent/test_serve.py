"""How the agent serves: guarded sockets, and an idle timeout that outlasts every client's reuse."""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from tests._support.agent_settings import agent_settings
from tests._support.polling import eventually
from tests.orchestration._fleet_pki import FleetPki

from mirbad_agent import server_config
from mirbad_orchestration.fleet import DEFAULT_POLL_INTERVAL_S
from mirbad_protocol.agent import AGENT_CLIENT_KEEPALIVE_S, AGENT_IDLE_TIMEOUT_S
from mirbad_protocol.pki import TlsCredentials
from mirbad_router import ConnectionLimits, GuardedConfig

pytestmark = pytest.mark.anyio

WAIT_S = 20.0


def test_the_agent_closes_idle_connections_only_after_its_clients_stop_reusing_them(tmp_path: Path) -> None:
    # Both sides at 5 s and a poll every 5 s: a poll now and then went out on a connection the agent
    # was closing ("Server disconnected"), and an idle node was marked unreachable every few minutes.
    config = server_config(Starlette(), agent_settings(tmp_path), FleetPki.create().agent("node-1"))

    assert config.timeout_keep_alive == AGENT_IDLE_TIMEOUT_S
    assert DEFAULT_POLL_INTERVAL_S < AGENT_CLIENT_KEEPALIVE_S < AGENT_IDLE_TIMEOUT_S / 1.5


def test_the_agent_serves_with_the_connection_guards(tmp_path: Path) -> None:
    config = server_config(Starlette(), agent_settings(tmp_path), FleetPki.create().agent("node-1"))

    assert isinstance(config, GuardedConfig)
    assert config.limits == ConnectionLimits()


async def _ok(_request: object) -> PlainTextResponse:
    return PlainTextResponse("ok")


class _Agent:
    def __init__(self, port: int, master: TlsCredentials) -> None:
        self.port = port
        self.master = master

    def connect(self) -> ssl.SSLSocket:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=WAIT_S)
        return self.master.client_context().wrap_socket(raw, server_hostname="127.0.0.1")


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[_Agent]:
    pki = FleetPki.create()
    app = Starlette(routes=[Route("/agent/v1/info", _ok)])
    limits = ConnectionLimits(
        header_timeout_s=0.5, body_timeout_s=0.5, max_connections=64, handshake_timeout_s=0.5
    )
    config = server_config(app, agent_settings(tmp_path), pki.agent("node-1"), limits=limits)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: server.serve(sockets=[listener]))
        await eventually(lambda: server.started, timeout_s=WAIT_S, poll_s=0.02)
        try:
            yield _Agent(listener.getsockname()[1], pki.master())
        finally:
            server.should_exit = True
    listener.close()


def _closed_by_server(client: ssl.SSLSocket) -> bool:
    """Whether the server closed the connection without answering (EOF within the socket's timeout)."""
    try:
        return client.recv(1024) == b""
    except (ssl.SSLError, ConnectionResetError):
        return True
    except TimeoutError:
        return False


async def test_a_client_that_stalls_in_its_header_is_let_go(agent: _Agent) -> None:
    # Before, the agent's plain uvicorn held a mutually authenticated socket that sent half a header
    # forever; enough of them would have used up its descriptors.
    def stall() -> bool:
        with agent.connect() as client:
            client.sendall(b"GET /agent/v1/info HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            return _closed_by_server(client)

    assert await anyio.to_thread.run_sync(stall)


async def test_a_complete_request_is_still_answered(agent: _Agent) -> None:
    def ask() -> bytes:
        with agent.connect() as client:
            client.sendall(b"GET /agent/v1/info HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := client.recv(4096):
                answer += chunk
            return answer

    answer = await anyio.to_thread.run_sync(ask)
    assert answer.startswith(b"HTTP/1.1 200")
    assert answer.endswith(b"ok")


async def test_a_client_that_stalls_in_its_tls_handshake_is_let_go(agent: _Agent) -> None:
    # Before, asyncio held the half-open handshake 60 s outside the guard (issue 31, item 1): 20k of
    # them grew the agent to 1 GB.
    def stall() -> bool:
        with socket.create_connection(("127.0.0.1", agent.port), timeout=WAIT_S) as raw:
            try:
                return raw.recv(1024) == b""
            except ConnectionResetError:
                return True
            except TimeoutError:
                return False

    assert await anyio.to_thread.run_sync(stall)


async def test_a_header_past_the_bound_is_answered_431(agent: _Agent) -> None:
    def ask() -> bytes:
        with agent.connect() as client:
            client.sendall(
                b"GET /agent/v1/info HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n"
            )
            return client.recv(64)

    assert (await anyio.to_thread.run_sync(ask)).startswith(b"HTTP/1.1 431 ")
