"""The master's own HTTP server (``mirbad_master._serving.Server``) on a free loopback port."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio
from starlette.types import ASGIApp

from mirbad_master._serving import Server, bind
from mirbad_router import ConnectionLimits


@asynccontextmanager
async def serve_master_server(
    app: ASGIApp,
    *,
    limits: ConnectionLimits | None = None,
    trusted_proxies: Sequence[str] = (),
    ssl_context: ssl.SSLContext | None = None,
) -> AsyncIterator[tuple[str, int]]:
    """Serve ``app`` as ``mirbad up`` serves its own and yield the host and port it listens on.

    At the end the server stops without waiting for open requests: a test may leave a connection
    half-sent on purpose. With ``ssl_context`` it serves TLS.
    """
    listener = bind("127.0.0.1", 0, "the test")
    host, port = listener.getsockname()[:2]
    server = Server.create(
        app, listener, limits=limits, trusted_proxies=trusted_proxies, ssl_context=ssl_context
    )
    async with anyio.create_task_group() as tasks:
        await server.start(tasks)
        try:
            yield host, port
        finally:
            server.force()
            await server.stop()
