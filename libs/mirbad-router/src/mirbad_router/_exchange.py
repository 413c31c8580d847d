"""One forwarded exchange watched from the side: did it complete, with which status, using how many tokens.

The forwarding core's relay streams the upstream's answer; this wrapper sits between it and the ASGI
server, sees every message go by, reads usage from the body (and leaves out the usage chunk the router
asked for itself), and reports the outcome once the exchange is over, however it ended.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

import anyio
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from ._errors import hide_addresses_in_error_body
from ._relay import UpstreamRelay
from ._usage import JsonUsageTap, SseUsageTap, Usage

__all__: list[str] = []

# Reporting runs after the client left too (shielded), so a slow sink gets a bound.
_REPORT_TIMEOUT_S: Final = 10.0
# An upstream's JSON error is held whole so URLs can be taken out of it; a larger one passes unexamined.
_MAX_ERROR_BODY_BYTES: Final = 64 * 1024


@dataclass(frozen=True)
class ExchangeOutcome:
    """How a forwarded exchange ended.

    Attributes:
        status: the status sent to the client.
        completed: whether the whole body reached the client (False when either side broke off).
        usage: the tokens the response reported, when it reported them.
    """

    status: int
    completed: bool
    usage: Usage | None = None

    @property
    def failed(self) -> bool:
        """Whether the stats count it as failed: not 2xx, or not delivered whole."""
        return not self.completed or not 200 <= self.status < 300


class ObservedResponse(Response):
    """Wraps a response to watch its messages and report an :class:`ExchangeOutcome` at the end.

    Args:
        inner: the response that does the work (the forwarding relay).
        report: called once with the outcome, even when the client left (shielded, bounded).
        read_usage: whether to read usage from a 2xx JSON or event-stream body.
        drop_usage_only: whether to leave out the usage-only chunk of an event stream (the router
            asked for it; the client did not).
    """

    def __init__(
        self,
        inner: Response,
        report: Callable[[ExchangeOutcome], Awaitable[None]],
        *,
        read_usage: bool,
        drop_usage_only: bool,
    ) -> None:
        self.status_code = inner.status_code
        self.raw_headers = inner.raw_headers
        self.background = None
        self._inner = inner
        self._report = report
        self._read_usage = read_usage
        self._drop = drop_usage_only
        self._status = inner.status_code
        self._completed = False
        self._tap: SseUsageTap | JsonUsageTap | None = None
        self._held_start: Message | None = None
        self._held_body = bytearray()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def watched(message: Message) -> None:
            await self._pass(message, send)

        try:
            await self._inner(scope, receive, watched)
        finally:
            # A stream cut by the upstream ends whole, with an error event, but it failed all the same.
            cut = isinstance(self._inner, UpstreamRelay) and self._inner.failure is not None
            completed = self._completed and not cut
            outcome = ExchangeOutcome(self._status, completed, self._tap.usage if self._tap else None)
            with anyio.move_on_after(_REPORT_TIMEOUT_S, shield=True):
                await self._report(outcome)

    async def _pass(self, message: Message, send: Send) -> None:
        if self._held_start is not None and message["type"] == "http.response.body":
            await self._hold_error(message, send)
            return
        if message["type"] == "http.response.start":
            self._status = message["status"]
            if _small_json_error(message):
                self._held_start = message
                return
            message = self._start(message)
        elif message["type"] == "http.response.body" and self._tap is not None:
            more = message.get("more_body", False)
            body = self._tap.feed(message.get("body", b""))
            if not more:
                body += self._tap.finish()
            elif not body:
                return  # all held back (an unfinished event) or left out
            message = {**message, "body": body}
        await send(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self._completed = True

    async def _hold_error(self, message: Message, send: Send) -> None:
        assert self._held_start is not None
        self._held_body += message.get("body", b"")
        more = message.get("more_body", False)
        if more and len(self._held_body) <= _MAX_ERROR_BODY_BYTES:
            return
        body = bytes(self._held_body) if more else hide_addresses_in_error_body(bytes(self._held_body))
        headers = [(n, v) for n, v in self._held_start.get("headers", []) if n.lower() != b"content-length"]
        if not more:
            headers.append((b"content-length", str(len(body)).encode()))
        start, self._held_start = {**self._held_start, "headers": headers}, None
        self._held_body.clear()
        await send(start)
        await send({"type": "http.response.body", "body": body, "more_body": more})
        self._completed = not more

    def _start(self, message: Message) -> Message:
        headers: list[tuple[bytes, bytes]] = list(message.get("headers", []))
        content_type = next((value for name, value in headers if name.lower() == b"content-type"), b"")
        if not self._read_usage or not 200 <= self._status < 300:
            return message
        if content_type.startswith(b"text/event-stream"):
            self._tap = SseUsageTap(drop_usage_only=self._drop)
            if self._drop:
                # Leaving a chunk out changes the length.
                headers = [(name, value) for name, value in headers if name.lower() != b"content-length"]
        elif content_type.startswith(b"application/json"):
            self._tap = JsonUsageTap()
        return {**message, "headers": headers}


def _small_json_error(start: Message) -> bool:
    if start["status"] < 400:
        return False
    headers = {name.lower(): value for name, value in start.get("headers", [])}
    length = headers.get(b"content-length", b"0")
    declared = int(length) if length.isdigit() else 0
    return (
        headers.get(b"content-type", b"").startswith(b"application/json")
        and declared <= _MAX_ERROR_BODY_BYTES
    )
