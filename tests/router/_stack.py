"""The router under test: the real `openai` client -> uvicorn -> a host app mounting the router at /v1
-> the router -> a real upstream (tests/router/_upstream.py), all in the test's event loop."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
from openai import AsyncOpenAI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route
from tests._support.asgi_server import serve_asgi
from tests._support.monotonic import FakeMonotonic
from tests.router._upstream import FakeOpenAI

from mirbad_router import RateLimiter, RouterStats, Upstream, create_router_app, create_upstream_client
from mirbad_router.testing import FakeKeyStore, FakeMaintenanceGate, FakeResolver

KEY = "sk-test-key"
WAIT_S = 20


class SignallingStats(RouterStats):
    """Router stats that also announce each finished request, so a test can wait for one."""

    def __init__(self) -> None:
        super().__init__()
        self.ended_send, self.ended = anyio.create_memory_object_stream[str](math.inf)

    def end(self, served_name: str, *, failed: bool) -> None:
        super().end(served_name, failed=failed)
        self.ended_send.send_nowait(served_name)


@dataclass
class Stack:
    base_url: str
    upstream: FakeOpenAI
    upstream_base: str
    upstream_client: httpx.AsyncClient
    resolver: FakeResolver
    keys: FakeKeyStore
    gate: FakeMaintenanceGate
    stats: SignallingStats
    clock: FakeMonotonic

    def client(self, key: str = KEY) -> AsyncOpenAI:
        return AsyncOpenAI(base_url=f"{self.base_url}/v1", api_key=key, max_retries=0)

    def add_model(self, served_name: str, **options: Any) -> None:
        upstream = Upstream(
            f"{self.upstream_base}/", self.upstream_client, {"Authorization": "Bearer instance-key"}
        )
        self.resolver.add(served_name, upstream, **options)


@asynccontextmanager
async def router_stack(
    *, resolver: FakeResolver | None = None, keys_required: bool = True, **app_options: Any
) -> AsyncIterator[Stack]:
    upstream = FakeOpenAI()
    resolver = resolver or FakeResolver()
    keys = FakeKeyStore(required=keys_required)
    keys.add_key(KEY)
    gate, stats, clock = FakeMaintenanceGate(), SignallingStats(), FakeMonotonic()
    router = create_router_app(
        resolver, keys, gate, stats, limiter=RateLimiter(clock=clock), poll_interval_s=0.01, **app_options
    )

    async def healthz(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    # A bare host app, as the master is: its own routes plus the router mounted at /v1.
    host = Starlette(routes=[Route("/healthz", healthz), Mount("/v1", app=router)])
    async with (
        serve_asgi(upstream.app) as upstream_base,
        create_upstream_client() as upstream_client,
        serve_asgi(host) as base_url,
    ):
        stack = Stack(base_url, upstream, upstream_base, upstream_client, resolver, keys, gate, stats, clock)
        stack.add_model("tiny", created=1700000000)
        try:
            yield stack
        finally:
            upstream.step(100)  # never leave a stepped stream waiting
            await upstream.close()
            stats.ended_send.close()
            stats.ended.close()


def chat(client: AsyncOpenAI, model: str = "tiny", **options: Any) -> Any:
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "say hello to me"}], **options
    )
