"""The Playground's chat: an in-process streamed request through a router, with the answer's speed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from tests._support.asgi_server import serve_asgi

from mirbad_master.ui._asgi_stream import asgi_request
from mirbad_master.ui._chat import ChatDone, ChatError, ChatRequest, PortalKeys, error_message, stream_chat
from mirbad_master.ui._playground import done_text
from mirbad_router import RouterStats, Upstream, create_router_app
from mirbad_router.testing import FakeMaintenanceGate, FakeResolver

pytestmark = pytest.mark.anyio

WAIT_S = 5.0


def sse(payload: object) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


def piece(text: str) -> bytes:
    return sse({"choices": [{"index": 0, "delta": {"content": text}}]})


class TwoPartModel:
    """A model that sends "Hel", waits until the reader has shown it, then sends the rest."""

    def __init__(self) -> None:
        self.shown_first = anyio.Event()
        self.bodies: list[dict[str, object]] = []

    @property
    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])

    async def chat(self, request: Request) -> Response:
        self.bodies.append(await request.json())

        async def events() -> AsyncIterator[bytes]:
            yield piece("Hel")
            with anyio.fail_after(WAIT_S):
                await self.shown_first.wait()  # never set if the reader only sees the whole body
            yield piece("lo")
            yield sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}})
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")


def ticking(*times: float) -> Iterator[float]:
    yield from times


def router_to(resolver: FakeResolver, maintenance: FakeMaintenanceGate | None = None) -> Starlette:
    return create_router_app(resolver, PortalKeys(), maintenance or FakeMaintenanceGate(), RouterStats())


async def test_the_answer_arrives_piece_by_piece_through_the_router_with_its_rate() -> None:
    model = TwoPartModel()
    shown: list[str] = []

    def on_text(text: str) -> None:
        shown.append(text)
        model.shown_first.set()

    clock = ticking(10.0, 10.5, 11.5)
    request = ChatRequest(
        model="tiny", messages=[{"role": "user", "content": "hi"}], system_prompt="Be brief."
    )
    async with serve_asgi(model.app) as url, httpx.AsyncClient() as client:
        resolver = FakeResolver()
        resolver.add("tiny", Upstream(f"{url}/", client))
        with anyio.fail_after(WAIT_S * 2):
            done = await stream_chat(router_to(resolver), request, on_text, clock=lambda: next(clock))

    assert shown == ["Hel", "lo"]
    assert done == ChatDone(tokens=2, seconds=1.0, first_token_s=0.5)
    assert done.tokens_per_second == 2.0
    assert done_text(done) == "2 tokens · 2.0 tok/s · first token after 500 ms"
    assert done_text(ChatDone(tokens=1, seconds=1.0, first_token_s=None)).startswith("1 token · ")
    body = model.bodies[0]
    assert body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert (body["stream"], body["stream_options"]) == (True, {"include_usage": True})


async def test_maintenance_and_unknown_models_are_refused_with_the_routers_message() -> None:
    maintenance = FakeMaintenanceGate()
    maintenance.enter("a benchmark is running", 30)
    request = ChatRequest(model="nope", messages=[{"role": "user", "content": "hi"}])

    during = await stream_chat(router_to(FakeResolver(), maintenance), request, lambda text: None)
    unknown = await stream_chat(router_to(FakeResolver()), request, lambda text: None)

    assert isinstance(during, ChatError)
    assert (during.status, during.message) == (503, "a benchmark is running")
    assert isinstance(unknown, ChatError)
    assert unknown.status == 404
    assert "nope" in unknown.message


async def test_an_app_that_fails_before_answering_is_a_502() -> None:
    async def broken(scope: object, receive: object, send: object) -> None:
        raise RuntimeError("boom")

    outcome = await stream_chat(broken, ChatRequest(model="m", messages=[]), lambda text: None)

    assert isinstance(outcome, ChatError)
    assert outcome.status == 502
    assert "boom" in outcome.message


async def test_an_app_that_never_answers_times_out() -> None:
    async def silent(scope: object, receive: object, send: object) -> None:
        await anyio.sleep_forever()

    with pytest.raises(TimeoutError):
        async with asgi_request(silent, "GET", "/", idle_timeout_s=0.05):
            pass


async def test_a_plain_answer_is_read_whole() -> None:
    app = Starlette(routes=[Route("/x", lambda request: JSONResponse({"ok": True}, headers={"X-A": "b"}))])

    async with asgi_request(app, "GET", "/x?q=1") as answer:
        body = await answer.read()

    assert (answer.status, answer.headers["x-a"], json.loads(body)) == (200, "b", {"ok": True})


def test_error_messages_are_read_from_the_openai_shape() -> None:
    assert error_message(b'{"error": {"message": "no such model", "type": "x"}}') == "no such model"
    assert error_message(b"upstream said no") == "upstream said no"
    assert error_message(b'{"detail": 1}') == '{"detail": 1}'
