"""Sending a request upstream and relaying the answer to an ASGI client until one side goes away."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterable, Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Final

import anyio
import httpcore
import httpx
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mirbad_protocol.openai import openai_error
from mirbad_protocol.support import single_errors

from ._headers import response_headers
from .exceptions import UpstreamError

__all__ = ["UpstreamAnswer", "UpstreamRelay", "wait_for_disconnect"]

_log = logging.getLogger(__name__)

CLIENT_CLOSED_REQUEST: Final = 499
"""The status recorded when the client left before the upstream answered (nginx's convention)."""

# Closing a response only closes a socket; the bound keeps a wedged peer from holding the task.
_CLOSE_TIMEOUT_S: Final = 5.0
_EVENT_STREAM_BYTES: Final = b"text/event-stream"
# What a client is told when the model's server dies mid-stream; the upstream's address stays out of it.
_STREAM_CUT_MESSAGE: Final = (
    "The model's server stopped in the middle of the response; the answer is incomplete."
)
# A wedged engine keeps its connection open and sends nothing: the client learns it was the silence.
_STREAM_SILENT_MESSAGE: Final = (
    "The model's server sent nothing for longer than the idle timeout; the answer is incomplete."
)


# What an upstream may raise, sending or once its headers came: httpx's errors (a client's own
# transport) and httpcore's (the proxy's pool, used without httpx's Request and Response).
TRANSPORT_FAILURES: Final = (
    httpx.TransportError,
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.TimeoutException,
    httpcore.UnsupportedProtocol,
)
_SILENT: Final = (httpx.ReadTimeout, httpcore.ReadTimeout)


@dataclass(frozen=True)
class UpstreamAnswer:
    """An upstream's answer, its body not read yet: what the relay needs of it.

    Attributes:
        status: the upstream's status code.
        headers: its raw response headers.
        body: the body as it arrives, chunk by chunk (httpx's or httpcore's errors when it breaks).
        close: closes the response (and its connection unless it can be reused).
    """

    status: int
    headers: list[tuple[bytes, bytes]]
    body: AsyncIterable[bytes]
    close: Callable[[], Awaitable[None]]

    @classmethod
    def of_httpx(cls, response: httpx.Response) -> UpstreamAnswer:
        """The answer of an httpx response opened with ``stream=True``."""
        return cls(response.status_code, response.headers.raw, response.aiter_raw(), response.aclose)


async def wait_for_disconnect(receive: Receive) -> None:
    """Return when the ASGI server reports that the client has gone.

    Call it only once the request body has been read: any further request message is skipped.
    """
    while (await receive())["type"] != "http.disconnect":
        pass


class UpstreamRelay(Response):
    """A response that sends a request upstream and streams the answer back, watching for the client.

    One watch for the client leaving covers the whole exchange, from sending the request to the last
    chunk of the answer (one task group per request): a client that goes away while the upstream is
    still working on the answer (a non-streamed generation sends no headers until it is done) or while
    it streams cancels the exchange, which closes the upstream connection and tells the upstream to
    stop. Status and headers (minus hop-by-hop ones) are copied; each upstream chunk becomes one ASGI
    body message, so nothing is buffered. The upstream response is always closed when the relay ends.

    Args:
        open_upstream: sends the request and returns the upstream's answer with its body unread;
            raises :class:`~mirbad_router.exceptions.UpstreamError` when no answer came.
        url: the upstream URL, for the log line written when the upstream fails mid-response.
        on_failure: the response to send instead when ``open_upstream`` raised; sent once the watch is
            over, so it may be any response.

    Attributes:
        failure: why the upstream broke off mid-body, once it has; None while it has not.
    """

    def __init__(
        self,
        open_upstream: Callable[[], Awaitable[UpstreamAnswer]],
        url: str,
        on_failure: Callable[[UpstreamError], Awaitable[Response]],
    ) -> None:
        # Response.__init__ would render a body; a relay has none of its own, so it sets the fields.
        # Until the upstream answers there is no status: a client that leaves before then left a 499.
        self.status_code = CLIENT_CLOSED_REQUEST
        self.raw_headers = []
        self.background = None
        self._open_upstream = open_upstream
        self._on_failure = on_failure
        self._url = url
        self._instead: Response | None = None
        self._event_stream = False
        self._tail = b""
        self.failure: str | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with single_errors():
            async with anyio.create_task_group() as group:

                async def exchange() -> None:
                    await self._exchange(send)
                    group.cancel_scope.cancel()

                group.start_soon(exchange)
                await wait_for_disconnect(receive)
                group.cancel_scope.cancel()
        if self._instead is not None:
            await self._instead(scope, receive, send)
        if self.failure is not None:
            _log.warning("upstream %s failed mid-response (%s)", self._url, self.failure)

    async def _exchange(self, send: Send) -> None:
        try:
            upstream = await self._open_upstream()
        except UpstreamError as error:
            self._instead = await self._on_failure(error)
            return
        try:
            self.failure = await self._relay(upstream, send)
        finally:
            with anyio.move_on_after(_CLOSE_TIMEOUT_S, shield=True):
                await upstream.close()

    async def _relay(self, upstream: UpstreamAnswer, send: Send) -> str | None:
        self.status_code = upstream.status
        self.raw_headers = response_headers(upstream.headers)
        self._event_stream = any(
            name == b"content-type" and value.startswith(_EVENT_STREAM_BYTES)
            for name, value in self.raw_headers
        )
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        try:
            async for chunk in upstream.body:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                self._tail = (self._tail + chunk)[-4:]
        except _SILENT:
            return await self._broken_off(
                "silent for longer than the idle timeout", send, _STREAM_SILENT_MESSAGE
            )
        except TRANSPORT_FAILURES as exc:
            return await self._broken_off(str(exc) or type(exc).__name__, send, _STREAM_CUT_MESSAGE)
        except OSError:
            return None  # an ASGI 2.4 server reports a client that left by failing the send
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return None

    async def _broken_off(self, failure: str, send: Send, message: str) -> str:
        if not self._event_stream:
            # Returning without the final body message makes the server drop the connection, so the
            # client sees an incomplete response instead of a short one that looks whole.
            return failure
        event = self._stream_error_event(message)
        with suppress(OSError):  # the client may have left as well
            await send({"type": "http.response.body", "body": event, "more_body": False})
        return failure

    def _stream_error_event(self, message: str) -> bytes:
        payload = openai_error(message, code="upstream_failed", type="server_error")
        event = b"data: " + json.dumps(payload).encode() + b"\n\n"
        # A cut inside an event cannot be taken back; ending it first keeps the error event its own.
        at_boundary = not self._tail or self._tail.endswith((b"\n\n", b"\r\n\r\n"))
        return event if at_boundary else b"\n\n" + event
