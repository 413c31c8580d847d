"""Token usage read from responses as they pass through the router, streamed or not.

Streamed chat and text completions report usage only when the request says
``"stream_options": {"include_usage": true}``. A key with a token limit must not escape it by leaving
that out, so when a request comes with a key the router asks for usage itself
(:func:`request_stream_usage`) and takes the extra usage-only chunk out of the stream
(:class:`SseUsageTap` with ``drop_usage_only``): the client receives exactly the stream it asked for.
A client that asked for usage keeps its usage chunk.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["JsonUsageTap", "SseUsageTap", "Usage", "request_stream_usage", "usage_from_object"]

# Endpoints whose streamed answers carry usage only on request (OpenAI's `stream_options`).
_STREAM_OPTIONS_PATHS = frozenset({"chat/completions", "completions"})
_EVENT_END = re.compile(rb"\r?\n\r?\n")
_USAGE_KEY = re.compile(rb'"usage"\s*:\s*')


@dataclass(frozen=True)
class Usage:
    """The tokens one response used.

    Attributes:
        prompt_tokens: tokens read (``prompt_tokens``, or ``input_tokens`` in the Responses and audio APIs).
        completion_tokens: tokens generated (``completion_tokens`` or ``output_tokens``; 0 for embeddings).
    """

    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


def usage_from_object(payload: object) -> Usage | None:
    """The usage in a decoded response or stream chunk: its ``usage``, or ``response.usage``, if any."""
    if not isinstance(payload, dict):
        return None
    usage = payload.get("usage")
    if usage is None and isinstance(payload.get("response"), dict):
        usage = payload["response"].get("usage")
    return _usage_from_fields(usage)


def _usage_from_fields(usage: object) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    prompt = _count(usage, "prompt_tokens", "input_tokens")
    completion = _count(usage, "completion_tokens", "output_tokens")
    if prompt is None and completion is None:
        return None
    return Usage(prompt or 0, completion or 0)


def _count(usage: dict[str, Any], *names: str) -> int | None:
    for name in names:
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def request_stream_usage(path: str, body: dict[str, Any]) -> dict[str, Any] | None:
    """The body with usage requested, when ``body`` streams from ``path`` without asking for usage.

    Returns None when nothing needs to change: the request does not stream, its endpoint has no
    ``stream_options``, or the client already asked for usage.
    """
    if path.strip("/") not in _STREAM_OPTIONS_PATHS or body.get("stream") is not True:
        return None
    options = body.get("stream_options")
    options = options if isinstance(options, dict) else {}
    if options.get("include_usage") is True:
        return None
    return {**body, "stream_options": {**options, "include_usage": True}}


class SseUsageTap:
    """Watches a server-sent-event stream for usage while passing it on, event by event.

    Feed it the upstream's chunks in order; it returns what to send to the client. Without
    ``drop_usage_only`` that is each chunk unchanged, at once. With it, bytes are passed on at event
    boundaries, and an event whose chunk has no choices but has usage (the one
    :func:`request_stream_usage` asked for) is left out. An event larger than ``max_event_bytes`` is
    passed on unexamined rather than held.

    Attributes:
        usage: the last usage seen so far (a stream reports it once, in its final chunk).
    """

    def __init__(self, *, drop_usage_only: bool = False, max_event_bytes: int = 1 << 20) -> None:
        self.usage: Usage | None = None
        self._drop = drop_usage_only
        self._max = max_event_bytes
        self._pending = bytearray()
        self._oversized = False

    def feed(self, chunk: bytes) -> bytes:
        """Take the next chunk of the stream and return the bytes to pass on now."""
        self._pending += chunk
        passed = bytearray()
        while (match := _EVENT_END.search(self._pending)) is not None:
            event = bytes(self._pending[: match.end()])
            del self._pending[: match.end()]
            keep = self._oversized or self._inspect(event)
            self._oversized = False
            if keep:
                passed += event
        if len(self._pending) > self._max:
            # Too big to be a usage chunk: stop examining this event and stop holding it.
            self._oversized = True
            passed += self._pending
            self._pending.clear()
        return chunk if not self._drop else bytes(passed)

    def finish(self) -> bytes:
        """The bytes still held when the stream ends (an unterminated last event)."""
        rest = bytes(self._pending)
        self._pending.clear()
        if rest and not self._oversized:
            self._inspect(rest)
        return rest if self._drop else b""

    def _inspect(self, event: bytes) -> bool:
        data = _event_data(event)
        if data is None or b'"usage"' not in data:
            return True
        try:
            payload = json.loads(data)
        except (ValueError, RecursionError):  # not JSON, or nested past the decoder's depth
            return True
        usage = usage_from_object(payload)
        if usage is None:
            return True
        self.usage = usage
        return not (isinstance(payload, dict) and payload.get("choices") == [])


def _event_data(event: bytes) -> bytes | None:
    lines = [line[5:].removeprefix(b" ") for line in event.splitlines() if line.startswith(b"data:")]
    if not lines:
        return None
    return b"\n".join(lines)


class JsonUsageTap:
    """Watches a JSON response body as it passes and reads its usage at the end.

    It has :class:`SseUsageTap`'s interface and passes every chunk on unchanged. Bodies up to
    ``max_body_bytes`` are decoded whole. Past that (a large embeddings answer) only the last
    ``tail_bytes`` are kept and the usage is read from the last ``"usage":`` object in them, which is
    where OpenAI-compatible servers put it.

    Attributes:
        usage: the body's usage, known once :meth:`finish` has run.
    """

    def __init__(self, *, max_body_bytes: int = 8 << 20, tail_bytes: int = 64 << 10) -> None:
        self.usage: Usage | None = None
        self._max = max_body_bytes
        self._tail = tail_bytes
        self._body = bytearray()
        self._truncated = False

    def feed(self, chunk: bytes) -> bytes:
        """Take the next chunk of the body and return it."""
        self._body += chunk
        if len(self._body) > self._max:
            self._truncated = True
            del self._body[: len(self._body) - self._tail]
        return chunk

    def finish(self) -> bytes:
        """Read the usage of the whole body (into :attr:`usage`); nothing is left to pass on."""
        self.usage = self._read_usage()
        self._body.clear()
        return b""

    def _read_usage(self) -> Usage | None:
        if not self._truncated:
            try:
                return usage_from_object(json.loads(self._body))
            except (ValueError, RecursionError):  # not JSON, or nested past the decoder's depth
                return None
        matches = list(_USAGE_KEY.finditer(self._body))
        if not matches:
            return None
        tail = self._body[matches[-1].end() :].decode("utf-8", "replace")
        try:
            usage, _ = json.JSONDecoder().raw_decode(tail)
        except (ValueError, RecursionError):  # not JSON, or nested past the decoder's depth
            return None
        return _usage_from_fields(usage)
