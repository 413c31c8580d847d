"""A stand-in OpenAI chat server for job tests: streamed and plain chats, steered by an anyio event.

Served for real on loopback (``tests._support.asgi_server.serve_asgi``). A streamed chat sends
``max_tokens`` one-word chunks and a usage chunk; while :attr:`FakeChatServer.hold` is an unset event,
every streamed chat waits for it before its last chunk (a job held mid-run), bounded by ``WAIT_S``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = ["FakeChatServer"]

WAIT_S: Final = 10.0


@dataclass
class FakeChatServer:
    """The server's state; tests steer :attr:`hold` and read :attr:`streamed`."""

    hold: anyio.Event | None = None
    streamed: int = 0
    holding: int = 0

    @property
    def app(self) -> Starlette:
        """The ASGI app (``/v1/chat/completions`` below any prefix)."""
        return Starlette(routes=[Route("/{prefix:path}v1/chat/completions", self._chat, methods=["POST"])])

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        tokens = int(body.get("max_tokens", 16))
        if not body.get("stream"):
            message = {"role": "assistant", "content": "The answer is 42"}
            return JSONResponse(
                {"choices": [{"index": 0, "message": message}], "usage": {"completion_tokens": 4}}
            )
        self.streamed += 1
        return StreamingResponse(self._events(tokens), media_type="text/event-stream")

    async def _events(self, tokens: int) -> AsyncIterator[bytes]:
        for index in range(tokens):
            yield _data({"choices": [{"index": 0, "delta": {"content": f"w{index} "}}]})
        if self.hold is not None:
            self.holding += 1
            try:
                with anyio.fail_after(WAIT_S):
                    await self.hold.wait()
            finally:
                self.holding -= 1
        usage = {"completion_tokens": tokens, "prompt_tokens": 12}
        yield _data({"choices": [], "usage": usage})
        yield b"data: [DONE]\n\n"


def _data(chunk: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(chunk)}\n\n".encode()
