"""A scripted HTTP/1.1 upstream on a raw loopback socket, for failures a framework server never makes.

Each connection is handled by a script that reads requests off it and writes bytes back, so a test can
cut a chunked stream in the middle, or close a keep-alive connection when its next request arrives
(exactly what a server that closes idle connections does to a client that reuses one at that moment).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
from anyio.abc import ByteReceiveStream, ByteStream, SocketAttribute
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.tls import TLSAttribute, TLSListener

WAIT_S = 20
_MAX_HEAD_BYTES = 65536


class _Recorded(ByteReceiveStream):
    """A receive stream that keeps every chunk as the socket delivered it (what went out in one send)."""

    def __init__(self, inner: ByteStream, chunks: list[bytes]) -> None:
        self._inner = inner
        self._chunks = chunks

    async def receive(self, max_bytes: int = 65536) -> bytes:
        data = await self._inner.receive(max_bytes)
        self._chunks.append(data)
        return data

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass
class Connection:
    """One accepted connection: read requests with :meth:`read_request`, write with :meth:`send`.

    Attributes:
        received: every chunk read off the connection, as the socket delivered it.
    """

    index: int
    stream: ByteStream
    buffered: BufferedByteReceiveStream
    received: list[bytes]
    requests: int = 0

    @property
    def peer_certificate(self) -> object:
        """The client's certificate on a TLS upstream (None without one, or without TLS)."""
        return self.stream.extra(TLSAttribute.peer_certificate, None)

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
    port: int
    connections: list[Connection] = field(default_factory=list)


@asynccontextmanager
async def raw_upstream(script: Script, *, tls: ssl.SSLContext | None = None) -> AsyncIterator[RawUpstream]:
    """Serve ``script`` on a free loopback port; each connection is closed once its script returns.

    With ``tls`` the upstream speaks TLS with that server context (``https``).
    """
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(SocketAttribute.local_port)
    upstream = RawUpstream(f"{'http' if tls is None else 'https'}://127.0.0.1:{port}", port)

    async def handle(stream: ByteStream) -> None:
        received: list[bytes] = []
        buffered = BufferedByteReceiveStream(_Recorded(stream, received))
        connection = Connection(len(upstream.connections), stream, buffered, received)
        upstream.connections.append(connection)
        async with stream:
            with anyio.move_on_after(WAIT_S):
                await script(connection)

    serving = listener if tls is None else TLSListener(listener, tls, standard_compatible=False)
    async with serving, anyio.create_task_group() as group:
        group.start_soon(serving.serve, handle)
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
