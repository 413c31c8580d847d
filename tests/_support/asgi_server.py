"""Run an ASGI app with a real uvicorn server on a free loopback port, inside the test's event loop.

The server task lives in the test's own task group, so an app and the test share anyio events: a test
can hold an upstream between two chunks and release it once it has seen the first, which checks that
nothing buffers without measuring any time.
"""

from __future__ import annotations

import random
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final, Literal

import anyio
import uvicorn
from starlette.types import ASGIApp

STARTUP_TIMEOUT_S: Final = 10.0
SHUTDOWN_TIMEOUT_S: Final = 10.0


def free_port() -> int:
    """A loopback port nothing listens on (bound to port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def free_port_block(size: int) -> int:
    """The first of ``size`` consecutive loopback ports nothing listens on, below the ephemeral range.

    A port from :func:`free_port` is one the kernel hands out to outgoing connections too, so a test
    that needs a given port to stay free (the lowest free port of a range) could lose it to any
    connection on the machine; below the ephemeral range only a listener takes one.
    """
    low = _ephemeral_low()
    for _ in range(200):
        start = random.randrange(_BLOCKS_FROM, low - size)
        if all(_bindable(port) for port in range(start, start + size)):
            return start
    raise RuntimeError(f"no {size} free consecutive ports below {low}")


_BLOCKS_FROM: Final = 20000


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class _Server(uvicorn.Server):
    """A uvicorn server that says when it listens with an event instead of a flag to poll."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = anyio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()


@asynccontextmanager
async def serve_asgi(
    app: ASGIApp,
    *,
    ssl_context: ssl.SSLContext | None = None,
    http: Literal["auto", "h11", "httptools"] = "auto",
    port: int = 0,
) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 and yield its base URL (``http://127.0.0.1:PORT``, no trailing slash).

    ``port`` 0 takes a free one; a test that must name the URL beforehand passes :func:`free_port`'s.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        http=http,
        ws="none",
        lifespan="off",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=2,
        ssl_context_factory=(lambda _config, _default: ssl_context) if ssl_context is not None else None,
    )
    server = _Server(config)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(server.serve, [sock])
            with anyio.fail_after(STARTUP_TIMEOUT_S):
                await server.ready.wait()
            try:
                yield f"{'https' if ssl_context is not None else 'http'}://127.0.0.1:{port}"
            finally:
                server.should_exit = True
                # Leaving the group waits for the server to finish; the deadline bounds that wait.
                group.cancel_scope.deadline = anyio.current_time() + SHUTDOWN_TIMEOUT_S
    except BaseExceptionGroup as failed:
        # A failing test body surfaces as its own exception, not wrapped by this helper's task group.
        if len(failed.exceptions) == 1:
            raise failed.exceptions[0] from failed
        raise
    finally:
        sock.close()


async def announce_body(base_url: str, path: str, content_length: int) -> tuple[int, bytes]:
    """POST headers announcing ``content_length`` bytes, send no body, and return (status, body).

    Only a server that refuses on the Content-Length alone can answer: it never receives the body.
    """
    port = int(base_url.split("/")[2].rsplit(":", 1)[1])
    head = (
        f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        f"Content-Length: {content_length}\r\n\r\n"
    )
    with anyio.fail_after(STARTUP_TIMEOUT_S):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(head.encode())
            received = b""
            while b"\r\n\r\n" not in received:
                received += await stream.receive()
            header_block, body = received.split(b"\r\n\r\n", 1)
            lines = header_block.decode("latin-1").split("\r\n")
            length = next(
                int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:")
            )
            while len(body) < length:
                body += await stream.receive()
    return int(lines[0].split(" ")[1]), body
