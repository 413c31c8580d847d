"""The load generator: closed-loop workers over httpx, and the SSE first-event delay.

Each point runs ``concurrency`` workers that send one chat completion after another on kept-alive
connections for a warm-up and then a measured window. Only requests that finish inside the window
count toward requests/s; only those that also started inside it give a latency. The CPU time every
process of the stack used during the window is sampled too, which is what explains a ceiling on a
machine whose cores the load generator shares with the servers.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import anyio
import httpx

from ._procfs import CpuSample
from ._upstream import STAMP_FIELD

__all__ = [
    "CHAT_BODY",
    "PointResult",
    "SseResult",
    "Target",
    "measure_point",
    "measure_sse",
    "percentile",
    "stream_body",
]

CHAT_BODY: Final = json.dumps(
    {"model": "bench", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
).encode()
"""The small chat completion every request of a point posts."""
_STAMP: Final = re.compile(rb'"' + STAMP_FIELD.encode() + rb'":(\d+)')
_REQUEST_TIMEOUT_S: Final = 15.0
_SLACK_S: Final = 60.0


@dataclass(frozen=True)
class Target:
    """One way to reach the upstream's chat completions.

    Attributes:
        name: ``direct``, ``agent`` or ``master+agent``.
        url: the full URL of ``/v1/chat/completions`` along that path.
        headers: headers every request carries (the instance key, for ``direct``).
        ssl_context: the client TLS context (the master's certificate, for the agent), else None.
    """

    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    ssl_context: ssl.SSLContext | None = None

    def client(self, verify: ssl.SSLContext) -> httpx.AsyncClient:
        """A client for this path with one kept-alive connection.

        One client per worker, not one pool for all: httpcore's pool does work per request that grows
        with the connections it holds, which at c=64 would make the load generator measure itself.
        """
        return httpx.AsyncClient(
            verify=self.ssl_context or verify,
            trust_env=False,
            timeout=_REQUEST_TIMEOUT_S,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            headers={"content-type": "application/json", **self.headers},
        )


@dataclass(frozen=True)
class PointResult:
    """Requests/s and latency of one path at one concurrency.

    Attributes:
        cpu_s: CPU seconds each process (master, agent, upstream, load generator) used in the window.
        machine_busy: the share of all the machine's cores busy in the window, with anything (other
            work on a shared machine included).
        agent_connections_closed: connections to or from the agent's port closed in the window (new
            TIME-WAIT sockets): each is a TLS connection that was opened and thrown away.
        streams_read: for streamed completions under wrk, the bytes read in the window over the bytes
            of one whole stream (None: count whole responses).
    """

    path: str
    concurrency: int
    duration_s: float
    requests: int
    errors: int
    p50_ms: float
    p99_ms: float
    cpu_s: dict[str, float]
    machine_busy: float
    agent_connections_closed: int
    generator: str = "python"
    streams_read: float | None = None

    @property
    def completed(self) -> float:
        """Requests answered in the window; streams measured by bytes count a partly read one by its share."""
        return self.requests if self.streams_read is None else self.streams_read

    @property
    def rps(self) -> float:
        """Successful requests (or streams, see :attr:`completed`) per second in the window."""
        return self.completed / self.duration_s

    def stack_busy(self, cores: int) -> float:
        """The share (0..1) of ``cores`` the measured processes kept busy in the window."""
        return sum(self.cpu_s.values()) / (self.duration_s * cores)

    def cpu_us_per_request(self) -> dict[str, float]:
        """CPU microseconds each process spent per successful request."""
        if not self.requests:
            return dict.fromkeys(self.cpu_s, math.nan)
        return {name: seconds * 1e6 / self.requests for name, seconds in self.cpu_s.items()}


@dataclass(frozen=True)
class SseResult:
    """How long streamed events take from the upstream's write to the client's read, along one path."""

    path: str
    streams: int
    errors: int
    first_ms: list[float]
    later_ms: list[float]


@dataclass
class _Tally:
    latencies_s: list[float] = field(default_factory=list)
    requests: int = 0
    errors: int = 0


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` in 0..1) of ``values``; NaN when there are none."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


async def measure_point(
    target: Target,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    pids: Mapping[str, int],
    agent_port: int | None = None,
    body: bytes = CHAT_BODY,
) -> PointResult:
    """Run ``concurrency`` workers against ``target`` for a warm-up plus ``duration_s``.

    Args:
        pids: the processes whose CPU time is sampled (name -> pid).
        agent_port: the agent's port, whose closed connections are counted.
        body: what every request posts (a streamed request is read to its end).
    """
    tally = _Tally()
    start = time.perf_counter() + warmup_s
    end = start + duration_s
    samples: list[CpuSample] = []
    verify = ssl.create_default_context()  # shared: making one per client costs milliseconds each
    with anyio.fail_after(warmup_s + duration_s + _SLACK_S):
        async with contextlib.AsyncExitStack() as clients, anyio.create_task_group() as group:
            group.start_soon(_sample_cpu, dict(pids), agent_port, start, end, samples)
            for _ in range(concurrency):
                client = await clients.enter_async_context(target.client(verify))
                group.start_soon(_worker, client, target.url, body, start, end, tally)
    complete = len(samples) == 2
    return PointResult(
        path=target.name,
        concurrency=concurrency,
        duration_s=duration_s,
        requests=tally.requests,
        errors=tally.errors,
        p50_ms=percentile(tally.latencies_s, 0.50) * 1000,
        p99_ms=percentile(tally.latencies_s, 0.99) * 1000,
        cpu_s=samples[1].delta(samples[0]) if complete else {},
        machine_busy=samples[1].machine_busy(samples[0]) if complete else math.nan,
        agent_connections_closed=samples[1].closed - samples[0].closed if complete else 0,
    )


async def _worker(
    client: httpx.AsyncClient, url: str, body: bytes, start: float, end: float, tally: _Tally
) -> None:
    while (sent := time.perf_counter()) < end:
        try:
            response = await client.post(url, content=body)
            ok = response.status_code == 200
        except httpx.HTTPError:
            ok = False
        done = time.perf_counter()
        if start <= done <= end:
            if not ok:
                tally.errors += 1
            else:
                tally.requests += 1
                if sent >= start:
                    tally.latencies_s.append(done - sent)
        if not ok:
            await anyio.sleep(0.01)  # a refusing path must not turn into a busy loop


async def _sample_cpu(
    pids: dict[str, int], port: int | None, start: float, end: float, samples: list[CpuSample]
) -> None:
    for moment in (start, end):
        await anyio.sleep(max(0.0, moment - time.perf_counter()))
        samples.append(CpuSample.take(pids, port))


def stream_body(events: int, gap_ms: float = 0.0) -> bytes:
    """A streamed chat completion of ``events`` events ``gap_ms`` apart (0: back to back)."""
    return json.dumps(
        {
            "model": "bench",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": events,
            "stream": True,
            "gap_ms": gap_ms,
        }
    ).encode()


async def measure_sse(target: Target, streams: int, events: int, gap_ms: float) -> SseResult:
    """Open ``streams`` streams one after another (after three for warm-up); time every event."""
    body = stream_body(events, gap_ms)
    first: list[float] = []
    later: list[float] = []
    errors = 0
    budget_s = (streams + 3) * (events * gap_ms / 1000 + _REQUEST_TIMEOUT_S)
    with anyio.fail_after(min(budget_s, 10 * _SLACK_S)):
        async with target.client(ssl.create_default_context()) as client:
            for number in range(streams + 3):
                delays = await _one_stream(client, target.url, body)
                if delays is None:
                    errors += 1
                elif number >= 3 and delays:
                    first.append(delays[0])
                    later.extend(delays[1:])
    return SseResult(target.name, len(first), errors, first, later)


async def _one_stream(client: httpx.AsyncClient, url: str, body: bytes) -> list[float] | None:
    """The delay of each event of one stream in ms, or None when the stream failed."""
    delays: list[float] = []
    pending = b""
    try:
        async with client.stream("POST", url, content=body) as response:
            if response.status_code != 200:
                await response.aread()
                return None
            async for chunk in response.aiter_raw():
                arrived = time.monotonic_ns()
                pending += chunk
                *complete, pending = pending.split(b"\n\n")
                for event in complete:
                    stamp = _STAMP.search(event)
                    if stamp is not None:
                        delays.append((arrived - int(stamp[1])) / 1e6)
    except httpx.HTTPError:
        return None
    return delays
