"""One benchmark run: bring the stack up, measure every path at every concurrency, write the report.

Paths are interleaved at each concurrency (direct, agent, master+agent, litellm, then the next
concurrency), so a neighbour's burst on a shared machine lands on all of them rather than on one path's
whole series. The load generator is ``wrk`` when it is on PATH (:mod:`bench.router._wrk`), else the
Python one (:mod:`bench.router._load`), with the reason printed and written into the report.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import platform
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import anyio

from ._litellm import LiteLlm, running_litellm
from ._load import CHAT_BODY, PointResult, SseResult, Target, measure_point, measure_sse, stream_body
from ._procfs import available_cores, machine_description, rss_bytes, time_wait_sockets
from ._stack import Stack, running_stack
from ._terminator_process import running_terminator
from ._wrk import WrkRun, response_bytes, run_wrk, wrk_missing_reason

__all__ = ["DEFAULT_REPORT", "LITELLM", "TERMINATOR", "BenchOptions", "BenchResults", "run_benchmark"]

LITELLM: Final = "litellm"
"""The name of the LiteLLM path and of its process."""
TERMINATOR: Final = "TLS terminator"
"""The name of the process that lets wrk reach the agent's mutual TLS."""

# How long the window waits at most for the warm-up's closes, and how often it looks (see _settle).
_SETTLE_S: Final = 3.0
_SETTLE_POLL_S: Final = 0.25
DEFAULT_REPORT: Final = Path(__file__).resolve().parents[2] / "docs" / "performance.md"
"""Where the report goes unless told otherwise."""


@dataclass(frozen=True)
class BenchOptions:
    """How long and how hard to measure.

    Attributes:
        duration_s: the measured window of each point (after ``warmup_s``).
        concurrencies: the numbers of concurrent clients, each a point per path.
        sse_streams: streams timed per path (one at a time), each of ``sse_events`` events.
        idle_s: how long the stack sits idle before its resident memory is read.
        work_dir: where the data directory and logs go; a temporary folder (removed after) when None.
    """

    duration_s: float = 5.0
    warmup_s: float = 1.0
    concurrencies: tuple[int, ...] = (1, 64)
    sse_streams: int = 100
    sse_events: int = 5
    sse_gap_ms: float = 2.0
    stream_concurrency: int = 64
    stream_events: int = 200
    idle_s: float = 3.0
    work_dir: Path | None = None
    quick: bool = False
    litellm: bool = True
    python_load: bool = False

    @classmethod
    def quick_run(cls, work_dir: Path | None = None) -> BenchOptions:
        """A run of a few seconds that exercises everything (for the smoke test, not for numbers)."""
        return cls(
            duration_s=1.0,
            warmup_s=0.0,
            sse_streams=5,
            sse_events=3,
            stream_concurrency=4,
            stream_events=20,
            idle_s=0.5,
            work_dir=work_dir,
            quick=True,
            litellm=False,
        )


@dataclass(frozen=True)
class BenchResults:
    """Everything one run measured, in the order it was measured."""

    options: BenchOptions
    started_at: datetime
    machine: str
    python: str
    load_before: str
    load_after: str
    startup_s: float
    wall_s: float
    points: list[PointResult]
    streamed: list[PointResult]
    sse: list[SseResult]
    generator: str
    generator_note: str
    litellm_note: str
    rss_idle: dict[str, int]
    rss_after: dict[str, int]
    cores: int

    def point(self, path: str, concurrency: int) -> PointResult | None:
        """The point of ``path`` at ``concurrency``, if it was measured."""
        return next((p for p in self.points if p.path == path and p.concurrency == concurrency), None)


def run_benchmark(options: BenchOptions) -> BenchResults:
    """Run the whole benchmark and return what it measured (the caller writes the report)."""
    started_at = datetime.now(UTC)
    began = time.monotonic()
    load_before = _load_average()
    missing = "asked for with --python-load" if options.python_load else wrk_missing_reason()
    if missing is not None:
        print(f"bench: load generator is Python, not wrk: {missing}", flush=True)
    with _work_dir(options.work_dir) as work_dir, running_stack(work_dir) as stack:
        time.sleep(options.idle_s)
        rss_idle = _rss(stack.pids)
        with contextlib.ExitStack() as extras:
            litellm = _litellm(extras, options, work_dir, stack)
            wrk_targets = None if missing else _wrk_targets(extras, stack, litellm)
            runner = _Runner(options, stack, litellm, work_dir, wrk_targets)
            points, streamed = runner.points(), runner.streamed()
            sse = anyio.run(_measure_sse, stack, options, **_backend())
        rss_after = _rss(stack.pids)
    return BenchResults(
        options=options,
        started_at=started_at,
        machine=machine_description(),
        python=f"{platform.python_implementation()} {platform.python_version()}",
        load_before=load_before,
        load_after=_load_average(),
        startup_s=stack.startup_s,
        wall_s=time.monotonic() - began,
        points=points,
        streamed=streamed,
        sse=sse,
        rss_idle=rss_idle,
        rss_after=rss_after,
        cores=available_cores(),
        generator="python" if missing else "wrk",
        generator_note=missing or "",
        litellm_note=(litellm.skipped or f"LiteLLM {litellm.version}") if litellm else "not asked for",
    )


def _litellm(
    extras: contextlib.ExitStack, options: BenchOptions, work_dir: Path, stack: Stack
) -> LiteLlm | None:
    if not options.litellm:
        return None
    return extras.enter_context(running_litellm(work_dir, stack.upstream_port, stack.upstream_key))


def _wrk_targets(extras: contextlib.ExitStack, stack: Stack, litellm: LiteLlm | None) -> list[Target]:
    """The targets as wrk reaches them: the agent through the TLS terminator, LiteLLM when it runs."""
    direct, agent, full = stack.targets
    terminator = extras.enter_context(running_terminator(stack.data_dir, stack.agent_port))
    path = agent.url.split("/", 3)[3]
    plain_agent = Target(agent.name, f"http://127.0.0.1:{terminator.port}/{path}", agent.headers)
    targets = [direct, plain_agent, full]
    if litellm is not None and litellm.pid is not None:
        targets.append(_litellm_target(litellm))
    stack.pids[TERMINATOR] = terminator.pid
    return targets


def _litellm_target(litellm: LiteLlm) -> Target:
    return Target(LITELLM, litellm.url, {"Authorization": f"Bearer {litellm.master_key}"})


class _Runner:
    """Measures the points with wrk when it has targets for it, else with the Python generator."""

    def __init__(
        self,
        options: BenchOptions,
        stack: Stack,
        litellm: LiteLlm | None,
        work_dir: Path,
        wrk: list[Target] | None,
    ) -> None:
        self._options = options
        self._wrk = wrk
        self._scripts = work_dir / "wrk"
        self._targets = wrk if wrk is not None else list(stack.targets)
        if wrk is None and litellm is not None and litellm.pid is not None:
            self._targets.append(_litellm_target(litellm))
        self._pids = dict(stack.pids)
        if litellm is not None and litellm.pid is not None:
            self._pids[LITELLM] = litellm.pid
        self._agent_port = stack.agent_port

    def points(self) -> list[PointResult]:
        """Every target at every concurrency, small chat completions."""
        return [
            self._point(target, concurrency, CHAT_BODY)
            for concurrency in self._options.concurrencies
            for target in self._targets
        ]

    def streamed(self) -> list[PointResult]:
        """Every target with streamed completions of ``stream_events`` events back to back."""
        body = stream_body(self._options.stream_events)
        concurrency = self._options.stream_concurrency
        return [self._point(target, concurrency, body, by_bytes=True) for target in self._targets]

    def _point(self, target: Target, concurrency: int, body: bytes, *, by_bytes: bool = False) -> PointResult:
        options = self._options
        if self._wrk is None:
            processes = {**self._pids, "load generator": os.getpid()}
            return anyio.run(
                measure_point,
                target,
                concurrency,
                options.duration_s,
                options.warmup_s,
                processes,
                self._agent_port,
                body,
                **_backend(),
            )
        if options.warmup_s:
            self._wrk_run(target, concurrency, body, options.warmup_s)
            # wrk drops its connections at the end of the warm-up; the proxies then cancel the requests in
            # flight and close their connections upstream (as they must), which would count as churn in
            # the window. The window starts once those closes have landed.
            _settle(self._agent_port)
        # A stream's bytes, taken before the window: a proxy too slow to finish one of 64 long streams in
        # the window (LiteLLM) still relays events, and only the bytes read say how many.
        whole = response_bytes(target.url, body, target.headers) if by_bytes else 0
        run = self._wrk_run(target, concurrency, body, options.duration_s)
        return PointResult(
            path=target.name,
            concurrency=concurrency,
            duration_s=run.duration_s,
            requests=run.requests,
            errors=run.errors,
            p50_ms=run.p50_ms,
            p99_ms=run.p99_ms,
            cpu_s=run.cpu_s,
            machine_busy=run.machine_busy,
            agent_connections_closed=run.closed,
            generator="wrk",
            streams_read=run.bytes_read / whole if whole else None,
        )

    def _wrk_run(self, target: Target, concurrency: int, body: bytes, duration_s: float) -> WrkRun:
        return run_wrk(
            target.url,
            body,
            target.headers,
            concurrency,
            duration_s,
            self._scripts,
            self._pids,
            self._agent_port,
        )


def _settle(port: int) -> None:
    """Wait (at most ``_SETTLE_S``) until the TIME-WAIT count of ``port``'s connections stops changing."""
    deadline = time.monotonic() + _SETTLE_S
    time.sleep(_SETTLE_POLL_S)  # measured: the closes land 60-120 ms after wrk's last connection goes
    seen = time_wait_sockets(port)
    while time.monotonic() < deadline:
        time.sleep(_SETTLE_POLL_S)
        now = time_wait_sockets(port)
        if now == seen:
            return
        seen = now


async def _measure_sse(stack: Stack, options: BenchOptions) -> list[SseResult]:
    return [
        await measure_sse(target, options.sse_streams, options.sse_events, options.sse_gap_ms)
        for target in stack.targets
    ]


def _backend() -> dict[str, Any]:
    # The Python load generator and SSE timer: uvloop makes them cheaper, leaving more to the stack.
    if importlib.util.find_spec("uvloop") is None:
        return {}
    return {"backend_options": {"use_uvloop": True}}


@contextlib.contextmanager
def _work_dir(given: Path | None) -> Iterator[Path]:
    if given is not None:
        yield given
        return
    with tempfile.TemporaryDirectory(prefix="mirbad-bench-") as folder:
        yield Path(folder)


def _rss(pids: Mapping[str, int]) -> dict[str, int]:
    found = {name: rss_bytes(pid) for name, pid in pids.items()}
    return {name: value for name, value in found.items() if value is not None}


def _load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"
