"""A connection pool for the proxy whose work per request does not grow with the connections it holds.

httpcore's pool (1.0) runs its bookkeeping on every request and every release: for each idle
connection it counts *all* the connections again (a list built per idle connection: quadratic in the
pool's size), and for each queued request it builds two lists of every connection. The count also
compares all connections, not the idle ones, with ``max_keepalive_connections``, so once more requests
are in flight than that bound, each release closes an idle connection that the next request has to
open again (a TLS handshake, between the master and an agent). A profile of the master at 64
concurrent requests put that method first, above everything the router itself does.

:class:`LeanConnectionPool` keeps httpcore's connections, its request queue and its locking, and
replaces only that method: one pass that drops closed and expired connections and closes idle ones
beyond ``max_keepalive_connections`` idle ones, then for each queued request the first connection
that can take it (stopping there). The public behaviour is httpcore's own: the same limits, the same
keep-alive expiry, the same checks of a connection before it is reused.
"""

from __future__ import annotations

import ssl

# httpcore comes with httpx (which pins it to 1.*); the pool subclasses its connection pool.
import httpcore
import httpx
from httpcore import AsyncConnectionInterface
from httpcore._async.connection_pool import AsyncPoolRequest

__all__ = ["LeanConnectionPool", "lean_transport"]


class LeanConnectionPool(httpcore.AsyncConnectionPool):
    """httpcore's pool with bookkeeping linear in its connections (see the module's docstring)."""

    def _assign_requests_to_connections(self) -> list[AsyncConnectionInterface]:
        # Called by httpcore under its own lock whenever a request is added, finished or dropped.
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
        for pool_request in self._requests:
            if pool_request.is_queued():
                closing += self._assign(pool_request)
        return closing

    def _assign(self, pool_request: AsyncPoolRequest) -> list[AsyncConnectionInterface]:
        """Give ``pool_request`` a connection if one can be had; return a connection to close, if any."""
        origin = pool_request.request.url.origin
        first_idle: AsyncConnectionInterface | None = None
        for connection in self._connections:
            if connection.can_handle_request(origin) and connection.is_available():
                pool_request.assign_to_connection(connection)
                return []
            if first_idle is None and connection.is_idle():
                first_idle = connection
        if len(self._connections) < self._max_connections:
            self._open(pool_request, origin)
            return []
        if first_idle is not None:
            # At the cap: an idle connection to another origin makes room for this one.
            self._connections.remove(first_idle)
            self._open(pool_request, origin)
            return [first_idle]
        return []

    def _open(self, pool_request: AsyncPoolRequest, origin: httpcore.Origin) -> None:
        connection = self.create_connection(origin)
        self._connections.append(connection)
        pool_request.assign_to_connection(connection)


def lean_transport(ssl_context: ssl.SSLContext, limits: httpx.Limits) -> httpx.AsyncHTTPTransport:
    """Httpx's transport with :class:`LeanConnectionPool` in place of httpcore's pool.

    httpx offers no hook for the pool class, so the transport is built as usual and its pool (created
    from exactly these arguments) is replaced by the lean one before any request.
    """
    transport = httpx.AsyncHTTPTransport(verify=ssl_context, trust_env=False, limits=limits)
    transport._pool = LeanConnectionPool(
        ssl_context=ssl_context,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
    )
    return transport
