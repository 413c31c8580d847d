"""One HTTP request to an ASGI app in the same process, its answer read while it is being sent.

httpx's ``ASGITransport`` collects the whole body before it returns, which would turn the Playground's
streamed answer into one late block; this runs the app in a task and hands over each body chunk as the
app sends it. Disconnecting (leaving the context) cancels the app, as a browser closing the tab would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream
from starlette.types import ASGIApp, Message

__all__ = ["DEFAULT_IDLE_TIMEOUT_S", "AsgiAnswer", "asgi_request"]

DEFAULT_IDLE_TIMEOUT_S: Final = 120.0
"""The longest wait for the answer to begin, and then for each next chunk."""


@dataclass
class AsgiAnswer:
    """The answer of :func:`asgi_request`: status and headers at once, the body chunk by chunk.

    Attributes:
        status: the HTTP status.
        headers: the response headers, names lowercased.
    """

    status: int
    headers: dict[str, str]
    _messages: MemoryObjectReceiveStream[Message]
    _idle_timeout_s: float

    async def chunks(self) -> AsyncIterator[bytes]:
        """Each non-empty body chunk, as the app sends it.

        Raises:
            TimeoutError: no chunk arrived within the idle timeout.
        """
        while True:
            with anyio.fail_after(self._idle_timeout_s):
                try:
                    message = await self._messages.receive()
                except anyio.EndOfStream:
                    return  # the app ended without closing its body (it failed half way)
            if message["type"] != "http.response.body":
                continue
            body: bytes = message.get("body", b"")
            if body:
                yield body
            if not message.get("more_body", False):
                return

    async def read(self) -> bytes:
        """The whole (rest of the) body."""
        return b"".join([chunk async for chunk in self.chunks()])


@asynccontextmanager
async def asgi_request(
    app: ASGIApp,
    method: str,
    path: str,
    *,
    body: bytes = b"",
    headers: Sequence[tuple[str, str]] = (),
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
) -> AsyncIterator[AsgiAnswer]:
    """Send one request to ``app`` and yield its answer once the status line is known.

    Raises:
        TimeoutError: the app did not begin its answer within ``idle_timeout_s``.
        RuntimeError: the app ended without answering.
    """
    sender, messages = anyio.create_memory_object_stream[Message](max_buffer_size=64)
    disconnected = anyio.Event()
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> Message:
        if pending:
            return pending.pop()
        await disconnected.wait()  # the body was sent: the next event is the client leaving
        return {"type": "http.disconnect"}

    failures: list[Exception] = []

    async def run() -> None:
        async with sender:
            try:
                await app(_scope(method, path, body, headers), receive, sender.send)
            except Exception as exc:  # reported to the reader, who is waiting on the stream
                failures.append(exc)

    try:
        async with anyio.create_task_group() as tasks, messages:
            tasks.start_soon(run)
            try:
                with anyio.fail_after(idle_timeout_s):
                    start = await _response_start(messages, failures)
                headers_out = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in start["headers"]}
                yield AsgiAnswer(int(start["status"]), headers_out, messages, idle_timeout_s)
            finally:
                disconnected.set()
                tasks.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The app's task reports to the reader instead of raising, so a group holds the one error
        # of this side (a timeout, the reader's own): raise it as itself.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from group
        raise


async def _response_start(messages: MemoryObjectReceiveStream[Message], failures: list[Exception]) -> Message:
    while True:
        try:
            message = await messages.receive()
        except anyio.EndOfStream:
            cause = failures[0] if failures else None
            raise RuntimeError(f"the app ended without an answer: {cause or 'no reason given'}") from cause
        if message["type"] == "http.response.start":
            return message


def _scope(method: str, path: str, body: bytes, headers: Sequence[tuple[str, str]]) -> dict[str, Any]:
    raw = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers]
    raw += [(b"host", b"portal.local"), (b"content-length", str(len(body)).encode())]
    path_only, _, query = path.partition("?")
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method.upper(),
        "scheme": "http",
        "path": path_only,
        "raw_path": path_only.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": raw,
        "client": ("127.0.0.1", 0),
        "server": ("portal.local", 80),
        "state": {},
    }
