"""The master's entry point sends ``/v1/…`` straight to the router and everything else to the whole app."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from mirbad_master._app import v1_first

pytestmark = pytest.mark.anyio


class _Marking:
    """A middleware that says on each response that it was passed through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def marked(message: dict[str, object]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message["headers"], (b"x-outer", b"1")]  # type: ignore[misc]
            await send(message)

        await self.app(scope, receive, marked)  # type: ignore[arg-type]


async def _echo(request: Request) -> Response:
    return JSONResponse({"path": request.path_params["path"], "root": request.scope["root_path"]})


def _app() -> FastAPI:
    app = FastAPI()
    app.add_middleware(_Marking)
    app.mount("/v1", Starlette(routes=[Route("/{path:path}", _echo, methods=["GET", "POST"])]))

    @app.get("/healthz")
    async def healthz() -> Response:
        return JSONResponse({"status": "ok"})

    return app


async def test_v1_requests_skip_the_outer_layers_and_reach_the_router_as_the_mount_would() -> None:
    transport = httpx.ASGITransport(app=v1_first(_app()))
    async with httpx.AsyncClient(transport=transport, base_url="http://master") as client:
        routed = await client.post("/v1/chat/completions")
        other = await client.get("/healthz")
        bare = await client.get("/v1")

    assert routed.json() == {"path": "chat/completions", "root": "/v1"}
    assert "x-outer" not in routed.headers
    assert other.json() == {"status": "ok"}
    assert other.headers["x-outer"] == "1"
    assert "x-outer" in bare.headers  # not below /v1/: the whole app decides (its redirect, or a 404)
