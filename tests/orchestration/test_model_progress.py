"""Stalled and Slow from a model's metrics history: vLLM's token counters, llama-server's decode steps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_orchestration.fleet import ModelProgress, ProgressThresholds, judge_progress
from mirbad_protocol import ModelMetrics, RuntimeKind

T0 = datetime(2026, 1, 1, tzinfo=UTC)
STEP_S = 5.0
THRESHOLDS = ProgressThresholds()


Series = tuple[list[float], list[float]]
"""A progress counter and the running requests, one value of each every STEP_S."""


def history(series: Series, runtime: RuntimeKind) -> list[ModelMetrics]:
    """The samples of ``series``, with the counter where the runtime reports its progress."""
    counters, running = series
    samples = []
    for index, (counter, load) in enumerate(zip(counters, running, strict=True)):
        at = T0 + timedelta(seconds=index * STEP_S)
        sample = ModelMetrics(model_id="m", at=at, requests_running=load)
        if runtime == "llamacpp":  # its token counters move only when a request ends
            update = {"decode_calls_total": counter, "generation_tokens_total": 0.0}
        else:
            update = {"generation_tokens_total": counter, "prompt_tokens_total": 0.0}
        sample = sample.model_copy(update=update)
        samples.append(sample)
    return samples


def steady(seconds: float, rate: float, running: float = 1.0, start: float = 0.0) -> Series:
    count = int(seconds / STEP_S) + 1
    return [start + index * rate * STEP_S for index in range(count)], [running] * count


def then(first: Series, seconds: float, rate: float, running: float = 1.0) -> Series:
    counters, loads = first
    more, more_loads = steady(seconds, rate, running, start=counters[-1])
    return counters + more[1:], loads + more_loads[1:]


RUNTIMES: list[RuntimeKind] = ["vllm", "llamacpp"]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_model_that_generates_steadily_is_progressing(runtime: RuntimeKind) -> None:
    counters, running = steady(600, rate=40)
    assert judge_progress(history((counters, running), runtime), runtime, THRESHOLDS) is None


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_requests_running_without_a_token_for_the_window_is_stalled(runtime: RuntimeKind) -> None:
    counters, running = then(steady(300, rate=40), 120, rate=0)

    progress = judge_progress(history((counters, running), runtime), runtime, THRESHOLDS)

    assert progress is not None
    assert progress.state == "Stalled"
    unit = "decode steps" if runtime == "llamacpp" else "tokens"
    assert progress.reason == f"1 requests running and no {unit} processed for 120 s"


def test_a_silence_shorter_than_the_stall_window_reads_slow() -> None:
    counters, running = then(steady(300, rate=40), 115, rate=0)
    progress = judge_progress(history((counters, running), "vllm"), "vllm", THRESHOLDS)
    assert progress is not None
    assert progress.state == "Slow"


def test_an_idle_model_is_not_stalled() -> None:
    counters, running = then(steady(300, rate=40), 200, rate=0, running=0)
    assert judge_progress(history((counters, running), "vllm"), "vllm", THRESHOLDS) is None


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_stalled_model_that_generates_again_is_cleared(runtime: RuntimeKind) -> None:
    stalled = then(steady(300, rate=40), 150, rate=0)
    flagged = judge_progress(history(stalled, runtime), runtime, THRESHOLDS)
    assert isinstance(flagged, ModelProgress)
    assert flagged.state == "Stalled"
    # Tokens again: no longer Stalled at once, and no longer Slow once a slow window at its speed passed.
    recovering = judge_progress(history(then(stalled, 10, rate=40), runtime), runtime, THRESHOLDS)
    assert recovering is not None
    assert recovering.state == "Slow"
    recovered = then(stalled, 60, rate=40)
    assert judge_progress(history(recovered, runtime), runtime, THRESHOLDS) is None


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_under_half_its_median_at_the_same_load_is_slow(runtime: RuntimeKind) -> None:
    counters, running = then(steady(600, rate=40, running=2), 60, rate=10, running=2)

    progress = judge_progress(history((counters, running), runtime), runtime, THRESHOLDS)

    assert progress is not None
    assert progress.state == "Slow"
    unit = "decode steps" if runtime == "llamacpp" else "tokens"
    assert progress.reason == (
        f"10.0 {unit}/s over the last 60 s at 2 running requests,"
        f" under 50% of its recent median of 40.0 {unit}/s at that load"
    )


def test_a_rate_seen_only_at_another_load_is_no_baseline() -> None:
    # Eight requests at once go faster in total than one alone: one request is not slow beside them.
    counters, running = then(steady(600, rate=200, running=8), 60, rate=40, running=1)
    assert judge_progress(history((counters, running), "vllm"), "vllm", THRESHOLDS) is None


def test_a_slow_model_that_speeds_up_again_is_cleared() -> None:
    slow = then(steady(600, rate=40, running=2), 60, rate=10, running=2)
    fast = then(slow, 60, rate=40, running=2)
    assert judge_progress(history(fast, "vllm"), "vllm", THRESHOLDS) is None


def test_a_restart_starts_the_history_afresh() -> None:
    # The counter fell: a new instance, whose 120 s of history do not cover the stall window yet.
    counters, running = then(steady(300, rate=40), 0, rate=0)
    counters += [0.0] * 24
    running += [1.0] * 24
    assert judge_progress(history((counters, running), "vllm"), "vllm", THRESHOLDS) is None


def test_a_llama_server_without_decode_steps_is_not_judged() -> None:
    # An older agent: llama-server's token counters move only when a request ends, so nothing can be told.
    samples = [
        sample.model_copy(update={"decode_calls_total": None})
        for sample in history(then(steady(300, rate=40), 200, rate=0), "llamacpp")
    ]
    assert judge_progress(samples, "llamacpp", THRESHOLDS) is None


def test_too_short_a_history_is_not_judged() -> None:
    assert judge_progress([], "vllm", THRESHOLDS) is None
    assert judge_progress(history(([5.0], [1.0]), "vllm"), "vllm", THRESHOLDS) is None


@pytest.mark.parametrize(
    ("thresholds", "message"),
    [
        (
            ProgressThresholds(stall_window_s=5),
            "stall_window_s: 5 s is shorter than the telemetry poll interval (10 s);"
            " a window needs two samples, so it could never fire",
        ),
        (
            ProgressThresholds(slow_window_s=2),
            "slow_window_s: 2 s is shorter than the telemetry poll interval",
        ),
        (ProgressThresholds(slow_fraction=1.5), "slow_fraction: 1.5 must lie between 0 and 1"),
        (ProgressThresholds(baseline_s=60), "baseline_s: must be longer than slow_window_s"),
        (ProgressThresholds(min_baseline_rates=0), "min_baseline_rates"),
    ],
)
def test_thresholds_that_cannot_fire_are_refused_with_why(
    thresholds: ProgressThresholds, message: str
) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        thresholds.check(poll_interval_s=10)


def test_the_default_thresholds_fit_the_default_poll_interval() -> None:
    THRESHOLDS.check(poll_interval_s=10)


@given(
    rates=st.lists(st.floats(min_value=1, max_value=1e4), min_size=30, max_size=120),
    running=st.integers(min_value=1, max_value=64),
)
def test_a_model_that_never_stops_generating_is_never_stalled(rates: list[float], running: int) -> None:
    counters = [0.0]
    for rate in rates:
        counters.append(counters[-1] + rate * STEP_S)
    progress = judge_progress(
        history((counters, [float(running)] * len(counters)), "vllm"), "vllm", THRESHOLDS
    )
    assert progress is None or progress.state == "Slow"
