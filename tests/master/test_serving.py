"""The master's uvicorn servers: whose ``X-Forwarded-For`` is believed (only configured proxies')."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from mirbad_master._serving import Server, bind

pytestmark = pytest.mark.anyio


async def peer(request: Request) -> Response:
    return PlainTextResponse(f"{request.client.host if request.client else '?'} {request.url.scheme}")


@asynccontextmanager
async def serving(trusted_proxies: Sequence[str] = ()) -> AsyncIterator[httpx.AsyncClient]:
    listener = bind("127.0.0.1", 0, "the test")
    host, port = listener.getsockname()[:2]
    server = Server.create(Starlette(routes=[Route("/", peer)]), listener, trusted_proxies=trusted_proxies)
    async with anyio.create_task_group() as tasks:
        await server.start(tasks)
        try:
            async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=10) as client:
                yield client
        finally:
            await server.stop()


FORWARDED = {"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https"}


async def test_a_loopback_client_cannot_choose_its_address_by_default() -> None:
    async with serving() as client:
        answer = await client.get("/", headers=FORWARDED)

    assert answer.text == "127.0.0.1 http"


async def test_a_configured_proxy_is_believed() -> None:
    async with serving(["127.0.0.0/8"]) as client:
        answer = await client.get("/", headers=FORWARDED)

    assert answer.text == "203.0.113.9 https"
