"""Whether a Ready model is still making progress, judged from its metrics history.

``/health`` answers while an engine is wedged, so the master reads the model's own counters instead.
Its progress counter is what moves while it works: vLLM's generated plus prompt tokens, or llama-server's
decode steps (``decode_calls_total``: llama-server's token counters only move when a request ends, so a
long generation would look stuck on them). Two judgements, both over the newest samples:

* **Stalled**: requests were running in every sample of the last ``stall_window_s`` and the counter did
  not move across it.
* **Slow**: requests were running throughout the last ``slow_window_s``, and the counter's rate over it
  is under ``slow_fraction`` of the median rate the model had earlier, over ``baseline_s``, between
  samples at a similar load (a similar number of running requests: a batch of eight is slower per
  request and faster in total than one request alone, so only like is compared with like).

Nothing is judged without enough history (a window not yet covered, too few earlier rates at that load)
or without the counter (a llama-server model on an older agent): no judgement reads as progressing. The
judgement is made afresh on every read, so it clears as soon as the newest samples show progress again.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from mirbad_protocol import ModelMetrics, RuntimeKind

__all__ = ["ModelProgress", "ProgressThresholds", "judge_progress"]


@dataclass(frozen=True)
class ModelProgress:
    """A model that is not progressing as it should.

    Attributes:
        state: ``Stalled`` or ``Slow``.
        reason: the figures that made the judgement, for a person.
    """

    state: Literal["Stalled", "Slow"]
    reason: str


@dataclass(frozen=True)
class ProgressThresholds:
    """When a model is flagged (see the module's description).

    Attributes:
        stall_window_s: how long requests may run with nothing generated; long enough for a long
            prefill on vLLM, whose prompt tokens count only once a prompt is done.
        slow_window_s: the window whose rate is compared with the model's median.
        slow_fraction: the share of its median rate under which a model is Slow.
        baseline_s: how far back the median reaches.
        min_baseline_rates: the earlier rates at a similar load a median needs.
    """

    stall_window_s: float = 120.0
    slow_window_s: float = 60.0
    slow_fraction: float = 0.5
    baseline_s: float = 1800.0
    min_baseline_rates: int = 6

    def check(self, poll_interval_s: float) -> None:
        """Refuse thresholds that could never fire with samples ``poll_interval_s`` apart.

        Raises:
            ValueError: naming the threshold and why.
        """
        for name, window in (("stall_window_s", self.stall_window_s), ("slow_window_s", self.slow_window_s)):
            if window < poll_interval_s:
                raise ValueError(
                    f"{name}: {window:g} s is shorter than the telemetry poll interval"
                    f" ({poll_interval_s:g} s); a window needs two samples, so it could never fire"
                )
        if not 0 < self.slow_fraction < 1:
            raise ValueError(f"slow_fraction: {self.slow_fraction:g} must lie between 0 and 1")
        if self.baseline_s <= self.slow_window_s:
            raise ValueError("baseline_s: must be longer than slow_window_s, or there is no earlier rate")
        if self.min_baseline_rates < 1:
            raise ValueError("min_baseline_rates: a median needs at least one rate")


@dataclass(frozen=True)
class _Point:
    at_s: float
    counter: float
    running: float


def judge_progress(
    history: Sequence[ModelMetrics], runtime: RuntimeKind, thresholds: ProgressThresholds
) -> ModelProgress | None:
    """Judge a Ready model from its samples (oldest first): Stalled, Slow, or None when progressing."""
    points = _points(history, runtime)
    if len(points) < 2:
        return None
    unit = "decode steps" if runtime == "llamacpp" else "tokens"
    return _stalled(points, thresholds, unit) or _slow(points, thresholds, unit)


def _points(history: Sequence[ModelMetrics], runtime: RuntimeKind) -> list[_Point]:
    points: list[_Point] = []
    for sample in history:
        counter = _counter(sample, runtime)
        if counter is None:
            continue
        at_s = (sample.at - history[0].at) / timedelta(seconds=1)
        if points and (at_s <= points[-1].at_s or counter < points[-1].counter):
            points.clear()  # a reset (a restart) or a clock step: only the current run counts
        points.append(_Point(at_s, counter, sample.requests_running))
    return points


def _counter(sample: ModelMetrics, runtime: RuntimeKind) -> float | None:
    if runtime == "llamacpp":
        return sample.decode_calls_total
    if sample.generation_tokens_total is None:
        return None
    return sample.generation_tokens_total + (sample.prompt_tokens_total or 0.0)


def _window(points: list[_Point], window_s: float) -> list[_Point] | None:
    """The newest points that cover ``window_s``, from the last one at or before its start; None if none."""
    start = points[-1].at_s - window_s
    for index in range(len(points) - 1, -1, -1):
        if points[index].at_s <= start:
            return points[index:]
    return None


def _stalled(points: list[_Point], thresholds: ProgressThresholds, unit: str) -> ModelProgress | None:
    window = _window(points, thresholds.stall_window_s)
    if window is None or any(point.running <= 0 for point in window):
        return None
    if window[-1].counter != window[0].counter:
        return None
    running = window[-1].running
    # How long it has been quiet: back to the first sample with the counter where it stands.
    quiet_since = window[0]
    for point in reversed(points[: len(points) - len(window)]):
        if point.counter != quiet_since.counter or point.running <= 0:
            break
        quiet_since = point
    quiet_s = window[-1].at_s - quiet_since.at_s
    return ModelProgress(
        "Stalled", f"{running:g} requests running and no {unit} processed for {quiet_s:.0f} s"
    )


def _slow(points: list[_Point], thresholds: ProgressThresholds, unit: str) -> ModelProgress | None:
    window = _window(points, thresholds.slow_window_s)
    if window is None or any(point.running <= 0 for point in window):
        return None
    load = window[-1].running
    current = _rate(window[0], window[-1])
    start_s = window[0].at_s
    earlier = [
        point for point in points if point.at_s <= start_s and point.at_s >= start_s - thresholds.baseline_s
    ]
    rates = [
        _rate(before, after)
        for before, after in itertools.pairwise(earlier)
        if _similar(before.running, load) and _similar(after.running, load)
    ]
    if len(rates) < thresholds.min_baseline_rates:
        return None
    median = statistics.median(rates)
    if median <= 0 or current >= thresholds.slow_fraction * median:
        return None
    return ModelProgress(
        "Slow",
        f"{current:.1f} {unit}/s over the last {thresholds.slow_window_s:g} s at {load:g} running requests,"
        f" under {thresholds.slow_fraction:.0%} of its recent median of {median:.1f} {unit}/s at that load",
    )


def _rate(before: _Point, after: _Point) -> float:
    return (after.counter - before.counter) / (after.at_s - before.at_s)


def _similar(running: float, load: float) -> bool:
    # Within a quarter of the load, and at least one request either way: 1 and 2 running are alike.
    return running > 0 and abs(running - load) <= max(1.0, 0.25 * load)
