"""A master server for the flood tests of ``test_connection_floods.py``, in its own process.

``python -m tests.master._flood_server_child NOFILE LOOP CREDENTIALS LIMITS``: lowers ``RLIMIT_NOFILE``
to ``NOFILE``, serves ``/healthz``, ``POST /api/session`` and ``POST /v1/chat/completions`` (both read
their body) on a free loopback port, with mutual TLS when ``CREDENTIALS`` is a folder holding the
``agent`` credentials (``-`` for plain HTTP) and the :class:`~mirbad_router.ConnectionLimits` fields
given as JSON in ``LIMITS``; beside it, like the enroll listener, a second listener with at most
:data:`SIDE_CONNECTIONS` connections (TLS too when the first has it). Prints ``PORT SIDE_PORT`` once
both listen and stops when stdin closes. ``LOOP`` is
``asyncio`` or ``fast`` (the command line's loop: uvloop when installed).
"""

from __future__ import annotations

import json
import logging
import resource
import sys
from dataclasses import replace
from pathlib import Path

import anyio
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from mirbad_master._serving import Server, bind
from mirbad_protocol.pki import TlsCredentials
from mirbad_router import ConnectionLimits, run_event_loop


async def healthz(_request: Request) -> Response:
    return PlainTextResponse("ok")


async def read_body(request: Request) -> Response:
    try:
        return PlainTextResponse(str(len(await request.body())))
    except ClientDisconnect:  # the guard let a trickling body go: as the router and the enroll API do
        return Response(status_code=400)


APP = Starlette(
    routes=[
        Route("/healthz", healthz),
        Route("/api/session", read_body, methods=["POST"]),
        Route("/v1/chat/completions", read_body, methods=["POST"]),
    ]
)


SIDE_CONNECTIONS = 64  # the enroll listener's limit


async def main(credentials: str, limits: ConnectionLimits) -> None:
    listener, side = bind("127.0.0.1", 0, "the test"), bind("127.0.0.1", 0, "the test's side")
    tls = None if credentials == "-" else TlsCredentials.load(Path(credentials), "agent").server_context()
    servers = [
        Server.create(APP, listener, ssl_context=tls, limits=limits),
        Server.create(APP, side, ssl_context=tls, limits=replace(limits, max_connections=SIDE_CONNECTIONS)),
    ]
    async with anyio.create_task_group() as tasks:
        for server in servers:
            await server.start(tasks)
        print(listener.getsockname()[1], side.getsockname()[1], flush=True)
        await anyio.to_thread.run_sync(sys.stdin.read)  # until the test closes stdin
        for server in servers:
            await server.stop()


if __name__ == "__main__":
    nofile, loop, folder, fields = int(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    limits = ConnectionLimits(**fields)
    if loop == "fast":
        run_event_loop(main, folder, limits)
    else:
        anyio.run(main, folder, limits)
