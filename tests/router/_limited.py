"""A router with one 50-token key in front of any upstream, and the three ways issue 31 spent past it.

Each attack runs in a window of its own (the limiter's clock is a stand-in the test moves by a minute)
and returns how many of its requests the router let through, so a test can assert that the defence
was exercised (at least one request went upstream) and what the upstream spent meanwhile.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
from starlette.applications import Starlette
from starlette.routing import Mount
from tests._support.asgi_server import serve_asgi
from tests._support.monotonic import FakeMonotonic
from tests.router._stack import WAIT_S, SignallingStats

from mirbad_router import RateLimiter, Upstream, create_router_app, create_upstream_client
from mirbad_router.testing import FakeKeyStore, FakeMaintenanceGate, FakeResolver

LIMIT = 50
"""The key's tokens per minute."""
KEY = "sk-fifty"
OPEN_KEY = "sk-open"
"""A key without limits (the router still reads its usage)."""
MODEL = "tiny"


@dataclass
class LimitedRouter:
    """The router's base URL and what a test waits on or moves."""

    base_url: str
    stats: SignallingStats
    clock: FakeMonotonic

    def http(self, key: str = KEY) -> httpx.AsyncClient:
        """A client of the router with ``key``; a connection per request, so leaving closes one."""
        return httpx.AsyncClient(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {key}"},
            timeout=WAIT_S,
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    def next_window(self) -> None:
        """Move past the window: what earlier requests used no longer counts."""
        self.clock.now += 61

    async def exchange_ended(self) -> None:
        """Wait until the router has settled one more exchange (its reservation included)."""
        with anyio.fail_after(WAIT_S):
            await self.stats.ended.receive()


@asynccontextmanager
async def limited_router(
    upstream_base: str, *, upstream_headers: Mapping[str, str] | None = None
) -> AsyncIterator[LimitedRouter]:
    """Serve the router, its model ``tiny`` at ``upstream_base``, with :data:`KEY` limited to 50 tokens."""
    keys = FakeKeyStore(required=True)
    keys.add_key(KEY, "fifty", tokens_per_minute=LIMIT)
    keys.add_key(OPEN_KEY, "open")
    stats, clock, resolver = SignallingStats(), FakeMonotonic(1000.0), FakeResolver()
    router = create_router_app(resolver, keys, FakeMaintenanceGate(), stats, limiter=RateLimiter(clock=clock))
    async with (
        create_upstream_client() as client,
        serve_asgi(Starlette(routes=[Mount("/v1", router)])) as base,
    ):
        resolver.add(MODEL, Upstream(f"{upstream_base}/", client, dict(upstream_headers or {})))
        try:
            yield LimitedRouter(base, stats, clock)
        finally:
            stats.ended_send.close()
            stats.ended.close()


async def leave_before_usage(router: LimitedRouter, body: dict[str, Any], *, attempts: int = 10) -> int:
    """(a) Stream ``body`` ``attempts`` times, each time leaving after two events, before the usage chunk."""
    admitted = 0
    async with router.http() as http:
        for _ in range(attempts):
            async with http.stream("POST", _path(body), json={**body, "stream": True}) as answer:
                if answer.status_code == 429:
                    await answer.aread()
                    continue
                assert answer.status_code == 200, await answer.aread()
                admitted += 1
                events = 0
                async for line in answer.aiter_lines():
                    events += line.startswith("data:")
                    if events == 2:
                        break
            await router.exchange_ended()
    return admitted


async def override_the_length(router: LimitedRouter, body: dict[str, Any], *, concurrent: int = 20) -> int:
    """(b) Send ``body`` ``concurrent`` times at once: a small ``max_tokens``, an engine's field lifted."""
    statuses: list[int] = []
    async with router.http() as http, anyio.create_task_group() as group:

        async def one() -> None:
            statuses.append((await http.post(_path(body), json=body)).status_code)

        for _ in range(concurrent):
            group.start_soon(one)
    assert set(statuses) <= {200, 429}, statuses
    return statuses.count(200)


async def leave_the_length_out(router: LimitedRouter, body: dict[str, Any], *, attempts: int = 3) -> int:
    """(c) Send ``body``, which has no length field at all, ``attempts`` times in a row."""
    admitted = 0
    async with router.http() as http:
        for _ in range(attempts):
            answer = await http.post(_path(body), json=body)
            assert answer.status_code in {200, 429}, answer.text
            admitted += answer.status_code == 200
    return admitted


def _path(body: Mapping[str, Any]) -> str:
    return "/v1/chat/completions" if "messages" in body else "/v1/completions"
