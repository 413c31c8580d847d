"""A scripted HTTP/1.1 upstream on a raw loopback socket, for failures a framework server never makes.

Each connection is handled by a script that reads requests off it and writes bytes back, so a test can
cut a chunked stream in the middle, or close a keep-alive connection when its next request arrives
(exactly what a server that closes idle connections does to a client that reuses one at that moment).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

WAIT_S = 20
_MAX_HEAD_BYTES = 65536


@dataclass
class Connection:
    """One accepted connection: read requests with :meth:`read_request`, write with :meth:`send`."""

    index: int
    stream: SocketStream
    buffered: BufferedByteReceiveStream
    requests: int = 0

    async def read_request(self) -> bytes | None:
        """The next request's head and body, or None when the client closed the connection first."""
        try:
            head = await self.buffered.receive_until(b"\r\n\r\n", _MAX_HEAD_BYTES)
        except (anyio.IncompleteRead, anyio.EndOfStream):
            return None
        length = next(
            (
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            0,
        )
        body = await self.buffered.receive_exactly(length) if length else b""
        self.requests += 1
        return head + b"\r\n\r\n" + body

    async def send(self, data: bytes) -> None:
        """Write ``data`` as it is."""
        await self.stream.send(data)


Script = Callable[[Connection], Awaitable[None]]


@dataclass
class RawUpstream:
    """What the server saw: every connection, in the order they were accepted."""

    base_url: str
    connections: list[Connection] = field(default_factory=list)


@asynccontextmanager
async def raw_upstream(script: Script) -> AsyncIterator[RawUpstream]:
    """Serve ``script`` on a free loopback port; each connection is closed once its script returns."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(SocketAttribute.local_port)
    upstream = RawUpstream(f"http://127.0.0.1:{port}")

    async def handle(stream: SocketStream) -> None:
        connection = Connection(len(upstream.connections), stream, BufferedByteReceiveStream(stream))
        upstream.connections.append(connection)
        async with stream:
            with anyio.move_on_after(WAIT_S):
                await script(connection)

    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, handle)
        try:
            yield upstream
        finally:
            group.cancel_scope.cancel()


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def json_response(body: bytes, *, keep_alive: bool = True, status: bytes = b"200 OK") -> bytes:
    """A whole JSON response (200 unless ``status`` says otherwise) with a Content-Length."""
    connection = b"keep-alive" if keep_alive else b"close"
    return (
        b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\nconnection: " + connection + b"\r\n\r\n" + body
    )


SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
