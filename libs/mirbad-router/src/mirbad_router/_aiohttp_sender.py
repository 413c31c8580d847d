"""The forwarding core's requests on an aiohttp session: the master's hop to its agents.

httpcore speaks HTTP/1.1 through h11, which parses and writes every message in Python; aiohttp's
client parses with its C parser and writes a request in one go. Measured alone against the same TLS
upstream (client CPU per request, the bench's completion), httpcore with mirbad_router's network
layer cost about 730-830 µs and aiohttp about 360-375 µs; per streamed event 32 against 20 µs. The
master routes every request of the fleet and already imports aiohttp (NiceGUI's server runs on it),
so its hop to the agents sends this way. An agent carries only its own node's traffic and keeps
httpcore: importing aiohttp would cost it 7 MB of its idle memory.

Only the forwarding core sends here (:func:`mirbad_router.forward`); the master's other calls to
its agents (telemetry, start, stop) keep going through httpx on the same transport. aiohttp's errors
are raised as httpcore's, so the core classifies them as it does httpcore's own: a refused or timed
out connection, an upstream silent past the idle timeout, a pooled connection the upstream closed
under the request (sent again when it was reused), an answer broken off mid-body.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final

import aiohttp
import httpcore
import httpx
import yarl

from ._relay import UpstreamAnswer
from ._send_attempt import NO_RESPONSE, PARSED_URLS, Attempt

# Not re-exported by the package: importing this module imports aiohttp, which an agent never loads.
# LeanTransport(forward_with="aiohttp") imports it when asked; its sender is LeanTransport.sender.
__all__: list[str] = []

# aiohttp adds these when a request lacks them; a proxy sends only what its client sent.
_NOT_ADDED: Final = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")


class AiohttpSender:
    """Sends the forwarding core's requests on one aiohttp session (created at the first request).

    Args:
        ssl_context: the TLS context for ``https`` upstreams (the master's mutual-TLS client context).
        limits: the pool's limits, as for httpx: no cap on connections, the keep-alive expiry.
    """

    def __init__(self, ssl_context: ssl.SSLContext, limits: httpx.Limits) -> None:
        self._ssl_context = ssl_context
        self._keepalive_s = limits.keepalive_expiry or 0.0
        self._max_connections = limits.max_connections or 0  # aiohttp's 0: no cap
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    def _open(self) -> aiohttp.ClientSession:
        # aiohttp binds its session to the running loop, so it is made at the first request.
        if self._closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        if self._session is None:
            tracing = aiohttp.TraceConfig()
            tracing.on_connection_create_end.append(_connected)
            connector = aiohttp.TCPConnector(
                ssl=self._ssl_context,
                limit=self._max_connections,
                limit_per_host=0,
                keepalive_timeout=self._keepalive_s,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
                trust_env=False,
                skip_auto_headers=_NOT_ADDED,
                trace_configs=[tracing],
                timeout=aiohttp.ClientTimeout(total=None),
            )
        return self._session

    async def send(
        self,
        method: str,
        url: str,
        headers: list[tuple[bytes, bytes]],
        content: bytes,
        timeout: Mapping[str, float | None],  # noqa: ASYNC109 (httpx's per-request timeouts, passed on)
        attempt: Attempt,
    ) -> UpstreamAnswer:
        """Send one request; its answer with the body unread (httpcore's errors when there is none).

        ``timeout`` is httpx's, as a dict: ``connect`` bounds getting a connection (from the pool or
        new), ``read`` each read of the answer (None: no idle timeout).
        """
        session = self._open()
        try:
            response = await session.request(
                method,
                _parsed_url(url),
                headers=[(name.decode("latin-1"), value.decode("latin-1")) for name, value in headers],
                data=content or None,
                allow_redirects=False,
                timeout=_timeout(timeout.get("connect"), timeout.get("read")),
                trace_request_ctx=attempt,
            )
        except aiohttp.ClientError as exc:
            raise _send_error(exc) from exc
        return UpstreamAnswer(response.status, list(response.raw_headers), _body(response), _closer(response))

    async def aclose(self) -> None:
        """Close the session and its connections."""
        self._closed = True
        if self._session is not None:
            await self._session.close()


async def _connected(session: Any, context: Any, params: Any) -> None:
    # The request opened a connection of its own: a failure on it is no stale keep-alive connection.
    attempt = context.trace_request_ctx
    if attempt is not None:
        attempt.connected = True


async def _body(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    try:
        async for chunk in response.content.iter_any():
            yield chunk
    except aiohttp.SocketTimeoutError as exc:
        raise httpcore.ReadTimeout(str(exc) or "read timeout") from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise httpcore.ReadError(str(exc) or type(exc).__name__) from exc


def _closer(response: aiohttp.ClientResponse) -> Callable[[], Awaitable[None]]:
    async def close() -> None:
        # A body read to its end leaves the connection to the pool; one cut short (the client left,
        # the relay was cancelled) closes it, so the upstream sees the request go and stops.
        if response.content.is_eof():
            response.release()
        else:
            response.close()

    return close


def _send_error(exc: aiohttp.ClientError) -> Exception:
    """The httpcore error the forwarding core classifies, for aiohttp's error before any answer."""
    reason = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpcore.ConnectTimeout(reason)
    if isinstance(exc, aiohttp.SocketTimeoutError):
        return httpcore.ReadTimeout(reason)
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.InvalidURL):
        return httpcore.ConnectError(reason)
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return httpcore.RemoteProtocolError(NO_RESPONSE)
    if isinstance(exc, aiohttp.ClientOSError):
        return httpcore.ReadError(reason)  # a reset: no answer came
    return httpcore.RemoteProtocolError(reason)  # the upstream answered, but not in HTTP


@functools.lru_cache(maxsize=PARSED_URLS)
def _parsed_url(url: str) -> yarl.URL:
    # The forwarding core has percent-encoded the path already (join_upstream_url).
    return yarl.URL(url, encoded=True)


@functools.lru_cache(maxsize=16)
def _timeout(connect_s: float | None, read_s: float | None) -> aiohttp.ClientTimeout:
    # sock_read bounds each read from the socket: exactly the core's idle timeout.
    return aiohttp.ClientTimeout(total=None, connect=connect_s, sock_read=read_s)
