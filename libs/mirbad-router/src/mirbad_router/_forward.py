"""The streaming reverse-proxy core shared by the master's router and the agent's model proxy.

A request body is read whole, up to 64 MiB, before anything goes upstream: a body over the limit is
refused (413) without the upstream ever seeing a byte of it, and a bad upstream can be reported with a
clean status instead of half a request. The response goes the other way without buffering: each chunk
the upstream sends is handed to the ASGI server as it arrives, so server-sent events flow token by
token. A client that goes away cancels the upstream request (vLLM and llama-server then abort the
generation); there is no read timeout unless the caller sets an idle timeout, because a long generation
may legitimately take many minutes. A request that fails on a pooled keep-alive connection before any
answer (the upstream closed it while it was idle) is sent once more: the body is in memory, and the
upstream never handled the first one. The pool opens a new connection unless another idle one is at hand.

Nothing here sleeps or polls; every test of this module runs against real loopback servers.
"""

from __future__ import annotations

import functools
import http.cookiejar
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

import httpcore
import httpx
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from ._headers import request_headers
from ._paths import check_proxy_path
from ._pool import ForwardingClient, LeanTransport, lean_transport
from ._relay import CLIENT_CLOSED_REQUEST, TRANSPORT_FAILURES, UpstreamAnswer, UpstreamRelay
from ._send_attempt import NO_RESPONSE, PARSED_URLS, Attempt
from .exceptions import (
    RequestTooLargeError,
    UpstreamConnectError,
    UpstreamError,
    UpstreamResponseError,
    UpstreamTimeoutError,
)

__all__ = [
    "CONNECT_TIMEOUT_S",
    "MAX_BODY_BYTES",
    "UPSTREAM_KEEPALIVE_S",
    "create_upstream_client",
    "forward",
    "join_upstream_url",
    "read_body",
]

_log = logging.getLogger(__name__)

MAX_BODY_BYTES: Final = 64 * 1024 * 1024
"""The largest request body the proxy forwards (64 MiB), chunked or with a Content-Length."""
UPSTREAM_KEEPALIVE_S: Final = 2.0
"""How long the proxy reuses an idle connection to a model server.

llama-server (cpp-httplib) and vLLM (uvicorn) close idle connections after 5 s, and httpx's default
reuse is 5 s too: a request sent just as the server closed got "Server disconnected without sending a
response". Well inside 5 s, a pooled connection is never the one being closed.
"""
CONNECT_TIMEOUT_S: Final = 10.0
"""How long to wait for a connection to the upstream (and for a free pooled connection)."""

# Characters left as they are when a decoded path is put back into a URL (RFC 3986 pchar and "/").
_PATH_SAFE: Final = "/:@!$&'()*+,;=-._~"
# How a send failed, from httpx (a client's own transport) or httpcore (the proxy's pool, sent to
# without httpx's Request and Response): no connection; no answer in time; a pooled connection the
# upstream may have closed under the request (sent again if it was reused). Any other of
# TRANSPORT_FAILURES: the upstream broke HTTP.
_CONNECT_FAILURES: Final = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.UnsupportedProtocol,
    httpcore.ConnectError,
    httpcore.ConnectTimeout,
    httpcore.PoolTimeout,
    httpcore.UnsupportedProtocol,
)
_TIMEOUTS: Final = (httpx.ReadTimeout, httpx.WriteTimeout, httpcore.ReadTimeout, httpcore.WriteTimeout)
_MAYBE_STALE: Final = (
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
    httpcore.RemoteProtocolError,
    httpcore.ReadError,
    httpcore.WriteError,
)
# The methods httpx gives "Content-Length: 0" when they carry no body (kept alike on the direct path).
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})


def create_upstream_client(
    *, ssl_context: ssl.SSLContext | None = None, forward_with: ForwardingClient = "httpcore"
) -> httpx.AsyncClient:
    """Create the shared client the proxy sends upstream requests with.

    It ignores proxy and certificate settings from the environment (a ``HTTP_PROXY`` must not reroute
    loopback traffic to a model), keeps no cookies (one client serves every caller), follows no
    redirects and puts no cap on concurrent connections (each streaming generation holds one).

    Args:
        ssl_context: the TLS context for ``https`` upstreams, such as the master's mutual-TLS client
            context for its agents; without one, ``https`` upstreams are verified with the default store.
        forward_with: what :func:`forward` sends with on this client (see :class:`LeanTransport`):
            its httpcore pool, or an aiohttp session (cheaper per request; it imports aiohttp).
    """
    limits = httpx.Limits(
        max_connections=None, max_keepalive_connections=64, keepalive_expiry=UPSTREAM_KEEPALIVE_S
    )
    context = ssl_context if ssl_context is not None else httpx.create_ssl_context(trust_env=False)
    return httpx.AsyncClient(
        # httpcore's own pool does work per request that grows with its connections (see _pool).
        transport=lean_transport(context, limits, forward_with=forward_with),
        trust_env=False,
        timeout=_timeout(None),
        cookies=http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[])),
        follow_redirects=False,
    )


def join_upstream_url(base_url: str, path: str, query: str = "") -> str:
    """Join an upstream base URL, a path below it and a raw query string.

    The path is checked again here, whoever checked it before: a ``..`` segment put back into a URL is
    resolved by httpx, and the request would leave ``base_url``.

    Args:
        base_url: the upstream's base, with or without a trailing slash (``http://127.0.0.1:8001/``).
        path: the decoded path below the base (``v1/chat/completions``); it is percent-encoded again.
        query: the raw query string without ``?`` (empty for none).

    Raises:
        UnsafeProxyPathError: ``path`` has a dot segment, a backslash or an encoded separator
            (see :func:`check_proxy_path`).
    """
    check_proxy_path(path)
    url = base_url.rstrip("/") + "/" + quote(path.lstrip("/"), safe=_PATH_SAFE)
    return f"{url}?{query}" if query else url


async def read_body(request: Request, *, limit: int = MAX_BODY_BYTES) -> bytes:
    """Read the whole request body, refusing one over ``limit`` bytes.

    A Content-Length over the limit is refused before a byte is read; a chunked body is refused as soon
    as it crosses the limit.

    Raises:
        RequestTooLargeError: the body is (or announces itself as) larger than ``limit``.
        starlette.requests.ClientDisconnect: the client went away while sending it.
    """
    declared = _declared_length(request)
    if declared is not None and declared > limit:
        raise RequestTooLargeError(limit, declared)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestTooLargeError(limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def forward(
    request: Request,
    url: str,
    client: httpx.AsyncClient,
    *,
    on_failure: Callable[[UpstreamError], Awaitable[Response]],
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
    idle_timeout_s: float | None = None,
    limit: int = MAX_BODY_BYTES,
) -> Response:
    """Read ``request``'s body and return the response that sends it to ``url`` and streams the answer.

    The returned response must be returned from the endpoint: the request goes upstream when the ASGI
    server calls it, and one watch for the client leaving covers both the send and the relay (see
    :class:`UpstreamRelay`). When the upstream cannot be reached, times out or breaks HTTP before its
    headers, ``on_failure`` is called with the error and its response goes to the client instead. If
    the upstream fails after its headers were relayed, the client connection is closed without
    completing the body, so the client sees a truncated response rather than a silently shortened one.

    Args:
        request: the incoming request; its method, headers (minus hop-by-hop ones) and body are sent.
        url: the full upstream URL, query included (see :func:`join_upstream_url`).
        client: the shared upstream client (see :func:`create_upstream_client`).
        on_failure: the response for an :class:`~mirbad_router.exceptions.UpstreamError` before any
            answer: :class:`~mirbad_router.exceptions.UpstreamConnectError` (no connection),
            :class:`~mirbad_router.exceptions.UpstreamTimeoutError` (no response headers within
            ``idle_timeout_s``) or :class:`~mirbad_router.exceptions.UpstreamResponseError` (the
            upstream closed the connection or broke HTTP). Not called when the client left first.
        headers: headers to add upstream, each replacing the client's header of the same name.
        body: the body, when the caller has already read it with :func:`read_body` (the router reads
            the JSON to find the model); ``None`` reads it here.
        idle_timeout_s: end the request when the upstream stays silent this long (``None``: never).
        limit: the largest body forwarded.

    Raises:
        RequestTooLargeError: the body is over ``limit``; the upstream was not contacted.
    """
    try:
        content = await read_body(request, limit=limit) if body is None else body
    except ClientDisconnect:
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    outgoing = _Outgoing(
        request.method,
        url,
        request_headers(request.headers.raw, headers),
        content,
        _timeout(idle_timeout_s).as_dict(),
    )

    async def open_upstream() -> UpstreamAnswer:
        # A non-streaming generation sends no headers until it is done; the relay's watch cancels
        # this send when the client leaves meanwhile, which closes the connection and aborts it.
        try:
            return await _send_again_if_stale(client, outgoing)
        except TRANSPORT_FAILURES as exc:
            raise _upstream_error(url, exc) from exc

    return UpstreamRelay(open_upstream, url, on_failure)


@dataclass(frozen=True)
class _Outgoing:
    """An upstream request that can be sent twice: its body is in memory."""

    method: str
    url: str
    headers: list[tuple[bytes, bytes]]
    content: bytes
    timeout: dict[str, float | None]

    def build(self, attempt: Attempt) -> httpx.Request:
        """The request as httpx's Request, for a client's own transport."""
        extensions = {"timeout": self.timeout, "trace": attempt.trace}
        return httpx.Request(
            self.method,
            _parsed_url(self.url),
            headers=self.headers,
            content=self.content,
            extensions=extensions,
        )

    def build_core(self, attempt: Attempt) -> httpcore.Request:
        """The same request as httpcore's, with the Host and Content-Length httpx would give it."""
        target = _core_target(self.url)
        if self.content:
            headers = [target.host, *self.headers, (b"Content-Length", str(len(self.content)).encode())]
        elif self.method in _BODY_METHODS:
            headers = [target.host, (b"Content-Length", b"0"), *self.headers]
        else:
            headers = [target.host, *self.headers]
        extensions = {"timeout": self.timeout, "trace": attempt.trace}
        return httpcore.Request(
            self.method, target.url, headers=headers, content=self.content, extensions=extensions
        )


@functools.lru_cache(maxsize=PARSED_URLS)
def _parsed_url(url: str) -> httpx.URL:
    # httpx parses a URL string in Python, about half the cost of building its Request; a proxy sends
    # the same few URLs (a model's base and path) again and again, and an httpx.URL never changes.
    return httpx.URL(url)


@dataclass(frozen=True)
class _CoreTarget:
    url: httpcore.URL
    host: tuple[bytes, bytes]


@functools.lru_cache(maxsize=PARSED_URLS)
def _core_target(url: str) -> _CoreTarget:
    # httpx's parse (IDNA, percent-encoding), handed to httpcore as httpx's transport hands it; the
    # Host header as httpx writes it (the port only when it is not the scheme's default: the netloc).
    parsed = _parsed_url(url)
    core = httpcore.URL(
        scheme=parsed.raw_scheme, host=parsed.raw_host, port=parsed.port, target=parsed.raw_path
    )
    return _CoreTarget(core, (b"Host", parsed.netloc))


async def _send_again_if_stale(client: httpx.AsyncClient, outgoing: _Outgoing) -> UpstreamAnswer:
    # An upstream may close an idle keep-alive connection just as the pool hands it out; the request
    # then fails before any answer although the upstream never handled it. On a connection this request
    # opened itself, the same failure means the upstream is broken, so only a reused one is retried.
    attempt = Attempt()
    try:
        return await _send(client, outgoing, attempt)
    except _MAYBE_STALE as exc:
        if attempt.connected or not _before_any_answer(exc):
            raise
        _log.info("%s closed a pooled connection before answering (%s); sending again", outgoing.url, exc)
    return await _send(client, outgoing, Attempt())


async def _send(client: httpx.AsyncClient, outgoing: _Outgoing, attempt: Attempt) -> UpstreamAnswer:
    """Send ``outgoing`` on ``client``'s transport, without the steps a proxy has no use for.

    Around its transport, httpx's ``send`` runs the auth flow, the redirect loop, the cookie jar (which
    refuses every cookie here) and a log call, all per request: about 150-300 µs of the client's CPU
    per request on the bench machine, 12-22 % of its cost. The proxy's clients have no auth and follow
    no redirects, so the transport's answer is the one ``send`` would return.

    On the proxy's own transport (:class:`LeanTransport`) the request goes to its aiohttp sender when
    it has one (the master's hop to its agents), else to its httpcore pool as
    httpcore's Request, and the answer is read from httpcore's Response: httpx's Request and Response
    objects around them (headers, URL and stream wrappers, its exception mapping) cost about a fifth
    of a hop's CPU per request, for nothing the proxy reads. Errors are then httpcore's, which the
    callers classify alongside httpx's. Any other transport (a test's, a custom mount) gets httpx's
    Request as ``send`` would build it.
    """
    if client.is_closed:
        raise RuntimeError("Cannot send a request, as the client has been closed.")
    transport = client._transport_for_url(_parsed_url(outgoing.url))  # the client's mounts, as send chooses
    if isinstance(transport, LeanTransport) and transport.sender is not None:
        sender = transport.sender
        return await sender.send(
            outgoing.method, outgoing.url, outgoing.headers, outgoing.content, outgoing.timeout, attempt
        )
    if isinstance(transport, LeanTransport):
        response = await transport.pool.handle_async_request(outgoing.build_core(attempt))
        body: Any = response.stream  # httpcore's pool stream: an async iterable of bytes
        return UpstreamAnswer(response.status, response.headers, body, response.aclose)
    request = outgoing.build(attempt)
    try:
        answer = await transport.handle_async_request(request)
    except httpx.RequestError as exc:
        exc.request = request
        raise
    answer.request = request
    return UpstreamAnswer.of_httpx(answer)


def _before_any_answer(exc: Exception) -> bool:
    # h11 reports a connection closed before the first response byte in exactly these words; other
    # protocol errors mean the upstream did answer, badly. A reset or a failed write leaves no answer.
    if isinstance(exc, httpx.RemoteProtocolError | httpcore.RemoteProtocolError):
        return str(exc).startswith(NO_RESPONSE)
    return True


def _upstream_error(url: str, exc: Exception) -> UpstreamError:
    reason = str(exc) or type(exc).__name__
    if isinstance(exc, _CONNECT_FAILURES):
        return UpstreamConnectError(url, reason)
    if isinstance(exc, _TIMEOUTS):
        return UpstreamTimeoutError(url, "no response within the idle timeout")
    return UpstreamResponseError(url, reason)


def _timeout(idle_timeout_s: float | None) -> httpx.Timeout:
    # httpx's read timeout bounds each read from the socket, which is exactly an idle timeout.
    return httpx.Timeout(idle_timeout_s, connect=CONNECT_TIMEOUT_S, pool=CONNECT_TIMEOUT_S)


def _declared_length(request: Request) -> int | None:
    value = request.headers.get("content-length", "").strip()
    return int(value) if value.isascii() and value.isdigit() else None
