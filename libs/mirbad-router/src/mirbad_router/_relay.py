"""Relaying an open upstream response to an ASGI client, chunk by chunk, until one side goes away."""

from __future__ import annotations

import json
import logging
from contextlib import suppress
from typing import Final

import anyio
import httpx
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mirbad_protocol import openai_error, single_errors

from ._headers import response_headers

__all__ = ["UpstreamRelay", "wait_for_disconnect"]

_log = logging.getLogger(__name__)

# Closing a response only closes a socket; the bound keeps a wedged peer from holding the task.
_CLOSE_TIMEOUT_S: Final = 5.0
_EVENT_STREAM: Final = "text/event-stream"
# What a client is told when the model's server dies mid-stream; the upstream's address stays out of it.
_STREAM_CUT_MESSAGE: Final = (
    "The model's server stopped in the middle of the response; the answer is incomplete."
)


async def wait_for_disconnect(receive: Receive) -> None:
    """Return when the ASGI server reports that the client has gone.

    Call it only once the request body has been read: any further request message is skipped.
    """
    while (await receive())["type"] != "http.disconnect":
        pass


class UpstreamRelay(Response):
    """A response that streams an open httpx response to the client as the upstream sends it.

    Status and headers (minus hop-by-hop ones) are copied; each upstream chunk becomes one ASGI body
    message, so nothing is buffered. The relay watches for the client leaving and then closes the
    upstream response, which closes its connection and tells the upstream to stop. The upstream
    response is always closed when the relay ends.

    Args:
        upstream: a response from ``client.send(request, stream=True)`` whose body is not read yet.
        url: the upstream URL, for the log line written when the upstream fails mid-response.

    Attributes:
        failure: why the upstream broke off mid-body, once it has; None while it has not.
    """

    def __init__(self, upstream: httpx.Response, url: str | None = None) -> None:
        # Response.__init__ would render a body; a relay has none of its own, so it sets the fields.
        self.status_code = upstream.status_code
        self.raw_headers = response_headers(upstream.headers.raw)
        self.background = None
        self._upstream = upstream
        self._url = url or str(upstream.request.url)
        self._event_stream = upstream.headers.get("content-type", "").startswith(_EVENT_STREAM)
        self._tail = b""
        self.failure: str | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            failure = await self._relay_until_client_leaves(receive, send)
        finally:
            with anyio.move_on_after(_CLOSE_TIMEOUT_S, shield=True):
                await self._upstream.aclose()
        if failure is not None:
            self.failure = failure
            _log.warning("upstream %s failed mid-response (%s)", self._url, failure)

    async def _relay_until_client_leaves(self, receive: Receive, send: Send) -> str | None:
        failures: list[str] = []
        with single_errors():
            async with anyio.create_task_group() as group:

                async def relay() -> None:
                    failure = await self._relay(send)
                    if failure is not None:
                        failures.append(failure)
                    group.cancel_scope.cancel()

                group.start_soon(relay)
                await wait_for_disconnect(receive)
                group.cancel_scope.cancel()
        return failures[0] if failures else None

    async def _relay(self, send: Send) -> str | None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        try:
            async for chunk in self._upstream.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                self._tail = (self._tail + chunk)[-4:]
        except httpx.ReadTimeout:
            return await self._broken_off("silent for longer than the idle timeout", send)
        except httpx.TransportError as exc:
            return await self._broken_off(str(exc) or type(exc).__name__, send)
        except OSError:
            return None  # an ASGI 2.4 server reports a client that left by failing the send
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return None

    async def _broken_off(self, failure: str, send: Send) -> str:
        if not self._event_stream:
            # Returning without the final body message makes the server drop the connection, so the
            # client sees an incomplete response instead of a short one that looks whole.
            return failure
        event = self._stream_error_event()
        with suppress(OSError):  # the client may have left as well
            await send({"type": "http.response.body", "body": event, "more_body": False})
        return failure

    def _stream_error_event(self) -> bytes:
        payload = openai_error(_STREAM_CUT_MESSAGE, code="upstream_failed", type="server_error")
        event = b"data: " + json.dumps(payload).encode() + b"\n\n"
        # A cut inside an event cannot be taken back; ending it first keeps the error event its own.
        at_boundary = not self._tail or self._tail.endswith((b"\n\n", b"\r\n\r\n"))
        return event if at_boundary else b"\n\n" + event
