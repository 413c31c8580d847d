"""A master server under a low descriptor limit, for the descriptor tests of ``test_connections.py``.

``python -m tests.master._guarded_server_child NOFILE MAX_CONNECTIONS [LOOP]``: lowers ``RLIMIT_NOFILE``
to ``NOFILE``, serves a one-route app on a free loopback port (``MAX_CONNECTIONS`` 0: the default limit),
prints ``PORT`` once it listens, logs to stderr and stops when stdin closes. ``LOOP`` is ``asyncio``
(the default) or ``fast``: the loop the master's command line runs (uvloop when installed).
"""

from __future__ import annotations

import logging
import resource
import sys

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from mirbad_master._serving import Server, bind
from mirbad_router import ConnectionLimits, default_max_connections, run_event_loop


async def healthz(_request: Request) -> Response:
    return PlainTextResponse("ok")


async def main(max_connections: int) -> None:
    listener = bind("127.0.0.1", 0, "the test")
    limits = ConnectionLimits(
        header_timeout_s=60, max_connections=max_connections or default_max_connections()
    )
    server = Server.create(Starlette(routes=[Route("/healthz", healthz)]), listener, limits=limits)
    async with anyio.create_task_group() as tasks:
        await server.start(tasks)
        print(listener.getsockname()[1], flush=True)
        await anyio.to_thread.run_sync(sys.stdin.read)  # until the test closes stdin
        await server.stop()


if __name__ == "__main__":
    nofile, limit = int(sys.argv[1]), int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    if sys.argv[3:] == ["fast"]:
        run_event_loop(main, limit)
    else:
        anyio.run(main, limit)
