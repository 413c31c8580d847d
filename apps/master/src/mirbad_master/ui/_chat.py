"""The Playground's chat client: one streamed chat completion through the master's own router.

The request goes through a router app built over the master's resolver, maintenance gate and
counters, called in-process (:func:`asgi_request`), so a Playground chat meets what every client meets
(maintenance, a model that is not Ready, a start on request) and shows up in the router's counters,
but needs no API key: the portal session already is the administrator's. Token rates are measured
here, from the first streamed token to the last.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from starlette.types import ASGIApp

from mirbad_router import KeyGrant, KeyStore

from ._asgi_stream import asgi_request

__all__ = ["ChatDone", "ChatError", "ChatRequest", "PortalKeys", "error_message", "stream_chat"]

_SSE_DATA: Final = "data:"


class PortalKeys(KeyStore):
    """The Playground's key check: the signed-in administrator needs no API key, and uses none."""

    async def keys_required(self) -> bool:
        """Never: the portal session has authenticated the administrator already."""
        return False

    async def authenticate(self, bearer: str) -> KeyGrant | None:
        """No key is ever sent from the Playground."""
        return None

    async def record_usage(
        self, grant: KeyGrant, served_name: str, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """Nothing to record: usage is counted per API key."""


@dataclass(frozen=True)
class ChatRequest:
    """One chat turn for the Playground.

    Attributes:
        model: the served name.
        messages: the conversation so far, OpenAI-style (``{"role", "content"}``), the new turn last.
        system_prompt: put first as a system message when not empty.
        temperature: the sampling temperature.
        max_tokens: the longest answer.
    """

    model: str
    messages: list[dict[str, str]]
    system_prompt: str = ""
    temperature: float = 0.7
    max_tokens: int = 512

    def body(self) -> dict[str, Any]:
        """The chat-completions body, streamed, with the usage at the end."""
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt.strip() else []
        return {
            "model": self.model,
            "messages": [*system, *self.messages],
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }


@dataclass(frozen=True)
class ChatDone:
    """The answer is complete.

    Attributes:
        tokens: completion tokens (the usage the model reported, else the number of streamed pieces).
        seconds: from the first streamed token to the end.
        first_token_s: from sending the request to the first token.
    """

    tokens: int
    seconds: float
    first_token_s: float | None

    @property
    def tokens_per_second(self) -> float | None:
        """The generation rate; None when too little was streamed to measure one."""
        return self.tokens / self.seconds if self.seconds > 0 and self.tokens > 1 else None


@dataclass(frozen=True)
class ChatError:
    """The router or the model refused or failed; ``message`` says why (OpenAI error message)."""

    status: int
    message: str


@dataclass
class _Tally:
    clock: Callable[[], float]
    sent: float
    pieces: int = 0
    usage_tokens: int | None = None
    first: float | None = None
    last: float | None = None
    buffer: str = field(default="")

    def piece(self) -> None:
        now = self.clock()
        self.pieces += 1
        self.first = self.first if self.first is not None else now
        self.last = now

    def done(self) -> ChatDone:
        tokens = self.usage_tokens if self.usage_tokens is not None else self.pieces
        seconds = (self.last - self.first) if self.first is not None and self.last is not None else 0.0
        first_token_s = self.first - self.sent if self.first is not None else None
        return ChatDone(tokens, seconds, first_token_s)


async def stream_chat(
    router: ASGIApp,
    request: ChatRequest,
    on_text: Callable[[str], Awaitable[None] | None],
    *,
    clock: Callable[[], float] = time.monotonic,
) -> ChatDone | ChatError:
    """Send ``request`` to ``router`` (the ``/v1`` app), hand each piece of the answer to ``on_text``.

    A callback rather than an async generator: the answer is read inside a task group, which must not
    be suspended across a ``yield`` (a reader that stops early would leave it in another context).

    Returns:
        How the answer ended: complete (with its token count and rate) or refused / failed.
    """
    body = json.dumps(request.body()).encode()
    tally = _Tally(clock, clock())
    headers = [("content-type", "application/json"), ("accept", "text/event-stream")]
    try:
        async with asgi_request(router, "POST", "/chat/completions", body=body, headers=headers) as answer:
            if answer.status >= 400:
                return ChatError(answer.status, error_message(await answer.read()))
            async for chunk in answer.chunks():
                for text in _pieces(tally, chunk.decode("utf-8", "replace")):
                    result = on_text(text)
                    if result is not None:
                        await result
    except TimeoutError:
        return ChatError(504, "the model sent nothing for too long")
    except RuntimeError as exc:
        return ChatError(502, str(exc))
    return tally.done()


def _pieces(tally: _Tally, text: str) -> list[str]:
    tally.buffer += text
    *lines, tally.buffer = tally.buffer.split("\n")
    pieces: list[str] = []
    for line in lines:
        data = line.strip()
        if not data.startswith(_SSE_DATA):
            continue
        payload = data[len(_SSE_DATA) :].strip()
        if payload == "[DONE]":
            continue
        piece = _read_chunk(tally, payload)
        if piece:
            pieces.append(piece)
    return pieces


def _read_chunk(tally: _Tally, payload: str) -> str:
    try:
        chunk = json.loads(payload)
    except json.JSONDecodeError:
        return ""
    usage = chunk.get("usage") if isinstance(chunk, dict) else None
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        tally.usage_tokens = usage["completion_tokens"]
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    if not choices or not isinstance(choices[0], dict):
        return ""
    delta = choices[0].get("delta") or {}
    content = delta.get("content") if isinstance(delta, dict) else None
    if isinstance(content, str) and content:
        tally.piece()
        return content
    return ""


def error_message(body: bytes) -> str:
    """The message of an OpenAI-shaped error body, else the body itself."""
    try:
        document = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return body.decode("utf-8", "replace").strip() or "no reason given"
    error = document.get("error") if isinstance(document, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return json.dumps(document)
