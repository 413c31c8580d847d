"""A connection pool for the proxy whose work per request does not grow with the connections it holds.

httpcore's pool (1.0) runs its bookkeeping on every request and every release: for each idle
connection it counts *all* the connections again (a list built per idle connection: quadratic in the
pool's size), and for each queued request it builds two lists of every connection. The count also
compares all connections, not the idle ones, with ``max_keepalive_connections``, so once more requests
are in flight than that bound, each release closes an idle connection that the next request has to
open again (a TLS handshake, between the master and an agent). A profile of the master at 64
concurrent requests put that method first, above everything the router itself does.

:class:`LeanConnectionPool` keeps httpcore's connections, its request queue and its locking, and
replaces only that method: for each queued request, the first connection that can take it (stopping
there), checked for expiry before it is handed out, as httpcore does (a keep-alive past its expiry, a
peer that closed it); and at most once per :data:`SWEEP_INTERVAL_S` a sweep of the whole pool that
drops closed connections, closes expired ones and idle ones beyond ``max_keepalive_connections`` idle
ones. Checking for expiry is the costly part (a ``poll`` of the socket, and anyio rebuilds a dict of
socket attributes each time), and httpcore did it for every idle connection on every request and
every release; between sweeps a released connection now costs nothing, a new request a walk to the
first free connection. The public behaviour is
httpcore's own: the same limits, the same keep-alive expiry, no reuse of a connection the peer closed.
"""

from __future__ import annotations

import ssl
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal

# httpcore comes with httpx (which pins it to 1.*); the pool subclasses its connection pool.
import httpcore
import httpx
from httpcore import AsyncConnectionInterface
from httpcore._async.connection_pool import AsyncPoolRequest

from ._network import AsyncioNetworkBackend

if TYPE_CHECKING:
    from ._aiohttp_sender import AiohttpSender

__all__ = ["SWEEP_INTERVAL_S", "ForwardingClient", "LeanConnectionPool", "LeanTransport", "lean_transport"]

ForwardingClient = Literal["httpcore", "aiohttp"]
"""What the forwarding core sends with on a :class:`LeanTransport`: its httpcore pool or aiohttp."""

SWEEP_INTERVAL_S: Final = 1.0
"""How often at most every pooled connection is checked for expiry (the one handed out: always)."""


class LeanConnectionPool(httpcore.AsyncConnectionPool):
    """httpcore's pool with bookkeeping linear in its connections (see the module's docstring)."""

    def __init__(self, *args: Any, sweep_interval_s: float = SWEEP_INTERVAL_S, **kwargs: Any) -> None:
        """Take httpcore's arguments, and how often at most the whole pool is swept."""
        super().__init__(*args, **kwargs)
        self._sweep_interval_s = sweep_interval_s
        self._next_sweep = 0.0

    def _assign_requests_to_connections(self) -> list[AsyncConnectionInterface]:
        # Called by httpcore under its own lock whenever a request is added, finished or dropped.
        now = time.monotonic()
        closing: list[AsyncConnectionInterface] = []
        if now >= self._next_sweep:
            self._next_sweep = now + self._sweep_interval_s
            closing = self._sweep()
        for pool_request in self._requests:
            if pool_request.is_queued():
                closing += self._assign(pool_request)
        return closing

    def _sweep(self) -> list[AsyncConnectionInterface]:
        """Drop closed connections; return the expired ones and the idle ones beyond the bound."""
        closing: list[AsyncConnectionInterface] = []
        kept: list[AsyncConnectionInterface] = []
        idle = 0
        for connection in self._connections:
            if connection.is_closed():
                continue
            if connection.has_expired():
                closing.append(connection)
                continue
            if connection.is_idle():
                idle += 1
                if idle > self._max_keepalive_connections:
                    closing.append(connection)
                    continue
            kept.append(connection)
        self._connections = kept
        return closing

    def _assign(self, pool_request: AsyncPoolRequest) -> list[AsyncConnectionInterface]:
        """Give ``pool_request`` a connection if one can be had; return the connections to close."""
        origin = pool_request.request.url.origin
        closing: list[AsyncConnectionInterface] = []
        first_idle: AsyncConnectionInterface | None = None
        chosen: AsyncConnectionInterface | None = None
        for connection in self._connections:
            if connection.can_handle_request(origin) and connection.is_available():
                # The one connection handed out is always checked (keep-alive expiry, a peer that
                # closed it); the others only at the sweep, which is what kept the work per request flat.
                if connection.has_expired():
                    closing.append(connection)
                    continue
                chosen = connection
                break
            if first_idle is None and connection.is_idle():
                first_idle = connection
        for connection in closing:
            self._connections.remove(connection)
        if chosen is not None:
            pool_request.assign_to_connection(chosen)
        elif len(self._connections) < self._max_connections:
            self._open(pool_request, origin)
        elif first_idle is not None and first_idle not in closing:
            # At the cap: an idle connection to another origin makes room for this one.
            self._connections.remove(first_idle)
            closing.append(first_idle)
            self._open(pool_request, origin)
        return closing

    def _open(self, pool_request: AsyncPoolRequest, origin: httpcore.Origin) -> None:
        connection = self.create_connection(origin)
        self._connections.append(connection)
        pool_request.assign_to_connection(connection)


class LeanTransport(httpx.AsyncHTTPTransport):
    """httpx's transport on :class:`LeanConnectionPool`, whose pool the proxy also sends to directly.

    httpx offers no hook for the pool class, so the transport is built as usual and its pool (created
    from exactly the same arguments) is replaced by the lean one before any request. The forwarding
    core hands its requests to :attr:`pool` as httpcore's, without httpx's Request and Response, or,
    with ``forward_with="aiohttp"``, to an aiohttp session of its own (:attr:`sender`; see
    ``_aiohttp_sender``: the master's hop to its agents). Every other caller (the master's calls to its
    agents) goes through the transport as with any other.
    """

    def __init__(
        self,
        ssl_context: ssl.SSLContext,
        limits: httpx.Limits,
        *,
        sweep_interval_s: float = SWEEP_INTERVAL_S,
        forward_with: ForwardingClient = "httpcore",
    ) -> None:
        super().__init__(verify=ssl_context, trust_env=False, limits=limits)
        self._lean = LeanConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            sweep_interval_s=sweep_interval_s,
            network_backend=AsyncioNetworkBackend(),
        )
        self._pool = self._lean  # no public way to choose the pool class
        self._sender: AiohttpSender | None = None
        if forward_with == "aiohttp":
            # Imported here: an agent, which forwards with httpcore, never loads aiohttp (7 MB).
            from ._aiohttp_sender import AiohttpSender

            self._sender = AiohttpSender(ssl_context, limits)

    @property
    def pool(self) -> LeanConnectionPool:
        """The connection pool, shared by the transport and the forwarding core."""
        return self._lean

    @property
    def sender(self) -> AiohttpSender | None:
        """The aiohttp session the forwarding core sends with, when chosen; None: :attr:`pool`."""
        return self._sender

    async def aclose(self) -> None:
        if self._sender is not None:
            await self._sender.aclose()
        await super().aclose()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        # httpx's client leaves its transport through __aexit__, not aclose; httpx's own __aexit__
        # only closes the pool, as aclose does.
        await self.aclose()


def lean_transport(
    ssl_context: ssl.SSLContext,
    limits: httpx.Limits,
    *,
    sweep_interval_s: float = SWEEP_INTERVAL_S,
    forward_with: ForwardingClient = "httpcore",
) -> LeanTransport:
    """The httpx transport with :class:`LeanConnectionPool` in place of httpcore's pool."""
    return LeanTransport(ssl_context, limits, sweep_interval_s=sweep_interval_s, forward_with=forward_with)
