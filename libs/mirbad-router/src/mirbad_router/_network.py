"""httpcore's network layer on asyncio's own streams, where the event loop does the TLS.

httpcore's default backend goes through anyio's streams: every read and write first yields to the
event loop once (anyio's checkpoint), enters a cancel scope for its timeout even when there is none,
and over TLS runs the record layer in Python (anyio's ``TLSStream`` feeds ``ssl.MemoryBIO`` in a loop).
The proxy reads once per streamed chunk and writes once per request, on every hop, so that cost is
paid per event; a profile of the master put anyio's TLS send to the agent at 14 % of its samples.

:class:`AsyncioNetworkBackend` is httpcore's documented extension point (``network_backend=``) filled
with asyncio's ``open_connection``: a read returns at once when the transport already holds data, a
write is a call into the transport, TLS is the event loop's (uvloop's in C where it runs), and a
timeout is set only where one is asked for. Outside asyncio (trio) it hands over to httpcore's own
anyio backend. The errors are httpcore's, as its backends raise them, so the pool and httpx map them
as before.
"""

from __future__ import annotations

import asyncio  # noqa: TID251 (the point of the module: asyncio's own streams and TLS)
import ssl
from collections.abc import Iterable
from typing import Any, Final

import anyio
import httpcore

__all__ = ["AsyncioNetworkBackend"]

# What one read asks the transport for at most (httpcore asks for 64 KiB).
_READ_LIMIT: Final = 2**16
# Writes held back to go out together stop being held at this size (a large body flows at once).
_COALESCE_BYTES: Final = 2**16
_SocketOption = tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]


class _AsyncioStream(httpcore.AsyncNetworkStream):
    """One connection as an asyncio reader and writer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._pending: list[bytes] = []
        self._pending_bytes = 0

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109 (httpcore's interface)
        if self._pending:
            await self._flush(None)
        try:
            if timeout is None:
                return await self._reader.read(max_bytes)
            with anyio.fail_after(timeout):
                return await self._reader.read(max_bytes)
        except TimeoutError as exc:
            raise httpcore.ReadTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.ReadError(str(exc) or type(exc).__name__) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109 (httpcore's interface)
        if not buffer:
            return
        # httpcore writes a request's head and its body apart; held until the next read (which waits
        # for the answer to both) they go out in one send, one wake-up of the peer instead of two.
        self._pending.append(buffer)
        self._pending_bytes += len(buffer)
        if self._pending_bytes >= _COALESCE_BYTES:
            await self._flush(timeout)

    async def _flush(self, timeout: float | None) -> None:  # noqa: ASYNC109 (httpcore's interface)
        buffer = b"".join(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        try:
            self._writer.write(buffer)
            if timeout is None:
                await self._writer.drain()
            else:
                with anyio.fail_after(timeout):
                    await self._writer.drain()
        except TimeoutError as exc:
            raise httpcore.WriteTimeout(str(exc)) from exc
        except (OSError, RuntimeError) as exc:  # RuntimeError: a write after the transport closed
            raise httpcore.WriteError(str(exc) or type(exc).__name__) from exc

    async def aclose(self) -> None:
        # The transport closes on its own from here: a plain socket at once, a TLS one after its
        # close_notify (bounded by the loop's shutdown timeout). Nothing waits for it: a request being
        # cancelled closes its connection this way, and a wedged peer must not hold that task.
        self._pending.clear()
        self._writer.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
    ) -> httpcore.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                await self._writer.start_tls(ssl_context, server_hostname=server_hostname)
        except TimeoutError as exc:
            self._writer.transport.abort()
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except (OSError, ssl.SSLError) as exc:  # ssl.SSLError is an OSError; named for the reader
            self._writer.transport.abort()
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        return self

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            # The transport reads eagerly, so the socket itself never looks readable: a peer that
            # closed an idle connection shows as the end of the stream, a broken one as closing.
            return self._reader.at_eof() or self._writer.transport.is_closing()
        if info == "client_addr":
            return self._writer.get_extra_info("sockname")
        if info == "server_addr":
            return self._writer.get_extra_info("peername")
        if info in ("ssl_object", "socket"):
            return self._writer.get_extra_info(info)
        return None


def _on_asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # trio: no asyncio loop runs
        return False
    return True


class AsyncioNetworkBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend on asyncio streams (see the module); anyio's outside asyncio."""

    def __init__(self) -> None:
        self._fallback = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[_SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        if not _on_asyncio():
            return await self._fallback.connect_tcp(host, port, timeout, local_address, socket_options)
        local = (local_address, 0) if local_address else None
        try:
            with anyio.fail_after(timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, local_addr=local, limit=_READ_LIMIT
                )
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        raw = writer.get_extra_info("socket")
        for option in socket_options or ():
            raw.setsockopt(*option)
        return _AsyncioStream(reader, writer)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[_SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        # The proxy's upstreams are TCP; a unix socket keeps httpcore's own backend.
        return await self._fallback.connect_unix_socket(path, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)
