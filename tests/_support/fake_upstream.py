"""A raw ASGI app standing in for a model server behind a proxy, steered by anyio events.

Paths (matched on their end, so a proxy that forwards only under ``/v1/`` reaches them too):
- ``/sse``: an event stream of ``CHUNKS`` events; event ``i`` (after the first) is sent only once the
  test sets ``release[i]``, so a test proves a chunk arrived before the next one exists.
- ``/first-then-wait``: headers and one event, then silence until the client disconnects.
- ``/wait-before-headers``: silence, without headers, until the client disconnects.
- anything else: a JSON echo of the request (method, path, raw path, query, headers, body size and hash).

Every wait is bounded by ``WAIT_S``; ``disconnected`` is set when the upstream sees its client leave.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Final

import anyio
from starlette.types import Receive, Scope, Send

WAIT_S: Final = 10.0
CHUNKS: Final = 3

SSE_HEADERS: Final = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"connection", b"x-upstream-private"),
    (b"x-upstream-private", b"only for the next hop"),
    (b"keep-alive", b"timeout=5"),
    (b"proxy-authenticate", b"Basic"),
    (b"x-kept", b"yes"),
    (b"set-cookie", b"a=1"),
    (b"set-cookie", b"b=2"),
]


def event(index: int) -> bytes:
    """The bytes of SSE event ``index``."""
    return f"data: {index}\n\n".encode()


@dataclass
class SeenRequest:
    """A request as the upstream received it."""

    method: str
    path: str
    query: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> list[str]:
        """Every value of a header (name compared in lower case)."""
        return [value for key, value in self.headers if key == name.lower()]


@dataclass
class FakeUpstream:
    """The app; its attributes are what the test steers and inspects."""

    requests: list[SeenRequest] = field(default_factory=list)
    release: list[anyio.Event] = field(default_factory=lambda: [anyio.Event() for _ in range(CHUNKS)])
    arrived: anyio.Event = field(default_factory=anyio.Event)
    disconnected: anyio.Event = field(default_factory=anyio.Event)
    sent: list[int] = field(default_factory=list)
    port: int = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        body = await _read_body(receive)
        seen = SeenRequest(
            method=scope["method"],
            path=scope["path"],
            query=scope["query_string"].decode("latin-1"),
            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]],
            body=body,
        )
        self.requests.append(seen)
        self.arrived.set()
        if scope["path"].endswith("/sse"):
            await self._sse(send)
        elif scope["path"].endswith("/first-then-wait"):
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await send({"type": "http.response.body", "body": event(0), "more_body": True})
            await self._wait_for_disconnect(receive)
        elif scope["path"].endswith("/wait-before-headers"):
            await self._wait_for_disconnect(receive)
        else:
            await _echo(scope, seen, send)

    async def _sse(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        for index in range(CHUNKS):
            if index:
                with anyio.fail_after(WAIT_S):
                    await self.release[index].wait()
            await send({"type": "http.response.body", "body": event(index), "more_body": True})
            self.sent.append(index)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _wait_for_disconnect(self, receive: Receive) -> None:
        with anyio.fail_after(WAIT_S):
            while (await receive())["type"] != "http.disconnect":
                pass
        self.disconnected.set()


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _echo(scope: Scope, seen: SeenRequest, send: Send) -> None:
    payload = {
        "method": seen.method,
        "path": seen.path,
        "rawPath": scope["raw_path"].decode("latin-1"),
        "query": seen.query,
        "headers": seen.headers,
        "bodyLength": len(seen.body),
        "bodySha256": hashlib.sha256(seen.body).hexdigest(),
    }
    data = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": data, "more_body": False})
