"""Guarding the master's sockets: handshake, header and body deadlines, size and connection limits.

uvicorn bounds only the wait between two requests on a kept-alive connection: a client that sends half
a request header and stalls, or a body that stops arriving, holds its socket forever, and enough of
them use up the process's descriptors (and then every accept fails, and each failure is logged).
:class:`GuardedHttpProtocol` is uvicorn's httptools protocol with:

* a **header deadline**: a request's header must be complete within ``header_timeout_s`` of its first
  byte (or of the connection, for a client that sends nothing);
* a **header size bound**: a header longer than ``max_header_bytes`` is answered 431 and closed;
* a **body idle timeout and minimum rate**: a request body may pause for at most ``body_timeout_s``
  between two pieces, and after ``body_grace_s`` it must have kept an average of ``body_min_rate``
  bytes per second; so a small body (a sign-in, an enrollment) ends within the grace, a large one gets
  time in proportion to its size, and one trickled a byte at a time is cut (a pause the application
  caused by not reading counts for nothing);
* **TLS handshakes inside the guard**: the server does the handshake itself (``start_tls``) after the
  connection was admitted, so a connection still in its handshake counts against the limit, can be
  evicted, has ``handshake_timeout_s`` to finish, and at most ``max_handshakes`` run at once per
  listener (past it a new one replaces the oldest, once that one took longer than an honest handshake
  does): a flood of half-open handshakes holds neither descriptors nor TLS buffers for long;
* a **connection limit** below the descriptor limit: when it is reached a new connection takes the
  place of the longest-idle one (in its handshake, kept alive, or still sending its header), else of
  the slowest one still sending its body; a connection whose request is being answered is never
  dropped for it. At the limit, an address holding more than ``address_share`` of it in such
  connections makes room itself: its new connection replaces its own oldest. So a flood of idle,
  half-open or trickling sockets cannot keep ``/healthz`` or ``/v1`` out;
* **HTTP/1.0** answers without chunked encoding (HTTP/1.0 has none): a body of unknown length runs
  until the connection closes.

Failed accepts are :mod:`._accept_errors`' business.
"""

from __future__ import annotations

# uvicorn's protocols are asyncio protocols: their transports and the loop's clock are asyncio's.
import asyncio  # noqa: TID251
import contextlib
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from ._early_tls import hand_early_bytes_to_tls

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
    """How long a client may take, how much header it may send and how many connections one server keeps.

    Attributes:
        header_timeout_s: a request's header must be complete this long after its first byte.
        body_timeout_s: the longest pause between two pieces of a request body.
        max_connections: open connections at most (a new one replaces the longest-idle one).
        handshake_timeout_s: a TLS handshake must be done this long after the connection was accepted.
        max_handshakes: TLS handshakes under way at once (past it, a new one replaces the oldest if
            that one has taken longer than an honest handshake does).
        max_header_bytes: a request line and header longer than this are answered 431.
        body_grace_s: how long any body may take before its average rate is checked.
        body_min_rate: bytes per second a body must average once the grace is over.
        address_share: the fraction of ``max_connections`` one address may hold, once the limit is
            reached, in connections that are not being answered (in their handshake, header or body,
            or kept alive).
    """

    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_connections: int = field(default_factory=default_max_connections)
    handshake_timeout_s: float = 5.0
    max_handshakes: int = 64
    max_header_bytes: int = 64 * 1024
    body_grace_s: float = 5.0
    body_min_rate: float = 1024.0
    address_share: float = 0.25

    @property
    def per_address(self) -> int:
        """Connections not being answered that one address may hold."""
        return max(4, int(self.max_connections * self.address_share))


class GuardedConfig(uvicorn.Config):
    """uvicorn's configuration with :class:`ConnectionLimits`, served by :class:`GuardedHttpProtocol`.

    Args:
        app: the ASGI app.
        limits: the timeouts and the connection limit.
        **options: uvicorn's own options (``http`` is always :class:`GuardedHttpProtocol`).

    Attributes:
        tls: the TLS context the protocol does its handshakes with (taken from uvicorn's ``ssl`` when
            the configuration loads, so that asyncio hands over the connection before the handshake).
    """

    def __init__(self, app: Any, *, limits: ConnectionLimits, **options: Any) -> None:
        super().__init__(app, http=GuardedHttpProtocol, **options)
        self.limits = limits
        self.tls: ssl.SSLContext | None = None
        # Connections not answering a request, oldest first: the ones a new connection may replace.
        self.idle: dict[GuardedHttpProtocol, None] = {}
        # Connections receiving a body: replaceable too, the slowest first.
        self.reading: dict[GuardedHttpProtocol, None] = {}
        self.handshakes: dict[GuardedHttpProtocol, None] = {}
        # Per client address, its replaceable connections (idle, handshaking or reading), oldest first.
        self.by_address: dict[str, dict[GuardedHttpProtocol, None]] = {}
        shortest = min(limits.header_timeout_s, limits.body_timeout_s, limits.handshake_timeout_s)
        self.sweeper = _Sweeper(min(shortest, limits.body_grace_s))

    def load(self) -> None:
        """Uvicorn's loading, with the TLS handshakes left to the protocol."""
        super().load()
        # asyncio would do each handshake out of the guard's sight (and for up to 60 s): the protocol
        # receives the plain connection instead and starts TLS once it has admitted it.
        self.tls, self.ssl = self.ssl, None


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
    """uvicorn's httptools protocol with the deadlines, the limits and the HTTP/1.0 rule above.

    Attributes:
        deadline: loop time by which the handshake, the header or the body (its next piece, or its
            pace) must have arrived; ``None`` while the application has the request.
        handshake_began: loop time its TLS handshake began at (0 without TLS).
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
        self._limits = config.limits
        self._address = ""
        self._secured: asyncio.Transport | None = None  # the TLS transport, once the handshake is done
        self._early: list[bytes] = []  # what TLS decrypted before the connection was handed over
        self._raw_early: list[bytes] = []  # what arrived before TLS was started
        self._tls_started = False
        self._ready = False  # whether HTTP may begin (admitted, and secured under TLS)
        self._reading_body = False
        self._in_header = False
        self._header_bytes = 0  # chunks of a header not yet complete
        self._parsed_bytes = 0  # request line and fields, as parsed
        self._refused = False
        self._body_clock = 0.0  # when the body's rate is counted from
        self._body_bytes = 0
        self.deadline: float | None = None
        self.handshake_began = 0.0

    # ------------------------------------------------------------------ admission and the handshake

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Admit the connection (at the limit, in place of another) and start its deadline.

        Under TLS this is first the plain connection: it is admitted, then secured by :meth:`_secure`,
        which calls this again with the TLS transport.
        """
        if self._secured is not None:  # the handshake is done: the connection was admitted before
            super().connection_made(transport)
            self._header_deadline()
            return
        self._address = _peer_host(transport)
        super().connection_made(transport)
        if not self._admit():
            self._leave(transport)
            return
        if self._guard.tls is None:
            self._header_deadline()
            return
        transport.pause_reading()  # the ClientHello is start_tls's to read
        now = self.loop.time()
        if len(self._guard.handshakes) >= self._limits.max_handshakes:
            oldest = next(iter(self._guard.handshakes))
            # Only one that already took longer than any honest handshake makes room: a burst of
            # honest clients (the master's hop opening its pool) passes the cap for a moment instead,
            # bounded still by the connection limit.
            if oldest.handshake_began <= now - min(_HONEST_HANDSHAKE_S, self._limits.handshake_timeout_s / 5):
                _evict(oldest)
        self.handshake_began = now
        self._guard.handshakes[self] = None
        self._replaceable(self._guard.idle)
        self.deadline = self.loop.time() + self._limits.handshake_timeout_s
        self._guard.sweeper.watch(self)
        self.tasks.add(self.loop.create_task(self._secure(transport, self._guard.tls)))

    async def _secure(self, transport: asyncio.Transport, tls: ssl.SSLContext) -> None:
        try:
            if transport.is_closing():
                raise ConnectionAbortedError
            if self._raw_early:
                # uvloop starts reading after connection_made (the pause there is lost), so the
                # ClientHello may have come here: it goes to TLS ahead of anything read after it.
                self.loop.call_soon(hand_early_bytes_to_tls, transport, self._raw_early)
            self._tls_started = True
            secured = await self.loop.start_tls(
                transport, self, tls, server_side=True, ssl_handshake_timeout=self._limits.handshake_timeout_s
            )
        except Exception:  # a failed handshake is the client's business: close and forget it
            self._leave(transport)
            return
        finally:
            self._guard.handshakes.pop(self, None)
            self.tasks.discard(asyncio.current_task())  # type: ignore[arg-type,unused-ignore]
        if secured is None or secured.is_closing():
            self._leave(transport)
            return
        self._secured = secured
        self.connection_made(secured)
        early, self._early = self._early, []
        for data in early:
            self.data_received(data)

    def _leave(self, transport: asyncio.Transport) -> None:
        self._forget()
        self.connections.discard(self)
        transport.abort()

    def _admit(self) -> bool:
        if len(self.connections) <= self._limits.max_connections:
            return True
        # Full: an address past its share makes room itself (its oldest goes), so one flooding
        # address cannot push the others out; below the limit nobody is dropped for it (a proxy or
        # the master's own hop may well hold more than a share while nothing is short).
        mine = self._guard.by_address.get(self._address)
        if mine and len(mine) >= self._limits.per_address:
            _evict(next(iter(mine)))
            return True
        return self._evict_one()

    def _evict_one(self) -> bool:
        victim = next((each for each in self._guard.idle if each is not self), None)
        if victim is None and self._guard.reading:
            victim = min(self._guard.reading, key=GuardedHttpProtocol.body_rate)
        if victim is None:
            return False  # every other connection is answering a request: this one waits its turn
        _evict(victim)
        return True

    def _replaceable(self, kind: dict[GuardedHttpProtocol, None]) -> None:
        self._guard.idle.pop(self, None)
        self._guard.reading.pop(self, None)
        kind[self] = None
        mine = self._guard.by_address.setdefault(self._address, {})
        mine.pop(self, None)
        mine[self] = None

    def _answering(self) -> None:
        self._guard.idle.pop(self, None)
        self._guard.reading.pop(self, None)
        mine = self._guard.by_address.get(self._address)
        if mine is not None:
            mine.pop(self, None)
            if not mine:
                del self._guard.by_address[self._address]

    def _header_deadline(self) -> None:
        self._ready = True
        self._replaceable(self._guard.idle)
        self.deadline = self.loop.time() + self._limits.header_timeout_s
        self._guard.sweeper.watch(self)

    # ------------------------------------------------------------------ the request

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the connection."""
        self._forget()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Parse ``data``; a header that grows past the bound is answered 431."""
        if not self._ready:  # before the TLS connection was handed over
            (self._early if self._tls_started else self._raw_early).append(data)
            return
        if self._refused:
            return
        super().data_received(data)
        if self._in_header and not self.transport.is_closing():
            # A header still incomplete after this chunk: all of it was header (httptools keeps it
            # whole until it ends, so this bounds the memory too).
            self._header_bytes += len(data)
            if self._header_bytes > self._limits.max_header_bytes:
                self._refuse_header()

    def on_url(self, url: bytes) -> None:
        """Part of the request line: counted towards the header's size."""
        super().on_url(url)
        self._parsed_bytes += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        """One header field: counted towards the header's size."""
        super().on_header(name, value)
        self._parsed_bytes += len(name) + len(value) + 4

    def on_message_begin(self) -> None:
        """A request's first byte: its header deadline starts (unless the connection's is still running)."""
        super().on_message_begin()
        self._in_header = True
        self._header_bytes = 0
        self._parsed_bytes = 0
        if self.deadline is None:
            self.deadline = self.loop.time() + self._limits.header_timeout_s

    def on_headers_complete(self) -> None:
        """The header is in: the request is being answered, and its body must keep pace."""
        self._in_header = False
        if self._parsed_bytes > self._limits.max_header_bytes:
            self._refuse_header()  # the whole of it came in one chunk: the count above never saw it
            return
        super().on_headers_complete()
        if self.parser.should_upgrade() and self._should_upgrade():
            return
        self._reading_body = True
        self._replaceable(self._guard.reading)
        self._body_clock = self.loop.time()
        self._body_bytes = 0
        self._body_deadline()
        if type(self.cycle) is RequestResponseCycle:
            # The cycle's task has not run yet: it picks up the send() below.
            self.cycle.__class__ = (
                _CloseDelimitedCycle if self.scope["http_version"] == "1.0" else _StopOnCloseCycle
            )

    def on_body(self, body: bytes) -> None:
        """A piece of the body arrived: the pause allowed starts over, the pace moves on."""
        if self._refused:
            return
        super().on_body(body)
        self._body_bytes += len(body)
        self._body_deadline()

    def on_message_complete(self) -> None:
        """The whole request arrived: no deadline while the application answers."""
        if self._refused:
            return
        super().on_message_complete()
        self._reading_body = False
        self._answering()
        self.deadline = None

    def on_response_complete(self) -> None:
        """Answered: the connection is idle (kept alive) again, unless a pipelined request starts now."""
        pipelined = bool(self.pipeline)
        super().on_response_complete()
        if not pipelined and not self.transport.is_closing():
            self._replaceable(self._guard.idle)

    def handle_websocket_upgrade(self) -> None:
        """A websocket takes the connection over: it is no longer this protocol's to time or evict."""
        self._forget()
        super().handle_websocket_upgrade()

    def deadline_passed(self) -> None:
        """Close the connection: its handshake, header or body stalled (the sweeper calls this)."""
        if self._reading_body and self.flow.read_paused:
            # The application is not reading: the client is not the one stalling; its pace restarts.
            self._body_clock = self.loop.time()
            self._body_bytes = 0
            self._body_deadline()
            return
        _evict(self)

    def body_rate(self) -> float:
        """Bytes per second of the body so far (what eviction at the limit compares)."""
        return self._body_bytes / max(1e-3, self.loop.time() - self._body_clock)

    def _body_deadline(self) -> None:
        # The next piece within the pause allowed, and the average pace kept after the grace.
        paced = self._body_clock + self._limits.body_grace_s + self._body_bytes / self._limits.body_min_rate
        self.deadline = min(self.loop.time() + self._limits.body_timeout_s, paced)

    def _refuse_header(self) -> None:
        self._in_header = False
        self._refused = True
        if self.cycle is not None and not self.cycle.response_complete:
            _evict(self)  # a response is still being written: no room for another on this connection
            return
        self.transport.write(_HEADER_TOO_LARGE)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        # Closing now, with the rest of the header unread, would reset the connection and could
        # destroy the answer before the client read it: what still comes is read and dropped for a
        # moment (the connection stays replaceable meanwhile).
        self.deadline = self.loop.time() + _LINGER_S
        self._guard.sweeper.watch(self)

    def _forget(self) -> None:
        self.deadline = None
        self._answering()
        self._guard.handshakes.pop(self, None)
        self._guard.sweeper.forget(self)


def _evict(protocol: GuardedHttpProtocol) -> None:
    protocol._forget()
    # abort, not close: a TLS close waits (30 s) for the client's close_notify, and a plain one for
    # the client to read what is still unsent, each holding a descriptor the guard no longer counts.
    protocol.transport.abort()


def _peer_host(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else ""


_HONEST_HANDSHAKE_S: Final = 1.0  # far longer than a handshake takes, even across the world
_LINGER_S: Final = 1.0  # how long a refused request's rest is read and dropped before the close
_HEADER_MESSAGE: Final = b"Request header fields too large."
_HEADER_TOO_LARGE: Final = b"".join(
    [
        b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
        b"content-type: text/plain; charset=utf-8\r\n",
        b"content-length: " + str(len(_HEADER_MESSAGE)).encode("ascii") + b"\r\n",
        b"connection: close\r\n\r\n",
        _HEADER_MESSAGE,
    ]
)


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
