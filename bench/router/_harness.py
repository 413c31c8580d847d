"""One benchmark run: bring the stack up, measure every path at every concurrency, write the report.

Paths are interleaved at each concurrency (direct, agent, master+agent, then the next concurrency), so a
neighbour's burst on a shared machine lands on all three rather than on one path's whole series.
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

from ._load import PointResult, SseResult, measure_point, measure_sse
from ._procfs import available_cores, machine_description, rss_bytes
from ._stack import Stack, running_stack

__all__ = ["DEFAULT_REPORT", "BenchOptions", "BenchResults", "run_benchmark"]

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

    duration_s: float = 3.0
    warmup_s: float = 0.5
    concurrencies: tuple[int, ...] = (1, 16, 64)
    sse_streams: int = 100
    sse_events: int = 5
    sse_gap_ms: float = 2.0
    idle_s: float = 3.0
    work_dir: Path | None = None
    quick: bool = False

    @classmethod
    def quick_run(cls, work_dir: Path | None = None) -> BenchOptions:
        """A run of a few seconds that exercises everything (for the smoke test, not for numbers)."""
        return cls(
            duration_s=0.3,
            warmup_s=0.1,
            sse_streams=5,
            sse_events=3,
            idle_s=0.5,
            work_dir=work_dir,
            quick=True,
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
    sse: list[SseResult]
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
    with _work_dir(options.work_dir) as work_dir, running_stack(work_dir) as stack:
        time.sleep(options.idle_s)
        rss_idle = _rss(stack.pids)
        points, sse = anyio.run(_measure, stack, options, **_backend())
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
        sse=sse,
        rss_idle=rss_idle,
        rss_after=rss_after,
        cores=available_cores(),
    )


async def _measure(stack: Stack, options: BenchOptions) -> tuple[list[PointResult], list[SseResult]]:
    processes = {**stack.pids, "load generator": os.getpid()}
    points: list[PointResult] = []
    for concurrency in options.concurrencies:
        for target in stack.targets:
            point = await measure_point(
                target, concurrency, options.duration_s, options.warmup_s, processes, stack.agent_port
            )
            points.append(point)
    sse = [
        await measure_sse(target, options.sse_streams, options.sse_events, options.sse_gap_ms)
        for target in stack.targets
    ]
    return points, sse


def _backend() -> dict[str, Any]:
    # The load generator is Python too: uvloop makes it cheaper, leaving more of the cores to the stack.
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
