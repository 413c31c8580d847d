"""The load generator: streamed chat requests straight to the model's endpoint, N at a time.

Requests go to the endpoint the router itself would forward to (the node agent's proxy for the model,
through the master's mutual-TLS client), not through ``/v1``: the maintenance gate refuses ``/v1``
while the job runs, and skipping the router keeps its counters, key limits and idle clock out of the
measurement. Each request is one anyio task reading the server-sent events as they arrive; the clock
is read when a chunk arrives, so a slow consumer would show up as a slower server, which is why the
reader does nothing but split lines and parse the chunks it must.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from mirbad_orchestration.exceptions import BenchmarkRequestError
from mirbad_protocol.benchmarks import RunMeasurement
from mirbad_protocol.support import single_errors

from ._stats import median, nearest_rank

__all__ = ["ChatEndpoint", "StreamedChat", "measure_run", "post_chat", "stream_chat"]

Clock = Callable[[], float]


@dataclass(frozen=True)
class ChatEndpoint:
    """Where a model answers OpenAI requests: ``{base_url}v1/chat/completions`` through ``client``.

    Attributes:
        base_url: ends with ``/`` (the agent's proxy for the model, or a server's root).
        client: the client that reaches it (the caller owns and closes it).
        served_name: the ``model`` field of the requests.
        headers: extra headers for every request.
        timeout_s: the most one request may take.
    """

    base_url: str
    client: httpx.AsyncClient
    served_name: str
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 600.0

    @property
    def chat_url(self) -> str:
        """The chat completions URL."""
        return f"{self.base_url}v1/chat/completions"


@dataclass(frozen=True)
class StreamedChat:
    """One streamed chat as the client saw it.

    Attributes:
        ttft_s: from sending to the first content (or tool-call) chunk.
        total_s: from sending to the end of the stream.
        tokens: completion tokens (the usage chunk's, else one per content chunk).
        text: the content received.
        usage: the final usage object, if the server sent one.
        timings: llama-server's ``timings`` object, if it sent one.
    """

    ttft_s: float
    total_s: float
    tokens: int
    text: str
    usage: Mapping[str, Any] | None = None
    timings: Mapping[str, Any] | None = None

    @property
    def tokens_per_s(self) -> float:
        """Per-request decode speed: tokens ÷ (total - TTFT)."""
        decode = self.total_s - self.ttft_s
        return self.tokens / decode if decode > 0 else 0.0


async def stream_chat(
    endpoint: ChatEndpoint, body: Mapping[str, Any], *, clock: Clock = time.perf_counter
) -> StreamedChat:
    """Send one streamed chat and time it.

    Raises:
        BenchmarkRequestError: the server refused it, broke off, or took longer than the endpoint's timeout.
    """
    request = {
        **body,
        "model": endpoint.served_name,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    reader = _StreamReader(clock)
    try:
        with anyio.fail_after(endpoint.timeout_s):
            async with endpoint.client.stream(
                "POST",
                endpoint.chat_url,
                json=request,
                headers=dict(endpoint.headers),
                timeout=endpoint.timeout_s,
            ) as response:
                if response.status_code != 200:
                    detail = (await response.aread()).decode(errors="replace")[:300]
                    raise BenchmarkRequestError(f"the model answered {response.status_code}: {detail}")
                async for line in response.aiter_lines():
                    reader.feed(line)
    except (httpx.HTTPError, TimeoutError) as exc:
        raise BenchmarkRequestError(f"a benchmark request failed: {exc or type(exc).__name__}") from exc
    return reader.result()


async def post_chat(endpoint: ChatEndpoint, body: Mapping[str, Any]) -> dict[str, Any]:
    """Send one chat without streaming and return the response document.

    Raises:
        BenchmarkRequestError: the server refused it or the exchange broke.
    """
    request = {**body, "model": endpoint.served_name, "stream": False}
    try:
        with anyio.fail_after(endpoint.timeout_s):
            response = await endpoint.client.post(
                endpoint.chat_url, json=request, headers=dict(endpoint.headers), timeout=endpoint.timeout_s
            )
    except (httpx.HTTPError, TimeoutError) as exc:
        raise BenchmarkRequestError(f"a benchmark request failed: {exc or type(exc).__name__}") from exc
    if response.status_code != 200:
        raise BenchmarkRequestError(f"the model answered {response.status_code}: {response.text[:300]}")
    document = response.json()
    if not isinstance(document, dict):
        raise BenchmarkRequestError("the model answered something other than a JSON object")
    return document


async def measure_run(
    endpoint: ChatEndpoint, bodies: Sequence[Mapping[str, Any]], *, clock: Clock = time.perf_counter
) -> tuple[RunMeasurement, list[StreamedChat]]:
    """Send ``bodies`` all at once (N = their count) and measure the run.

    Failed requests are counted; a run in which every request failed raises the last failure.

    Raises:
        BenchmarkRequestError: every request of the run failed.
    """
    done: list[StreamedChat] = []
    failures: list[BenchmarkRequestError] = []

    async def one(body: Mapping[str, Any]) -> None:
        try:
            done.append(await stream_chat(endpoint, body, clock=clock))
        except BenchmarkRequestError as exc:
            failures.append(exc)

    started = clock()
    with single_errors():
        async with anyio.create_task_group() as tasks:
            for body in bodies:
                tasks.start_soon(one, body)
    wall = clock() - started
    if not done:
        raise failures[-1]
    tokens = sum(chat.tokens for chat in done)
    ttfts = [chat.ttft_s for chat in done]
    measurement = RunMeasurement(
        per_request_tokens_per_s=median([chat.tokens_per_s for chat in done]),
        aggregate_tokens_per_s=tokens / wall if wall > 0 else 0.0,
        ttft_p50_s=nearest_rank(ttfts, 50),
        ttft_p95_s=nearest_rank(ttfts, 95),
        tokens=tokens,
        wall_s=wall,
        failed=len(failures),
    )
    return measurement, done


class _StreamReader:
    """Splits an OpenAI event stream into content, usage and timings, stamping the first token."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._started = clock()
        self._first: float | None = None
        self._chunks = 0
        self._parts: list[str] = []
        self._usage: Mapping[str, Any] | None = None
        self._timings: Mapping[str, Any] | None = None

    def feed(self, line: str) -> None:
        if not line.startswith("data:"):
            return
        data = line[5:].strip()
        if not data or data == "[DONE]":
            return
        now = self._clock()
        chunk = json.loads(data)
        if not isinstance(chunk, dict):
            return
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        if isinstance(chunk.get("timings"), dict):
            self._timings = chunk["timings"]
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            content = delta.get("content") or delta.get("reasoning_content")
            if content or delta.get("tool_calls"):
                self._first = self._first if self._first is not None else now
                self._chunks += 1
                self._parts.append(content or "")

    def result(self) -> StreamedChat:
        end = self._clock()
        first = self._first if self._first is not None else end
        counted = self._usage.get("completion_tokens") if self._usage else None
        tokens = counted if isinstance(counted, int) else self._chunks
        return StreamedChat(
            ttft_s=first - self._started,
            total_s=end - self._started,
            tokens=tokens,
            text="".join(self._parts),
            usage=self._usage,
            timings=self._timings,
        )
