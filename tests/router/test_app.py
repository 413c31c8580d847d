"""The router app end to end: models, proxying, streaming, usage and counters, with the real `openai` client.

Streaming is proved by the order of events (the upstream sends chunk i+1 only after the client has seen
chunk i), never by timing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anyio
import httpx
import openai
import pytest
from tests.router._raw_upstream import SSE_HEAD, Connection, chunk, json_response, raw_upstream
from tests.router._stack import KEY, WAIT_S, Stack, chat, router_stack
from tests.router._upstream import WORDS

from mirbad_protocol import ModelState
from mirbad_router import Upstream

pytestmark = pytest.mark.anyio


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    async with router_stack() as stack:
        yield stack


# ------------------------------------------------------------------------------------------- models


async def test_models_lists_ready_models_by_served_name(stack: Stack) -> None:
    stack.add_model("sleepy", state=ModelState.STOPPED)
    async with stack.client() as client:
        models = [model async for model in client.models.list()]
        one = await client.models.retrieve("TINY")
        with pytest.raises(openai.NotFoundError):
            await client.models.retrieve("sleepy")
    assert [(m.id, m.object, m.created, m.owned_by) for m in models] == [
        ("tiny", "model", 1700000000, "mirbad")
    ]
    assert one.id == "tiny"


async def test_models_are_filtered_by_the_keys_allow_list(stack: Stack) -> None:
    stack.add_model("other")
    stack.keys.add_key("sk-narrow", allowed_models=["OTHER"])
    async with stack.client("sk-narrow") as client:
        assert [model.id async for model in client.models.list()] == ["other"]


# --------------------------------------------------------------------------------------------- chat


async def test_chat_completion_reaches_the_upstream_with_its_own_credentials(stack: Stack) -> None:
    async with stack.client() as client:
        answer = await chat(client, model="TINY")
    assert answer.choices[0].message.content == "".join(WORDS)
    seen = stack.upstream.seen[-1]
    assert (seen.method, seen.path) == ("POST", "/v1/chat/completions")
    assert seen.headers["authorization"] == "Bearer instance-key"
    assert seen.headers["accept-encoding"] == "identity"
    assert seen.json()["model"] == "TINY"
    assert "stream_options" not in seen.json()
    assert stack.keys.totals("key-1", "tiny") == (4, len(WORDS))
    stats = stack.stats.for_model("tiny")
    assert (stats.total, stats.failed, stats.in_flight) == (1, 0, 0)


async def test_a_stream_arrives_chunk_by_chunk(stack: Stack) -> None:
    stack.upstream.stepped = True
    events = stack.upstream.events
    received = []
    async with stack.client() as client:
        stream = await chat(client, stream=True)
        async for chunk in stream:
            received.append(chunk)
            events.append(f"client got {len(received) - 1}")
            if len(received) < len(WORDS):
                stack.upstream.step()
    expected = [line for i in range(len(WORDS)) for line in (f"upstream sent {i}", f"client got {i}")]
    assert events[: len(expected)] == expected
    assert "".join(c.choices[0].delta.content or "" for c in received) == "".join(WORDS)


async def test_usage_of_a_stream_is_counted_without_showing_the_client_a_chunk_it_did_not_ask_for(
    stack: Stack,
) -> None:
    async with stack.client() as client:
        chunks = [chunk async for chunk in await chat(client, stream=True)]
    assert stack.upstream.seen[-1].json()["stream_options"] == {"include_usage": True}
    assert all(chunk.choices and chunk.usage is None for chunk in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert stack.keys.totals("key-1", "tiny") == (4, len(WORDS))


async def test_a_client_that_asks_for_stream_usage_gets_it(stack: Stack) -> None:
    async with stack.client() as client:
        stream = await chat(client, stream=True, stream_options={"include_usage": True})
        chunks = [chunk async for chunk in stream]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == len(WORDS)
    assert stack.keys.totals("key-1", "tiny") == (4, len(WORDS))


async def test_embeddings_usage_is_counted(stack: Stack) -> None:
    async with stack.client() as client:
        answer = await client.embeddings.create(model="tiny", input=["one two", "three"])
    assert len(answer.data) == 2
    assert stack.keys.totals("key-1", "tiny") == (3, 0)


async def test_path_and_query_are_forwarded(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers={"Authorization": f"Bearer {KEY}"}) as http:
        answer = await http.post("/v1/echo/a%20b?x=1&y=2", content=b'{"model": "tiny"}')
    assert answer.json() == {"path": "/v1/echo/a b", "query": "x=1&y=2", "bytes": 17}


async def test_a_disconnecting_client_cancels_the_upstream_stream(stack: Stack) -> None:
    stack.upstream.stepped = True
    async with stack.client() as client:
        stream = await chat(client, stream=True)
        first = await stream.__anext__()
        assert first.choices[0].delta.content == WORDS[0]
        assert stack.stats.for_model("tiny").in_flight == 1
        await stream.close()
        with anyio.fail_after(WAIT_S):
            await stack.upstream.stream_closed.wait()
    assert (stack.upstream.streams_cut, stack.upstream.streams_done) == (1, 0)
    with anyio.fail_after(WAIT_S):
        await stack.stats.ended.receive()
    stats = stack.stats.for_model("tiny")
    assert (stats.total, stats.failed, stats.in_flight) == (1, 1, 0)


# ---------------------------------------------------------------------------------------- multipart


async def test_audio_transcription_is_routed_by_its_multipart_model_field(stack: Stack) -> None:
    stack.add_model("whisper-small")
    audio = b"RIFF" + bytes(300_000)
    async with stack.client() as client:
        answer = await client.audio.transcriptions.create(
            model="whisper-small", file=("a.wav", audio, "audio/wav")
        )
    assert answer.text == f"{len(audio)} bytes of audio for whisper-small"
    assert stack.upstream.seen[-1].path == "/v1/audio/transcriptions"
    assert stack.stats.for_model("whisper-small").total == 1


# -------------------------------------------------------------------------------------- concurrency


async def test_stats_stay_exact_under_concurrency(stack: Stack) -> None:
    async with stack.client() as client, anyio.create_task_group() as group:

        async def ok() -> None:
            await chat(client)

        async def bad() -> None:
            with pytest.raises(openai.BadRequestError):
                await chat(client, max_tokens=-1)

        for index in range(40):
            group.start_soon(bad if index % 4 == 0 else ok)
    stats = stack.stats.for_model("tiny")
    assert (stats.total, stats.failed, stats.in_flight) == (40, 10, 0)


async def test_open_streams_are_in_flight_until_they_end(stack: Stack) -> None:
    stack.upstream.stepped = True
    count = 6
    async with stack.client() as client:
        streams = [await chat(client, stream=True) for _ in range(count)]
        for stream in streams:
            await stream.__anext__()
        assert stack.stats.for_model("tiny").in_flight == count
        stack.upstream.step(count * (len(WORDS) - 1))
        for stream in streams:
            _ = [chunk async for chunk in stream]
    with anyio.fail_after(WAIT_S):
        for _ in range(count):
            await stack.stats.ended.receive()
    stats = stack.stats.for_model("tiny")
    assert (stats.total, stats.failed, stats.in_flight) == (count, 0, 0)


def _sse_chunk(content: str) -> bytes:
    payload = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "tiny"}
    payload["choices"] = [{"index": 0, "delta": {"content": content}, "finish_reason": None}]
    return f"data: {json.dumps(payload)}\n\n".encode()


async def _dies_mid_stream(connection: Connection) -> None:
    if await connection.read_request() is not None:
        await connection.send(SSE_HEAD + chunk(_sse_chunk("Hello")) + chunk(_sse_chunk(" wor")))
    # Returning closes the socket without the last chunk: the model's server died.


async def test_a_stream_cut_by_the_upstream_ends_with_an_openai_error_event(stack: Stack) -> None:
    async with raw_upstream(_dies_mid_stream) as dying:
        stack.resolver.add("dying", Upstream(f"{dying.base_url}/", stack.upstream_client))
        async with stack.client() as client:
            stream = await chat(client, "dying", stream=True)
            received: list[str] = []

            async def read_all() -> None:
                async for event in stream:
                    received.append(event.choices[0].delta.content or "")

            with pytest.raises(openai.APIError) as raised:
                await read_all()
        async with (
            httpx.AsyncClient(base_url=stack.base_url, headers={"Authorization": f"Bearer {KEY}"}) as http,
            http.stream("POST", "/v1/chat/completions", json={"model": "dying", "stream": True}) as raw,
        ):
            body = await raw.aread()  # a whole chunked body: no RemoteProtocolError
    assert received == ["Hello", " wor"]
    assert "stopped in the middle of the response" in raised.value.message
    last = body.decode().strip().split("\n\n")[-1]
    error = json.loads(last.removeprefix("data: "))["error"]
    assert (error["type"], error["code"]) == ("server_error", "upstream_failed")
    assert dying.base_url.removeprefix("http://") not in body.decode()
    with anyio.fail_after(WAIT_S):
        assert [await stack.stats.ended.receive() for _ in range(2)] == ["dying", "dying"]
    assert stack.stats.for_model("dying").failed == 2


async def _agent_refuses(connection: Connection) -> None:
    # The agent's own envelope, naming the model server's loopback URL on the node.
    message = "upstream sent no usable response at http://127.0.0.1:8012/v1/chat/completions: reset"
    body = json.dumps({"error": {"code": "upstream_unreachable", "message": message}}).encode()
    while await connection.read_request() is not None:
        await connection.send(json_response(body, status=b"502 Bad Gateway"))


async def test_an_upstream_error_body_reaches_the_client_without_internal_urls(stack: Stack) -> None:
    async with raw_upstream(_agent_refuses) as agent:
        stack.resolver.add("refusing", Upstream(f"{agent.base_url}/", stack.upstream_client))
        async with stack.client() as client:
            with pytest.raises(openai.InternalServerError) as raised:
                await chat(client, "refusing")
    assert raised.value.status_code == 502
    assert raised.value.code == "upstream_unreachable"
    assert "127.0.0.1:8012" not in raised.value.message
    assert "upstream sent no usable response at <internal address>: reset" in raised.value.message
