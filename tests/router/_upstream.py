"""A small OpenAI-compatible upstream for the router tests (serve it with ``serve_asgi``).

The upstream answers chat completions (whole or streamed as server-sent events), embeddings, audio
transcriptions (multipart) and an error. A test can hold its stream between chunks
(:attr:`FakeOpenAI.stepped`, then :meth:`FakeOpenAI.step`) and read what happened in
:attr:`FakeOpenAI.events`, so ordering is asserted with events instead of timers.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

WORDS = ["Hello", " from", " the", " fake", " upstream"]


@dataclass(frozen=True)
class Seen:
    """One request as the upstream received it."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class FakeOpenAI:
    """The fake server's state; :attr:`app` is the ASGI app to serve."""

    def __init__(self, *, stepped: bool = False) -> None:
        self.stepped = stepped
        self.seen: list[Seen] = []
        self.events: list[str] = []
        self.stream_closed = anyio.Event()
        self.streams_done = 0
        self.streams_cut = 0
        self._steps_send, self._steps_receive = anyio.create_memory_object_stream[None](math.inf)
        self.app = Starlette(
            routes=[
                Route("/v1/models", self._models),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/embeddings", self._embeddings, methods=["POST"]),
                Route("/v1/audio/transcriptions", self._transcribe, methods=["POST"]),
                Route("/v1/echo/{rest:path}", self._echo, methods=["GET", "POST"]),
            ]
        )

    def step(self, count: int = 1) -> None:
        """Let a stepped stream send ``count`` more chunks."""
        for _ in range(count):
            self._steps_send.send_nowait(None)

    async def close(self) -> None:
        await self._steps_send.aclose()
        await self._steps_receive.aclose()

    async def _record(self, request: Request) -> bytes:
        body = await request.body()
        self.seen.append(
            Seen(request.method, request.url.path, request.url.query, dict(request.headers), body)
        )
        return body

    async def _models(self, request: Request) -> Response:
        await self._record(request)
        return JSONResponse({"object": "list", "data": [{"id": "upstream", "object": "model"}]})

    async def _echo(self, request: Request) -> Response:
        body = await self._record(request)
        return JSONResponse({"path": request.url.path, "query": request.url.query, "bytes": len(body)})

    async def _chat(self, request: Request) -> Response:
        payload = json.loads(await self._record(request))
        if payload.get("max_tokens") == -1:
            return JSONResponse(
                {"error": {"message": "max_tokens must be positive", "type": "invalid_request_error"}},
                status_code=400,
            )
        prompt = sum(len(str(m.get("content", "")).split()) for m in payload["messages"])
        if payload.get("stream"):
            include_usage = (payload.get("stream_options") or {}).get("include_usage") is True
            return StreamingResponse(
                self._chunks(payload["model"], prompt, include_usage), media_type="text/event-stream"
            )
        return JSONResponse(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": payload["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "".join(WORDS)},
                        "finish_reason": "stop",
                    }
                ],
                "usage": _usage(prompt, len(WORDS)),
            }
        )

    async def _chunks(self, model: str, prompt: int, include_usage: bool) -> AsyncIterator[bytes]:
        finished = False
        try:
            for index, word in enumerate(WORDS):
                if self.stepped and index > 0:
                    await self._steps_receive.receive()
                self.events.append(f"upstream sent {index}")
                yield _sse(_chunk(model, [{"index": 0, "delta": {"content": word}, "finish_reason": None}]))
            yield _sse(_chunk(model, [{"index": 0, "delta": {}, "finish_reason": "stop"}]))
            if include_usage:
                yield _sse(_chunk(model, [], usage=_usage(prompt, len(WORDS))))
            yield b"data: [DONE]\n\n"
            finished = True
        finally:
            if finished:
                self.streams_done += 1
            else:
                self.streams_cut += 1
                self.events.append("upstream stream cancelled")
            self.stream_closed.set()

    async def _embeddings(self, request: Request) -> Response:
        payload = json.loads(await self._record(request))
        inputs = payload["input"] if isinstance(payload["input"], list) else [payload["input"]]
        data = [{"object": "embedding", "index": i, "embedding": [0.5, 0.25]} for i in range(len(inputs))]
        tokens = sum(len(text.split()) for text in inputs)
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "model": payload["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def _transcribe(self, request: Request) -> Response:
        self.seen.append(Seen(request.method, request.url.path, "", dict(request.headers), b""))
        async with request.form() as form:
            audio = form["file"]
            assert isinstance(audio, UploadFile)
            size = len(await audio.read())
            return JSONResponse({"text": f"{size} bytes of audio for {form['model']}"})


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _chunk(model: str, choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": choices,
    }
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def _sse(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()
