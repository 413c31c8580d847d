"""uvicorn servers inside the master's own task group, on sockets bound beforehand.

The master handles SIGINT and SIGTERM itself (it must stop models before the agent), so uvicorn's own
signal handling is switched off; a server says when it listens with an event, and stops when asked.
Every server runs uvicorn's httptools protocol with the guards of
:class:`mirbad_router.GuardedConfig` (header and body timeouts, a connection limit, HTTP/1.0 without
chunked encoding) and the loop reports failed accepts at most once per interval.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Sequence
from typing import Final

import anyio
from anyio.abc import TaskGroup
from starlette.types import ASGIApp

from mirbad_router import (
    ACCEPT_BURST,
    LISTEN_QUEUE,
    ConnectionLimits,
    GuardedConfig,
    GuardedServer,
    install_accept_error_log,
)

from .exceptions import ServeError

__all__ = ["Server", "bind", "free_loopback_port"]

_STARTUP_TIMEOUT_S: Final = 30.0
_GRACEFUL_SHUTDOWN_S: Final = 5


def bind(host: str, port: int, purpose: str) -> socket.socket:
    """A listening socket on ``host:port``.

    Raises:
        ServeError: the address is taken or not this machine's; the message names ``purpose``.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections only when the listener says
    # TCP; without it every response waits ~40 ms for the client's delayed ACK (bench/router showed it).
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(LISTEN_QUEUE)
    except OSError as exc:
        listener.close()
        raise ServeError(f"cannot listen on {host}:{port} for {purpose}: {exc.strerror or exc}") from None
    return listener


def free_loopback_port() -> int:
    """A loopback port nothing listens on now (the OS's pick, released at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class _Uvicorn(GuardedServer):
    """Says when it listens and when it has finished, with events; the master handles the signals."""

    def __init__(self, config: GuardedConfig) -> None:
        super().__init__(config)
        self.listening = anyio.Event()
        self.finished = anyio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.listening.set()


class Server:
    """An ASGI app served by uvicorn on a bound socket, started in a task group."""

    def __init__(self, server: _Uvicorn, listener: socket.socket) -> None:
        self._server = server
        self._listener = listener

    @classmethod
    def create(
        cls,
        app: ASGIApp,
        listener: socket.socket,
        *,
        ssl_context: ssl.SSLContext | None = None,
        limits: ConnectionLimits | None = None,
        trusted_proxies: Sequence[str] = (),
    ) -> Server:
        """A server for ``app`` on ``listener`` (TLS with ``ssl_context`` when given).

        Args:
            app: the ASGI app.
            listener: a bound, listening socket (see :func:`bind`).
            ssl_context: serve TLS with it.
            limits: timeouts and the connection limit (default: :class:`ConnectionLimits`' defaults).
            trusted_proxies: peers (addresses, networks) whose ``X-Forwarded-*`` headers are believed;
                none by default, so a client cannot pick the address it is throttled under.
        """
        config = GuardedConfig(
            app,
            limits=limits or ConnectionLimits(),
            # uvicorn's 2048 is also how many sockets asyncio accepts per turn, before any can replace
            # an idle one: bursts that size could use up the descriptors the limit keeps free.
            backlog=ACCEPT_BURST,
            lifespan="on",
            log_config=None,
            access_log=False,
            server_header=False,
            # uvicorn believes X-Forwarded-For from loopback by default: never, unless configured.
            proxy_headers=bool(trusted_proxies),
            forwarded_allow_ips=list(trusted_proxies) or "",
            timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_S,
            ssl_context_factory=(lambda _config, _default: ssl_context) if ssl_context is not None else None,
        )
        return cls(_Uvicorn(config), listener)

    async def start(self, tasks: TaskGroup) -> None:
        """Start serving in ``tasks`` and return once it listens.

        Raises:
            ServeError: it stopped during start-up (its log says why) or took too long.
        """
        install_accept_error_log()
        tasks.start_soon(self._serve)
        with anyio.move_on_after(_STARTUP_TIMEOUT_S):
            async with anyio.create_task_group() as either:
                for event in (self._server.listening, self._server.finished):
                    either.start_soon(_set_then_cancel, event, either)
        if not self._server.listening.is_set() or self._server.finished.is_set():
            raise ServeError(f"the server on {self.address} did not start")

    async def stop(self) -> None:
        """Stop accepting, finish open requests (bounded), and return once it has stopped."""
        self._server.should_exit = True
        with anyio.move_on_after(_GRACEFUL_SHUTDOWN_S + 5):
            await self._server.finished.wait()
            return
        self.force()
        await self._server.finished.wait()

    def force(self) -> None:
        """Stop without waiting for open requests."""
        self._server.should_exit = True
        self._server.force_exit = True

    @property
    def address(self) -> str:
        """``host:port`` it listens on."""
        host, port = self._listener.getsockname()[:2]
        return f"{host}:{port}"

    async def _serve(self) -> None:
        try:
            await self._server.serve(sockets=[self._listener])
        finally:
            self._server.finished.set()
            self._listener.close()


async def _set_then_cancel(event: anyio.Event, group: TaskGroup) -> None:
    await event.wait()
    group.cancel_scope.cancel()
