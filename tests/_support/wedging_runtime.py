"""A stand-in model server that wedges (it streams a few tokens of a chat, then goes silent) or crawls.

Served on loopback by :func:`tests._support.asgi_server.serve_asgi`, it answers ``/v1/chat/completions``
as an OpenAI-compatible server does, until it has sent ``tokens`` chunks: then it keeps the connection
open and sends nothing more, as an engine whose scheduler hung does (``/health`` would still answer).
A non-streamed chat gets no answer at all. ``left`` is set when the client closes the connection, so a
test can see that the proxy in front ended the request rather than leaving it hanging. With ``wedges``
off it is a slow engine instead: ``pause_s`` between tokens, then the end of the stream.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Final

import anyio
from starlette.types import Receive, Scope, Send

__all__ = ["WEDGE_WAIT_S", "WedgingRuntime"]

WEDGE_WAIT_S: Final = 30.0
"""The longest the stand-in stays wedged on one request (every wait in a test is bounded)."""
_SSE: Final = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


@dataclass
class WedgingRuntime:
    """The stand-in's ASGI app.

    Attributes:
        tokens: the chunks a streamed chat gets before the silence.
        wedges: go silent after ``tokens`` (else end the stream there).
        pause_s: the pause before each token after the first.
        arrived: set when a chat arrives.
        left: set when the client of a wedged request closes its connection.
    """

    tokens: int = 3
    wedges: bool = True
    pause_s: float = 0.0
    arrived: anyio.Event = field(default_factory=anyio.Event)
    left: anyio.Event = field(default_factory=anyio.Event)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one HTTP request (lifespan messages are not expected: served with lifespan off)."""
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        self.arrived.set()
        if json.loads(body or b"{}").get("stream"):
            await send({"type": "http.response.start", "status": 200, "headers": _SSE})
            for index in range(self.tokens):
                if index:
                    await anyio.sleep(self.pause_s)
                await send({"type": "http.response.body", "body": _chunk(index), "more_body": True})
            if not self.wedges:
                await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
                return
        await self._wedged(receive)

    async def _wedged(self, receive: Receive) -> None:
        with anyio.move_on_after(WEDGE_WAIT_S):
            while (await receive())["type"] != "http.disconnect":
                pass
            self.left.set()


def _chunk(index: int) -> bytes:
    delta = {"role": "assistant", "content": f"t{index} "} if index == 0 else {"content": f"t{index} "}
    payload = {
        "id": "chatcmpl-wedge",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "wedge",
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
    }
    return b"data: " + json.dumps(payload).encode() + b"\n\n"
