"""Serving the agent: uvicorn over mutual TLS, stopped gracefully by SIGTERM or SIGINT.

A host other than a terminal (the Windows service, :mod:`mirbad_agent._windows_service`) passes its own
stop request instead of the signals, and hears when the agent is listening.

The TLS context comes from :meth:`mirbad_protocol.pki.TlsCredentials.server_context`: TLS 1.2 or newer, a
client certificate required and verified against the fleet CA alone (never the system store). Only the
master's certificate carries the clientAuth purpose, so no other certificate of the fleet, a node's
included, opens the agent.
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
from collections.abc import Awaitable, Callable

import anyio
import uvicorn
from starlette.types import ASGIApp

from mirbad_protocol import PkiError
from mirbad_protocol.agent import AGENT_IDLE_TIMEOUT_S
from mirbad_protocol.pki import TlsCredentials
from mirbad_router import (
    ACCEPT_BURST,
    ConnectionLimits,
    GuardedConfig,
    GuardedServer,
    install_accept_error_log,
)

from ._app import create_app
from ._compose import compose_services
from ._config import AgentSettings
from ._enroll_client import AGENT_TLS_STEM
from .exceptions import AgentConfigError

__all__ = ["STARTED_POLL_S", "StopRequest", "load_credentials", "run_agent", "serve", "server_config"]

logger = logging.getLogger(__name__)

StopRequest = Callable[[], Awaitable[object]]
"""Returns when the agent's host asks it to stop (instead of SIGTERM); the agent then stops gracefully."""

STARTED_POLL_S = 0.05
"""How often serving looks whether uvicorn has finished its startup (it announces it with no event)."""


def load_credentials(settings: AgentSettings) -> TlsCredentials:
    """The agent's certificate, key and fleet CA from its state folder.

    Raises:
        AgentConfigError: the files are missing (the node is not enrolled), unreadable, exposed to
            other users, or do not belong together.
    """
    folder = settings.credentials_dir
    try:
        return TlsCredentials.load(folder, AGENT_TLS_STEM)
    except FileNotFoundError as exc:
        raise AgentConfigError(
            f"no agent certificate in {folder} ({exc.filename} is missing); "
            "enroll first: mirbad-agent enroll --master URL --token TOKEN"
        ) from None
    except (PkiError, OSError) as exc:
        raise AgentConfigError(f"the agent credentials in {folder} cannot be used: {exc}") from None


async def run_agent(
    settings: AgentSettings,
    credentials: TlsCredentials,
    *,
    stop: StopRequest | None = None,
    on_started: Callable[[], None] | None = None,
) -> None:
    """Compose the agent from ``settings`` and serve it until a stop signal; its models keep running.

    Args:
        settings: the agent's settings.
        credentials: its certificate, key and fleet CA.
        stop: when given, the agent stops when it returns and leaves the signals alone.
        on_started: called once the agent accepts connections.
    """
    listener = _listen(settings.host, settings.port)
    with listener:
        async with await compose_services(settings) as services:
            app = create_app(services)
            await serve(app, settings, credentials, listener, stop=stop, on_started=on_started)


async def serve(
    app: ASGIApp,
    settings: AgentSettings,
    credentials: TlsCredentials,
    listener: socket.socket,
    *,
    stop: StopRequest | None = None,
    on_started: Callable[[], None] | None = None,
) -> None:
    """Serve ``app`` on ``listener`` with mutual TLS until SIGTERM or SIGINT (a second one forces).

    With ``stop``, until ``stop`` returns instead; ``on_started`` is called once connections are accepted.
    """
    config = server_config(app, settings, credentials)
    install_accept_error_log()
    # Elsewhere the agent handles the signals with anyio; on Windows uvicorn's own handling stays,
    # unless a host (the service) brings its own stop request.
    guarded = sys.platform != "win32" or stop is not None
    server = GuardedServer(config) if guarded else uvicorn.Server(config)
    host, port = listener.getsockname()[:2]
    logger.info("agent %s listening on https://%s:%s/agent/v1", settings.node_name, host, port)
    async with anyio.create_task_group() as group:
        if stop is not None:
            group.start_soon(_stop_when_asked, stop, server)
        elif isinstance(server, GuardedServer):
            group.start_soon(_stop_on_signal, server)
        if on_started is not None:
            group.start_soon(_announce_started, server, on_started)
        await server.serve(sockets=[listener])
        group.cancel_scope.cancel()


def server_config(
    app: ASGIApp,
    settings: AgentSettings,
    credentials: TlsCredentials,
    *,
    limits: ConnectionLimits | None = None,
) -> GuardedConfig:
    """Uvicorn's settings for the agent: mutual TLS, no access log, an idle timeout clients stay inside.

    Served with the master's guards (:class:`~mirbad_router.GuardedConfig`): a client that completes the
    TLS handshake and then stalls in its header or body no longer holds a socket forever, and a flood of
    idle connections cannot keep the master out (the longest-idle one makes room).
    """
    return GuardedConfig(
        app,
        limits=limits or ConnectionLimits(),
        backlog=ACCEPT_BURST,
        ssl_context_factory=lambda _config, _default: credentials.server_context(),
        lifespan="on",
        log_config=None,
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=max(1, round(settings.graceful_shutdown_s)),
        # Longer than any client keeps an idle connection (the master: AGENT_CLIENT_KEEPALIVE_S).
        timeout_keep_alive=round(AGENT_IDLE_TIMEOUT_S),
    )


async def _stop_on_signal(server: uvicorn.Server) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for received in signals:
            if server.should_exit:
                server.force_exit = True
            server.should_exit = True
            logger.info("%s: stopping (the models keep running)", signal.Signals(received).name)


async def _stop_when_asked(stop: StopRequest, server: uvicorn.Server) -> None:
    await stop()
    server.should_exit = True
    logger.info("asked to stop: stopping (the models keep running)")


async def _announce_started(server: uvicorn.Server, on_started: Callable[[], None]) -> None:
    # uvicorn only sets a flag (no event to wait on); cancelled with the task group when serving ends
    # before its startup completes.
    while not server.started:  # noqa: ASYNC110
        await anyio.sleep(STARTED_POLL_S)
    on_started()


def _listen(host: str, port: int) -> socket.socket:
    # Bound here rather than by uvicorn, so a taken port is a one-line error instead of a traceback.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections only when the listener says
    # TCP; without it every response waits ~40 ms for the client's delayed ACK (bench/router showed it).
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
    except OSError as exc:
        listener.close()
        raise AgentConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return listener
