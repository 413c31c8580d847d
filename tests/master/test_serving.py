"""The master's uvicorn servers: whose ``X-Forwarded-For`` is believed (only configured proxies')."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from tests._support.master_server import serve_master_server

pytestmark = pytest.mark.anyio


async def peer(request: Request) -> Response:
    return PlainTextResponse(f"{request.client.host if request.client else '?'} {request.url.scheme}")


@asynccontextmanager
async def serving(trusted_proxies: Sequence[str] = ()) -> AsyncIterator[httpx.AsyncClient]:
    app = Starlette(routes=[Route("/", peer)])
    async with (
        serve_master_server(app, trusted_proxies=trusted_proxies) as (host, port),
        httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=10) as client,
    ):
        yield client


FORWARDED = {"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https"}


async def test_a_loopback_client_cannot_choose_its_address_by_default() -> None:
    async with serving() as client:
        answer = await client.get("/", headers=FORWARDED)

    assert answer.text == "127.0.0.1 http"


async def test_a_configured_proxy_is_believed() -> None:
    async with serving(["127.0.0.0/8"]) as client:
        answer = await client.get("/", headers=FORWARDED)

    assert answer.text == "203.0.113.9 https"
