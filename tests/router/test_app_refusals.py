"""The router's refusals, in the order its gates run: maintenance, key, body, model, limits, upstream.

Each surfaces as the `openai` client's usual exception (NotFoundError, AuthenticationError,
RateLimitError, InternalServerError for 5xx).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import httpx
import openai
import pytest
from tests.router._stack import KEY, WAIT_S, Stack, chat, router_stack
from tests.router._upstream import WORDS

from mirbad_protocol import MirbadError, ModelState
from mirbad_router import RouterStats, StartDeferredError, Upstream, create_router_app, create_upstream_client
from mirbad_router.testing import FakeKeyStore, FakeMaintenanceGate, FakeResolver

pytestmark = pytest.mark.anyio


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    async with router_stack() as stack:
        yield stack


# ------------------------------------------------------------------------------------------- errors


async def test_unknown_model_is_404_model_not_found(stack: Stack) -> None:
    async with stack.client() as client:
        with pytest.raises(openai.NotFoundError) as raised:
            await chat(client, model="nope")
    assert raised.value.code == "model_not_found"
    assert "nope" in raised.value.message


async def test_a_model_outside_the_keys_allow_list_is_not_found(stack: Stack) -> None:
    stack.keys.add_key("sk-narrow", allowed_models=["other"])
    async with stack.client("sk-narrow") as client:
        with pytest.raises(openai.NotFoundError):
            await chat(client)


async def test_a_model_that_is_not_ready_is_503_with_retry_after(stack: Stack) -> None:
    stack.add_model("sleepy", state=ModelState.STOPPED)
    async with stack.client() as client:
        with pytest.raises(openai.InternalServerError) as raised:
            await chat(client, model="sleepy")
    assert raised.value.status_code == 503
    assert raised.value.response.headers["retry-after"] == "30"
    assert raised.value.code == "model_not_ready"
    assert "Stopped" in raised.value.message
    assert stack.resolver.starts == []


@pytest.mark.parametrize(
    ("key", "reason"), [("sk-wrong", "not valid"), (None, "No API key"), ("sk-old", "expired at")]
)
async def test_bad_keys_are_401(stack: Stack, key: str | None, reason: str) -> None:
    stack.keys.add_key("sk-old", expires_at=datetime.now(UTC) - timedelta(minutes=1))
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(base_url=stack.base_url, headers=headers) as http:
        answer = await http.post("/v1/chat/completions", json={"model": "tiny"})
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == "Bearer"
    error = answer.json()["error"]
    assert (error["code"], error["type"]) == ("invalid_api_key", "invalid_request_error")
    assert reason in error["message"]
    if key is not None:  # the openai client refuses to send no key at all
        async with stack.client(key) as client:
            with pytest.raises(openai.AuthenticationError):
                await client.models.list()


async def test_keys_are_optional_when_not_required() -> None:
    async with router_stack(keys_required=False) as stack:
        stack.keys.add_key("sk-limited", requests_per_minute=1)
        async with stack.client("anything") as anonymous, stack.client("sk-limited") as limited:
            await chat(anonymous)
            await chat(anonymous)
            await chat(limited)
            with pytest.raises(openai.RateLimitError):
                await chat(limited)
        assert [record.key_id for record in stack.keys.usage] == ["key-2"]


async def test_maintenance_comes_before_the_key_check(stack: Stack) -> None:
    stack.gate.enter("A benchmark is running.", 120)
    async with stack.client("sk-wrong") as client:
        with pytest.raises(openai.InternalServerError) as raised:
            await client.models.list()
    assert raised.value.status_code == 503
    assert raised.value.code == "maintenance"
    assert raised.value.response.headers["retry-after"] == "120"
    async with httpx.AsyncClient(base_url=stack.base_url) as http:
        assert (await http.get("/healthz")).text == "ok"
    stack.gate.leave()
    async with stack.client() as client:
        assert [model.id async for model in client.models.list()] == ["tiny"]


async def test_requests_per_minute_limit_is_429_with_retry_after(stack: Stack) -> None:
    stack.keys.add_key("sk-slow", requests_per_minute=2)
    async with stack.client("sk-slow") as client:
        await chat(client)
        stack.clock.now += 15
        await chat(client)
        with pytest.raises(openai.RateLimitError) as raised:
            await chat(client)
        assert raised.value.response.headers["retry-after"] == "45"
        assert (raised.value.code, raised.value.type) == ("rate_limit_exceeded", "requests")
        stack.clock.now += 45
        await chat(client)


async def test_tokens_per_minute_limit_counts_streamed_usage(stack: Stack) -> None:
    # Each request needs its prompt's estimate (a quarter of its ~80-byte body) plus one token free.
    stack.keys.add_key("sk-few-tokens", tokens_per_minute=30)
    async with stack.client("sk-few-tokens") as client:
        _ = [chunk async for chunk in await chat(client, stream=True)]  # 9 tokens used, 21 left
        with pytest.raises(openai.RateLimitError) as raised:
            await chat(client, stream=True)
    assert raised.value.type == "tokens"
    assert raised.value.response.headers["retry-after"] == "60"


@pytest.mark.parametrize("max_tokens", [5, None])
async def test_concurrent_requests_cannot_pass_the_token_limit_together(
    stack: Stack, max_tokens: int | None
) -> None:
    stack.keys.add_key("sk-fifty", tokens_per_minute=50)
    stack.upstream.stepped = True  # every admitted stream stays open until all 20 have their answer
    answered_send, answered = anyio.create_memory_object_stream[str](20)
    options: dict[str, Any] = {} if max_tokens is None else {"max_tokens": max_tokens}

    async def one(client: openai.AsyncOpenAI) -> None:
        try:
            stream = await chat(client, stream=True, **options)
        except openai.RateLimitError:
            answered_send.send_nowait("refused")
            return
        answered_send.send_nowait("admitted")
        _ = [chunk async for chunk in stream]

    async with (
        answered_send,
        answered,
        stack.client("sk-fifty") as client,
        anyio.create_task_group() as group,
    ):
        for _ in range(20):
            group.start_soon(one, client)
        with anyio.fail_after(WAIT_S):
            outcomes = [await answered.receive() for _ in range(20)]
        stack.upstream.step(100)
    used = sum(record.prompt_tokens + record.completion_tokens for record in stack.keys.usage)
    assert outcomes.count("admitted") >= 1
    assert used <= 50, f"{outcomes.count('admitted')} requests used {used} tokens"
    assert used == 9 * outcomes.count("admitted")  # each settled to its real usage


async def test_missing_model_and_unreadable_bodies_are_400(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers={"Authorization": f"Bearer {KEY}"}) as http:
        missing = await http.post("/v1/chat/completions", json={"messages": []})
        broken = await http.post(
            "/v1/chat/completions", content=b"{oops", headers={"Content-Type": "application/json"}
        )
        no_body = await http.get("/v1/files")
        nested = await http.post("/v1/chat/completions", content=b"[" * 100_000 + b"]" * 100_000)
    assert nested.status_code == 400
    assert nested.json()["error"]["code"] == "invalid_request_body"
    assert missing.status_code == 400
    assert missing.json()["error"]["param"] == "model"
    assert broken.status_code == 400
    assert broken.json()["error"]["code"] == "invalid_request_body"
    assert no_body.status_code == 400


async def test_bodies_over_the_limit_are_413_chunked_or_not() -> None:
    async with router_stack(max_body_bytes=1000) as stack:
        headers = {"Authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(base_url=stack.base_url, headers=headers) as http:

            async def chunked() -> AsyncIterator[bytes]:
                yield b'{"model": "tiny", "pad": "'
                for _ in range(20):
                    yield b"x" * 100

            sized = await http.post("/v1/chat/completions", content=b"x" * 1001)
            streamed = await http.post("/v1/chat/completions", content=chunked())
        for answer in (sized, streamed):
            assert answer.status_code == 413
            assert answer.json()["error"]["code"] == "request_too_large"
        assert stack.upstream.seen == []


async def test_the_default_limit_is_64_mib(stack: Stack) -> None:
    # Announce one byte more than 64 MiB and send none: the refusal comes from the header alone.
    host, port = stack.base_url.removeprefix("http://").split(":")
    async with await anyio.connect_tcp(host, int(port)) as connection:
        await connection.send(
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Length: {64 * 1024 * 1024 + 1}\r\n\r\n".encode()
        )
        head = await connection.receive()
    assert head.startswith(b"HTTP/1.1 413")


async def test_an_upstream_error_status_passes_through_and_counts_as_failed(stack: Stack) -> None:
    async with stack.client() as client:
        with pytest.raises(openai.BadRequestError) as raised:
            await chat(client, max_tokens=-1)
    assert raised.value.message.endswith("max_tokens must be positive")
    assert stack.stats.for_model("tiny").failed == 1


async def test_an_unreachable_upstream_is_502(stack: Stack) -> None:
    async with create_upstream_client() as client:
        # Port 9 (discard) on loopback: nothing listens in a test environment.
        stack.resolver.add("gone", Upstream("http://127.0.0.1:9/", client))
        async with stack.client() as openai_client:
            with pytest.raises(openai.InternalServerError) as raised:
                await chat(openai_client, model="gone")
    assert raised.value.status_code == 502
    assert raised.value.code == "upstream_unreachable"
    stats = stack.stats.for_model("gone")
    assert (stats.total, stats.failed, stats.in_flight) == (1, 1, 0)


async def test_no_error_names_an_upstream_or_node_address(stack: Stack) -> None:
    node = "https://10.0.0.7:9443/agent/v1"
    stack.resolver.add("failed", state=ModelState.FAILED)
    stack.resolver.set_state("failed", ModelState.FAILED, error=f"{node}/runtimes answered 500")
    stack.resolver.add("refused", state=ModelState.STOPPED, auto_start_on_request=True)
    stack.resolver.fail_next_start(MirbadError(f"the node at {node} cannot be reached"))
    messages: list[str] = []
    async with create_upstream_client() as client:
        stack.resolver.add("gone", Upstream("https://127.0.0.1:9/agent/v1/proxy/gone/", client))
        async with stack.client() as openai_client:
            for model in ("gone", "failed", "refused"):
                with pytest.raises(openai.APIStatusError) as raised:
                    await chat(openai_client, model=model)
                messages.append(raised.value.message)
    assert len(messages) == 3
    for message in messages:
        assert "127.0.0.1" not in message
        assert "10.0.0.7" not in message
        assert "://" not in message


# --------------------------------------------------------------------------------------- auto-start


class GatedResolver(FakeResolver):
    """Models it starts stay Starting; each start is announced so a test can act on it."""

    def __init__(self) -> None:
        super().__init__(started_state=None)
        self.started = anyio.Event()

    async def start_on_request(self, model_id: str) -> None:
        await super().start_on_request(model_id)
        self.started.set()


async def test_a_request_starts_an_auto_start_model_and_waits_for_it() -> None:
    resolver = GatedResolver()
    async with router_stack(resolver=resolver) as stack:
        stack.add_model("lazy", state=ModelState.STOPPED, auto_start_on_request=True)
        answers: list[str | None] = []
        async with stack.client() as client, anyio.create_task_group() as group:

            async def ask() -> None:
                answer = await chat(client, model="lazy")
                answers.append(answer.choices[0].message.content)

            group.start_soon(ask)
            with anyio.fail_after(WAIT_S):
                await resolver.started.wait()
            assert answers == []
            resolver.set_state("lazy", ModelState.READY)
        assert answers == ["".join(WORDS)]
        assert resolver.starts == ["lazy"]


async def test_an_auto_start_that_does_not_finish_in_time_is_503() -> None:
    async with router_stack(resolver=FakeResolver(started_state=None), startup_timeout_s=0.2) as stack:
        stack.add_model("lazy", state=ModelState.STOPPED, auto_start_on_request=True)
        async with stack.client() as client:
            with pytest.raises(openai.InternalServerError) as raised:
                await chat(client, model="lazy")
    assert raised.value.status_code == 503
    assert "still Starting" in raised.value.message
    assert raised.value.response.headers["retry-after"] == "30"


@pytest.mark.parametrize("how", ["refused", "failed"])
async def test_an_auto_start_that_fails_is_503_with_the_reason(how: str) -> None:
    resolver = FakeResolver(started_state=ModelState.FAILED if how == "failed" else ModelState.READY)
    async with router_stack(resolver=resolver) as stack:
        stack.add_model("lazy", state=ModelState.STOPPED, auto_start_on_request=True)
        if how == "refused":
            resolver.fail_next_start(MirbadError("not enough memory"))
        async with stack.client() as client:
            with pytest.raises(openai.InternalServerError) as raised:
                await chat(client, model="lazy")
    assert raised.value.status_code == 503
    assert raised.value.code == ("model_start_failed" if how == "refused" else "model_not_ready")


async def test_an_auto_start_that_cannot_happen_yet_is_503_model_not_ready_with_retry_after() -> None:
    resolver = FakeResolver()
    async with router_stack(resolver=resolver) as stack:
        stack.add_model("lazy", state=ModelState.STOPPED, auto_start_on_request=True)
        resolver.fail_next_start(StartDeferredError("llama-server is still being built, about 5 min left"))
        async with stack.client() as client:
            with pytest.raises(openai.InternalServerError) as raised:
                await chat(client, model="lazy")
    # As for a model still starting: retry later, not "the start failed".
    assert raised.value.status_code == 503
    assert raised.value.code == "model_not_ready"
    assert raised.value.response.headers["retry-after"] == "30"
    assert raised.value.message.endswith(
        "The model 'lazy' cannot be started yet: llama-server is still being built, about 5 min left; "
        "retry later."
    )


@pytest.mark.parametrize(
    ("method", "path"),
    [("TRACE", "/v1/chat/completions"), ("OPTIONS", "/v1/chat/completions"), ("PROPFIND", "/v1/models")],
)
async def test_other_methods_are_405_in_the_openai_shape(stack: Stack, method: str, path: str) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers={"Authorization": f"Bearer {KEY}"}) as http:
        response = await http.request(method, path)
    assert response.status_code == 405
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert (error["code"], error["type"]) == ("method_not_allowed", "invalid_request_error")
    assert method in error["message"]
    assert "GET" in response.headers["allow"]
    assert stack.upstream.seen == []


async def test_a_lone_surrogate_in_the_model_is_400_in_the_openai_shape(stack: Stack) -> None:
    # "\ud800" is valid JSON but no text: the answer naming such a model once failed to encode (500).
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=stack.base_url, headers=headers) as http:
        bad_model = await http.post("/v1/chat/completions", content=b'{"model": "\\ud800", "messages": []}')
        bad_message = await http.post(
            "/v1/chat/completions",
            content=b'{"model": "tiny", "messages": [{"role": "user", "content": "\\udfff"}]}',
        )
    for answer, param in ((bad_model, "model"), (bad_message, "messages[0].content")):
        assert answer.status_code == 400
        assert answer.headers["content-type"] == "application/json"
        assert answer.json()["error"]["code"] == "invalid_request_body"
        assert answer.json()["error"]["param"] == param
    assert stack.upstream.seen == []


async def test_the_routers_clock_alone_decides_expiry_to_the_microsecond() -> None:
    start = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    readings: list[datetime] = []
    now = start

    def clock() -> datetime:
        readings.append(now)
        return now

    keys = FakeKeyStore()
    grant = keys.add_key("sk-soon", expires_at=start + timedelta(hours=1))
    router = create_router_app(FakeResolver(), keys, FakeMaintenanceGate(), RouterStats(), now=clock)
    headers = {"Authorization": "Bearer sk-soon"}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=router), base_url="http://router", headers=headers
    ) as http:
        now = start + timedelta(hours=1) - timedelta(microseconds=1)
        before = await http.get("/models")
        now = start + timedelta(hours=1)
        at_expiry = await http.get("/models")

    assert before.status_code == 200
    assert at_expiry.status_code == 401
    assert at_expiry.json()["error"]["code"] == "invalid_api_key"
    assert "expired at" in at_expiry.json()["error"]["message"]
    # One reading per request decides and stamps: the key's last use is that same instant.
    assert readings == [start + timedelta(hours=1) - timedelta(microseconds=1), start + timedelta(hours=1)]
    assert keys.used_at == {grant.key_id: start + timedelta(hours=1) - timedelta(microseconds=1)}
