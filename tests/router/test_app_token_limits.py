"""A key's token limit holds whatever the client does: leave early, lift an engine's own length field,
or send no length at all (issue 31, item 4), against an upstream that generates what it is told.

The upstream obeys the length fields the way llama.cpp does (``n_predict`` first, then
``max_completion_tokens``, then ``max_tokens``; without any it fills its context) and counts every token
it reads or writes, so a test compares the upstream's own spending with the key's 50 tokens.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from tests._support.asgi_server import serve_asgi
from tests.router._limited import (
    LIMIT,
    OPEN_KEY,
    LimitedRouter,
    leave_before_usage,
    leave_the_length_out,
    limited_router,
    override_the_length,
)

pytestmark = pytest.mark.anyio

PROMPT_TOKENS = 8
CONTEXT = 400
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "say hello to me"}]}


class ObedientUpstream:
    """Generates exactly as many tokens as its length fields allow, and counts what it spends."""

    def __init__(self) -> None:
        self.reports_usage = True
        self.spent = 0
        self.seen: list[dict[str, Any]] = []
        self.bodies: list[bytes] = []
        self.app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])

    async def _chat(self, request: Request) -> Response:
        self.bodies.append(await request.body())
        payload = json.loads(self.bodies[-1])
        self.seen.append(payload)
        self.spent += PROMPT_TOKENS
        length = _length(payload)
        if payload.get("stream"):
            include_usage = (payload.get("stream_options") or {}).get("include_usage") is True
            return StreamingResponse(self._stream(length, include_usage), media_type="text/event-stream")
        self.spent += length
        usage = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": length}
        message = {"role": "assistant", "content": "x" * length}
        return JSONResponse({"choices": [{"index": 0, "message": message}], "usage": usage})

    async def _stream(self, length: int, include_usage: bool) -> AsyncIterator[bytes]:
        for _ in range(length):
            self.spent += 1
            yield _event({"choices": [{"index": 0, "delta": {"content": "x"}}]})
        if include_usage and self.reports_usage:
            # The client that leaves early leaves here: the usage chunk waits (the router cancels it).
            await anyio.sleep_forever()
        yield b"data: [DONE]\n\n"


def _length(payload: dict[str, Any]) -> int:
    for name in ("n_predict", "max_completion_tokens", "max_tokens"):
        value = payload.get(name)
        if isinstance(value, int) and value >= 0:
            return value
    return CONTEXT - PROMPT_TOKENS


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


@pytest.fixture
def upstream() -> ObedientUpstream:
    return ObedientUpstream()


@pytest.fixture
async def router(upstream: ObedientUpstream) -> AsyncIterator[LimitedRouter]:
    async with serve_asgi(upstream.app) as base, limited_router(base) as router:
        yield router


async def test_clients_that_leave_before_the_usage_chunk_are_charged(
    router: LimitedRouter, upstream: ObedientUpstream
) -> None:
    admitted = await leave_before_usage(router, {**CHAT, "max_tokens": 10})
    assert admitted >= 1
    assert upstream.spent <= LIMIT, f"{admitted} of 10 early leavers spent {upstream.spent} tokens"


async def test_engine_length_fields_are_clamped_to_the_reservation(
    router: LimitedRouter, upstream: ObedientUpstream
) -> None:
    body = {**CHAT, "max_tokens": 5, "n_predict": 4540, "max_completion_tokens": "4540", "min_tokens": 900}
    admitted = await override_the_length(router, body)
    assert admitted >= 1
    assert upstream.spent <= LIMIT, f"{admitted} requests spent {upstream.spent} tokens"
    for seen in upstream.seen:
        assert seen["n_predict"] == seen["max_tokens"] == seen["max_completion_tokens"] == 5
        assert seen["min_tokens"] == 5


async def test_a_request_without_a_length_gets_what_is_left_as_its_max_tokens(
    router: LimitedRouter, upstream: ObedientUpstream
) -> None:
    admitted = await leave_the_length_out(router, CHAT)
    assert admitted == 1
    assert upstream.spent <= LIMIT
    assert 0 < upstream.seen[0]["max_tokens"] < LIMIT


async def test_the_three_together_stay_within_one_window(
    router: LimitedRouter, upstream: ObedientUpstream
) -> None:
    await leave_before_usage(router, {**CHAT, "max_tokens": 10}, attempts=3)
    await override_the_length(router, {**CHAT, "max_tokens": 5, "n_predict": 4540}, concurrent=5)
    await leave_the_length_out(router, CHAT, attempts=2)
    assert upstream.spent <= LIMIT


async def test_the_next_window_admits_again_and_keys_without_limits_are_left_alone(
    router: LimitedRouter, upstream: ObedientUpstream
) -> None:
    assert await leave_the_length_out(router, CHAT, attempts=1) == 1
    router.next_window()
    assert await leave_the_length_out(router, CHAT, attempts=1) == 1
    async with router.http(OPEN_KEY) as http:
        answer = await http.post("/v1/chat/completions", json={**CHAT, "n_predict": 4540})
    assert answer.json()["usage"]["completion_tokens"] == 4540
    assert "max_tokens" not in upstream.seen[-1]


async def test_a_prompt_larger_than_the_whole_limit_is_refused_without_retry_after(
    router: LimitedRouter, upstream: ObedientUpstream
) -> None:
    body = {**CHAT, "messages": [{"role": "user", "content": "word " * 100}]}
    async with router.http() as http:
        answer = await http.post("/v1/chat/completions", json=body)
    assert answer.status_code == 429
    assert "retry-after" not in answer.headers
    error = answer.json()["error"]
    assert (error["code"], error["type"]) == ("rate_limit_exceeded", "tokens")
    assert "Request too large" in error["message"]
    assert upstream.seen == []


async def test_a_whole_stream_without_usage_keeps_its_reservation(
    router: LimitedRouter, upstream: ObedientUpstream
) -> None:
    upstream.reports_usage = False  # a model server that ignores stream_options
    admitted = 0
    async with router.http() as http:
        for _ in range(10):
            answer = await http.post("/v1/chat/completions", json={**CHAT, "max_tokens": 10, "stream": True})
            if answer.status_code == 200:
                assert answer.text.endswith("data: [DONE]\n\n")
                admitted += 1
                await router.exchange_ended()
    assert admitted >= 1
    assert upstream.spent <= LIMIT, f"{admitted} whole streams spent {upstream.spent} tokens"


async def test_a_fitted_body_stays_utf_8_and_no_larger_than_it_must(
    router: LimitedRouter, upstream: ObedientUpstream
) -> None:
    text = "\N{CJK UNIFIED IDEOGRAPH-4E2D}" * 30  # 90 bytes of UTF-8; 180 as \\u escapes
    body = {**CHAT, "messages": [{"role": "user", "content": text}]}
    async with router.http() as http:
        answer = await http.post("/v1/chat/completions", json=body)
    assert answer.status_code == 200
    sent = upstream.bodies[-1]
    assert text.encode() in sent
    assert len(sent) < len(json.dumps(body, ensure_ascii=False).encode()) + len(', "max_tokens": 99')
