"""The router issue's targets, each judged on what one run measured (ratios within the run, never timings).

A target whose inputs were not measured in the run (LiteLLM skipped, a quick run's missing point) is
``None``: neither met nor missed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from ._harness import LITELLM, BenchResults
from ._load import PointResult

__all__ = ["FULL", "MIN_OVER_LITELLM", "Verdict", "per_event_us", "verdicts"]

FULL: Final = "master+agent"
"""The path through both hops."""
_HOPS: Final = ("master", "agent")
_MB: Final = 1_000_000
_MAX_HOP_US: Final = 200.0
_MAX_EVENT_US: Final = 10.0
_MAX_GROWTH: Final = 1.2
_MAX_ADDED_P50_MS: Final = 0.5
_MIN_KEPT: Final = 0.10
_MIN_EVENTS_KEPT: Final = 0.60
MIN_OVER_LITELLM: Final = 10.0
"""The issue's bar: Mirbad's throughput over LiteLLM's, on every row."""
_MAX_RSS_MB: Final = {"agent": 60, "master": 120}


@dataclass(frozen=True)
class Verdict:
    """One target of the router issue and what this run reached."""

    target: str
    measured: str
    met: bool | None  # None: not measured in this run


def per_event_us(point: PointResult, process: str, events: int) -> float:
    """CPU microseconds ``process`` spent per streamed event of ``point``."""
    seconds = point.cpu_s.get(process)
    if seconds is None or not point.completed:
        return math.nan
    return seconds * 1e6 / (point.completed * events)


def verdicts(results: BenchResults) -> list[Verdict]:
    """Every target of the issue, in its order."""
    checks: list[Callable[[BenchResults], Verdict]] = [
        _hop_cpu,
        _event_cpu,
        _flat,
        _added_p50,
        _kept,
        _events_kept,
        _over_litellm,
    ]
    found = [check(results) for check in checks]
    for process, limit in _MAX_RSS_MB.items():
        target = f"{process} idle RSS ≤ {limit} MB"
        rss = results.rss_idle.get(process)
        measured = "not measured" if rss is None else f"{rss / _MB:.0f} MB"
        found.append(Verdict(target, measured, None if rss is None else rss / _MB <= limit))
    return found


def _hop_cpu(results: BenchResults) -> Verdict:
    target = f"CPU per proxied request ≤ {_MAX_HOP_US:g} µs per hop"
    costs = [
        (process, point.concurrency, point.cpu_us_per_request().get(process, math.nan))
        for point in _full_points(results)
        for process in _HOPS
    ]
    return _all_below(target, costs, _MAX_HOP_US, "µs")


def _event_cpu(results: BenchResults) -> Verdict:
    target = f"CPU per streamed event ≤ {_MAX_EVENT_US:g} µs per hop"
    events = results.options.stream_events
    streamed = _streamed(results, FULL)
    costs = [] if streamed is None else [(p, None, per_event_us(streamed, p, events)) for p in _HOPS]
    return _all_below(target, costs, _MAX_EVENT_US, "µs", digits=1)


def _flat(results: BenchResults) -> Verdict:
    top = max(results.options.concurrencies)
    target = f"CPU per request flat: c={top} within {_MAX_GROWTH:g}x of c=1 per hop"
    low, high = results.point(FULL, 1), results.point(FULL, top)
    if low is None or high is None or low is high:
        return Verdict(target, "not measured", None)
    ratios = [
        (process, None, high.cpu_us_per_request().get(process, math.nan) / low.cpu_us_per_request()[process])
        for process in _HOPS
        if low.cpu_us_per_request().get(process)
    ]
    return _all_below(target, ratios, _MAX_GROWTH, "x", digits=2)


def _added_p50(results: BenchResults) -> Verdict:
    target = f"master + agent add ≤ {_MAX_ADDED_P50_MS:g} ms to p50 at c=1"
    direct, full = results.point("direct", 1), results.point(FULL, 1)
    if direct is None or full is None:
        return Verdict(target, "not measured", None)
    added = full.p50_ms - direct.p50_ms
    return Verdict(target, f"+{added:.2f} ms", added <= _MAX_ADDED_P50_MS)


def _kept(results: BenchResults) -> Verdict:
    top = max(results.options.concurrencies)
    target = f"master + agent ≥ {_MIN_KEPT:.0%} of direct requests/s at c={top} ({results.generator})"
    direct, full = results.point("direct", top), results.point(FULL, top)
    if direct is None or full is None or not direct.rps:
        return Verdict(target, "not measured", None)
    kept = full.rps / direct.rps
    return Verdict(target, f"{kept:.1%} ({full.rps:,.0f} of {direct.rps:,.0f})", kept >= _MIN_KEPT)


def _events_kept(results: BenchResults) -> Verdict:
    target = f"master + agent ≥ {_MIN_EVENTS_KEPT:.0%} of direct streamed events/s"
    direct, full = _streamed(results, "direct"), _streamed(results, FULL)
    if direct is None or full is None or not direct.rps:
        return Verdict(target, "not measured", None)
    kept = full.rps / direct.rps
    return Verdict(target, f"{kept:.0%}", kept >= _MIN_EVENTS_KEPT)


def _over_litellm(results: BenchResults) -> Verdict:
    target = f"≥ {MIN_OVER_LITELLM:g}x LiteLLM's throughput on every row"
    pairs = [
        (results.point(FULL, c), results.point(LITELLM, c), f"c={c}") for c in results.options.concurrencies
    ]
    pairs.append((_streamed(results, FULL), _streamed(results, LITELLM), "streamed"))
    ratios = [(ours.rps / theirs.rps, row) for ours, theirs, row in pairs if ours and theirs and theirs.rps]
    # A row LiteLLM finished nothing in (long streams at c=64) is beyond any ratio; say so.
    unbounded = [row for ours, theirs, row in pairs if ours and ours.rps and theirs and not theirs.rps]
    if not ratios and not unbounded:
        return Verdict(target, f"not measured ({results.litellm_note})", None)
    measured = ", ".join(
        [f"{row} {ratio:.1f}x" for ratio, row in ratios]
        + [f"{row}: LiteLLM completed none in the window" for row in unbounded]
    )
    return Verdict(target, measured, all(ratio >= MIN_OVER_LITELLM for ratio, _ in ratios))


def _all_below(
    target: str, values: Sequence[tuple[str, int | None, float]], limit: float, unit: str, digits: int = 0
) -> Verdict:
    known = [(name, c, value) for name, c, value in values if not math.isnan(value)]
    if not known:
        return Verdict(target, "not measured", None)
    measured = ", ".join(
        f"{name}{'' if c is None else f' c={c}'} {value:.{digits}f} {unit}" for name, c, value in known
    )
    return Verdict(target, measured, all(value <= limit for _, _, value in known))


def _full_points(results: BenchResults) -> list[PointResult]:
    found = (results.point(FULL, c) for c in results.options.concurrencies)
    return [point for point in found if point is not None]


def _streamed(results: BenchResults, path: str) -> PointResult | None:
    return next((point for point in results.streamed if point.path == path), None)
