"""The benchmark's upstream: a minimal OpenAI-style model server, as fast as Python serves HTTP.

The agent runs it as a ``llamacpp`` model (a catalogued executable started by the process driver), so
it takes llama-server's plumbing: ``--host``/``--port`` appended to whatever flags the model's argv has
(ignored here) and the per-instance key in ``LLAMA_API_KEY``, which every ``/v1`` request must present.

It is a bare ASGI callable under uvicorn (httptools and uvloop when installed): no framework, no
routing table, answers prepared once. That keeps ``direct``, the baseline, as cheap as it can be, so
what the agent and the master add is not hidden behind a slow upstream.

* ``GET /health``: 200 (the driver's readiness check); ``GET /metrics``: a few ``llamacpp:*`` series.
* ``POST /v1/chat/completions``: a fixed completion with usage; with ``"stream": true`` a stream of
  ``max_tokens`` events ``gap_ms`` apart (a body field, default 2), each carrying ``stamp_ns``, the
  ``time.monotonic_ns()`` read just before the event is handed to the server, then ``[DONE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from typing import Any, Final

import anyio
import uvicorn
from starlette.types import Receive, Scope, Send

__all__ = ["STAMP_FIELD", "app", "main"]

STAMP_FIELD: Final = "stamp_ns"
"""The field of each streamed event that holds the upstream's monotonic clock, in nanoseconds."""

_JSON: Final = [(b"content-type", b"application/json")]
_SSE: Final = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
_COMPLETION: Final = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    },
    separators=(",", ":"),
).encode()
_METRICS: Final = b"llamacpp:requests_processing 0\nllamacpp:requests_deferred 0\n"
_DONE: Final = b"data: [DONE]\n\n"
_DEFAULT_GAP_MS: Final = 2.0


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """The upstream's ASGI entry point (HTTP only; uvicorn runs it with the lifespan off)."""
    if scope["type"] != "http":
        return
    path: str = scope["path"]
    if path == "/health":
        await _answer(send, 200, b'{"status":"ok"}')
    elif path == "/metrics":
        await _answer(send, 200, _METRICS, [(b"content-type", b"text/plain; version=0.0.4")])
    elif not _authorized(scope):
        await _answer(send, 401, b'{"error":{"message":"invalid api key","type":"authentication_error"}}')
    elif path == "/v1/chat/completions" and scope["method"] == "POST":
        await _chat(await _body(receive), send)
    elif path == "/v1/models":
        await _answer(send, 200, b'{"object":"list","data":[{"id":"bench","object":"model"}]}')
    else:
        await _answer(send, 404, b'{"error":{"message":"not found","type":"invalid_request_error"}}')


def _authorized(scope: Scope) -> bool:
    key = os.environ.get("LLAMA_API_KEY")
    if not key:
        return True
    expected = b"Bearer " + key.encode()
    return any(name == b"authorization" and value == expected for name, value in scope["headers"])


async def _body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _chat(body: bytes, send: Send) -> None:
    request: dict[str, Any] = json.loads(body) if body else {}
    if not request.get("stream"):
        await _answer(send, 200, _COMPLETION)
        return
    events = max(1, int(request.get("max_tokens") or 1))
    gap_s = float(request.get("gap_ms", _DEFAULT_GAP_MS)) / 1000
    await send({"type": "http.response.start", "status": 200, "headers": _SSE})
    for index in range(events):
        if index:
            await anyio.sleep(gap_s)
        await send({"type": "http.response.body", "body": _event(index), "more_body": True})
    await send({"type": "http.response.body", "body": _DONE, "more_body": False})


def _event(index: int) -> bytes:
    # The stamp is read last, so it is as close as Python gets to the moment the bytes leave.
    prefix = (
        b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","model":"bench",'
        b'"choices":[{"index":0,"delta":{"content":"t%d"},"finish_reason":null}],"' % index
    )
    return prefix + STAMP_FIELD.encode() + b'":%d}\n\n' % time.monotonic_ns()


async def _answer(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers or _JSON})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def main(argv: Sequence[str] | None = None) -> None:
    """Serve on ``--host``/``--port``; every other flag (a model's argv) is accepted and ignored."""
    parser = argparse.ArgumentParser(prog="bench-upstream")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    options, _ = parser.parse_known_args(argv)
    print(f"bench upstream on {options.host}:{options.port} (pid {os.getpid()})", flush=True)
    uvicorn.run(
        app,
        host=options.host,
        port=options.port,
        lifespan="off",
        access_log=False,
        log_level="warning",
        server_header=False,
        backlog=512,
    )


if __name__ == "__main__":
    main()
