"""Guarding the master's sockets: header and body timeouts, a connection limit, HTTP/1.0 bodies.

uvicorn bounds only the wait between two requests on a kept-alive connection: a client that sends half
a request header and stalls, or a body that stops arriving, holds its socket forever, and enough of
them use up the process's descriptors (and then every accept fails, and each failure is logged).
:class:`GuardedHttpProtocol` is uvicorn's httptools protocol with:

* a **header deadline**: a request's header must be complete within ``header_timeout_s`` of its first
  byte (or of the connection, for a client that sends nothing);
* a **body idle timeout**: a request body may pause for at most ``body_timeout_s`` between two pieces,
  so an upload at any steady rate is never cut, but a stalled one is (a pause the application caused
  by not reading counts for nothing);
* a **connection limit** below the descriptor limit: when it is reached a new connection takes the
  place of the longest-idle one (kept alive, or still sending its header); a connection whose request
  is being answered is never dropped for it. So a flood of idle sockets cannot keep ``/healthz`` or
  ``/v1`` out;
* **HTTP/1.0** answers without chunked encoding (HTTP/1.0 has none): a body of unknown length runs
  until the connection closes.

Failed accepts are :mod:`._accept_errors`' business.
"""

from __future__ import annotations

# uvicorn's protocols are asyncio protocols: their transports and the loop's clock are asyncio's.
import asyncio  # noqa: TID251
import contextlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

__all__ = [
    "ACCEPT_BURST",
    "LISTEN_QUEUE",
    "ConnectionLimits",
    "GuardedConfig",
    "GuardedHttpProtocol",
    "GuardedServer",
    "default_max_connections",
]

ACCEPT_BURST: Final = 64
"""How many connections asyncio accepts in one turn of the loop (uvicorn's ``backlog`` sets it)."""
LISTEN_QUEUE: Final = 1024
"""The kernel's queue of connections waiting to be accepted (set on the socket once serving)."""
_BURSTS_IN_FLIGHT: Final = 4  # turns of the loop between an accept and the close of what it replaced
_FALLBACK_DESCRIPTORS: Final = 1024
_UNLIMITED_DESCRIPTORS: Final = 65536  # what "no limit" is taken for
_LENGTH_HEADERS: Final = (b"content-length", b"transfer-encoding")


def default_max_connections() -> int:
    """A connection limit that leaves room below the descriptor limit for everything else.

    The room is what the loop accepts before the first of those connections has replaced an idle one
    and that one's descriptor is closed (a few turns of :data:`ACCEPT_BURST`: measured, not assumed),
    plus an eighth of the limit (at least 128) for the agent clients, files and the rest.
    """
    soft = _descriptor_limit()
    return max(16, soft - _BURSTS_IN_FLIGHT * ACCEPT_BURST - max(128, soft // 8))


def _descriptor_limit() -> int:
    try:
        import resource  # POSIX only
    except ImportError:
        return _FALLBACK_DESCRIPTORS
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return _UNLIMITED_DESCRIPTORS if soft == resource.RLIM_INFINITY or soft <= 0 else soft


@dataclass(frozen=True)
class ConnectionLimits:
    """How long a client may take and how many connections one server keeps.

    Attributes:
        header_timeout_s: a request's header must be complete this long after its first byte.
        body_timeout_s: the longest pause between two pieces of a request body.
        max_connections: open connections at most (a new one replaces the longest-idle one).
    """

    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_connections: int = field(default_factory=default_max_connections)


class GuardedConfig(uvicorn.Config):
    """uvicorn's configuration with :class:`ConnectionLimits`, served by :class:`GuardedHttpProtocol`.

    Args:
        app: the ASGI app.
        limits: the timeouts and the connection limit.
        **options: uvicorn's own options (``http`` is always :class:`GuardedHttpProtocol`).
    """

    def __init__(self, app: Any, *, limits: ConnectionLimits, **options: Any) -> None:
        super().__init__(app, http=GuardedHttpProtocol, **options)
        self.limits = limits
        # Connections not answering a request, oldest first: the ones a new connection may replace.
        self.idle: dict[GuardedHttpProtocol, None] = {}
        self.sweeper = _Sweeper(min(limits.header_timeout_s, limits.body_timeout_s))


class GuardedServer(uvicorn.Server):
    """uvicorn's server for a :class:`GuardedConfig`, inside its host's own signal handling.

    It installs no signal handlers (uvicorn re-raises a captured signal once it has shut down, which
    would end the process before its host stopped what it runs), and once listening it gives the
    kernel's accept queue :data:`LISTEN_QUEUE`.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Leave the signals to the host."""
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Start, then lengthen each listening socket's queue."""
        await super().startup(sockets)
        # asyncio listens with the accept burst as the queue's length: give the kernel's queue its
        # own, longer one, so a burst of clients waits there instead of being refused.
        for listener in sockets or ():
            listener.listen(LISTEN_QUEUE)


class _Sweeper:
    """Closes the connections whose deadline passed, looking a few times per shortest timeout.

    One timer per server instead of one per request: a request only writes down its deadline, which
    keeps the router's hot path as lean as uvicorn's own (measured: a timer per request cost more than
    the rest of the guard together).
    """

    def __init__(self, shortest_timeout_s: float) -> None:
        self._interval_s = min(1.0, max(0.01, shortest_timeout_s / 4))
        self._watched: set[GuardedHttpProtocol] = set()
        self._handle: asyncio.TimerHandle | None = None

    def watch(self, protocol: GuardedHttpProtocol) -> None:
        self._watched.add(protocol)
        if self._handle is None:
            self._handle = protocol.loop.call_later(self._interval_s, self._sweep, protocol.loop)

    def forget(self, protocol: GuardedHttpProtocol) -> None:
        self._watched.discard(protocol)

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        for protocol in [
            each for each in self._watched if each.deadline is not None and each.deadline <= now
        ]:
            protocol.deadline_passed()
        # Nothing to watch: stop until the next connection (an idle master wakes nobody up).
        self._handle = loop.call_later(self._interval_s, self._sweep, loop) if self._watched else None


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the deadlines, the limit and the HTTP/1.0 rule above.

    Attributes:
        deadline: loop time by which the header (or the body's next piece) must have arrived;
            ``None`` while the application has the request.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        if not isinstance(config, GuardedConfig):
            raise TypeError("GuardedHttpProtocol needs a GuardedConfig")
        self._guard = config
        self._header_timeout_s = config.limits.header_timeout_s
        self._body_timeout_s = config.limits.body_timeout_s
        self._reading_body = False
        self.deadline: float | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Admit the connection (at the limit, in place of the longest-idle one) and start its deadline."""
        super().connection_made(transport)
        if len(self.connections) > self._guard.limits.max_connections and not self._evict_one():
            transport.close()  # every other connection is answering a request: this one waits its turn
            return
        self._guard.idle[self] = None
        self.deadline = self.loop.time() + self._header_timeout_s
        self._guard.sweeper.watch(self)

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the connection."""
        self._forget()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        """A request's first byte: its header deadline starts (unless the connection's is still running)."""
        super().on_message_begin()
        if self.deadline is None:
            self.deadline = self.loop.time() + self._header_timeout_s

    def on_headers_complete(self) -> None:
        """The header is in: the request is being answered, and its body may pause only so long."""
        super().on_headers_complete()
        if self.parser.should_upgrade() and self._should_upgrade():
            return
        self._guard.idle.pop(self, None)
        self._reading_body = True
        self.deadline = self.loop.time() + self._body_timeout_s
        if type(self.cycle) is RequestResponseCycle:
            # The cycle's task has not run yet: it picks up the send() below.
            self.cycle.__class__ = (
                _CloseDelimitedCycle if self.scope["http_version"] == "1.0" else _StopOnCloseCycle
            )

    def on_body(self, body: bytes) -> None:
        """A piece of the body arrived: the pause allowed starts over."""
        super().on_body(body)
        self.deadline = self.loop.time() + self._body_timeout_s

    def on_message_complete(self) -> None:
        """The whole request arrived: no deadline while the application answers."""
        super().on_message_complete()
        self._reading_body = False
        self.deadline = None

    def on_response_complete(self) -> None:
        """Answered: the connection is idle (kept alive) again, unless a pipelined request starts now."""
        pipelined = bool(self.pipeline)
        super().on_response_complete()
        if not pipelined and not self.transport.is_closing():
            self._guard.idle[self] = None

    def handle_websocket_upgrade(self) -> None:
        """A websocket takes the connection over: it is no longer this protocol's to time or evict."""
        self._forget()
        super().handle_websocket_upgrade()

    def deadline_passed(self) -> None:
        """Close the connection: its header or its body stalled (the sweeper calls this)."""
        if self._reading_body and self.flow.read_paused:
            # The application is not reading: the client is not the one stalling.
            self.deadline = self.loop.time() + self._body_timeout_s
            return
        self._forget()
        self.transport.close()

    def _forget(self) -> None:
        self.deadline = None
        self._guard.idle.pop(self, None)
        self._guard.sweeper.forget(self)

    def _evict_one(self) -> bool:
        for victim in self._guard.idle:
            if victim is not self:
                victim._forget()
                victim.transport.close()
                return True
        return False


class _StopOnCloseCycle(RequestResponseCycle):
    """An exchange that stops writing once its connection is closing.

    uvicorn stops at ``disconnected``, which is set only when the loop gets round to the connection's
    loss; a busy loop runs the application first, and every piece it still writes to the dead socket
    made asyncio log "socket.send() raised exception." (one line per piece: floods after clients drop
    streams). A failed write marks the transport closing at once, so the next send sees it.
    """

    async def send(self, message: Any) -> None:
        if self.transport.is_closing():
            self.disconnected = True
            return
        await super().send(message)


class _CloseDelimitedCycle(_StopOnCloseCycle):
    """An HTTP/1.0 exchange: a body without a Content-Length runs until the connection closes."""

    _close_delimited = False

    async def send(self, message: Any) -> None:
        if message["type"] == "http.response.start" and not self.response_started:
            names = {name.lower() for name, _value in message.get("headers", ())}
            self._close_delimited = not names.intersection(_LENGTH_HEADERS)
            if self._close_delimited:
                self.chunked_encoding = False  # uvicorn would choose chunked; keep_alive is off for 1.0
        elif self._close_delimited and message["type"] == "http.response.body":
            # uvicorn counts a body against its Content-Length; this one has none, so each piece fits.
            self.expected_content_length = len(message.get("body", b""))
        await super().send(message)
