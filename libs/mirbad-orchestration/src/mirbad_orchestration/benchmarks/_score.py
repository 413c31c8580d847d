"""Scoring a preset run against a baseline, and its guards.

The score is the weighted geometric mean of the candidate ÷ baseline ratios of the preset's components,
a latency's ratio inverted (so above 1 is better for every component). Only the components measured on
both sides count, their weights renormalized: a run that could not send a 64K prompt (its max model len
is shorter) is scored on the rest, the way the baseline would be. A geometric mean because a run twice
as fast on one component and half as fast on another of the same weight is no better, however large the
numbers. A measurement that is not a finite positive number cannot be a ratio: it rejects the run
instead of scoring it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from mirbad_orchestration.exceptions import RejectedMeasurementError
from mirbad_protocol.benchmarks import SloGuards

from ._presets import COMPONENTS, WorkloadPreset

__all__ = ["GuardInputs", "ScoredComponent", "WorkloadScore", "check_guards", "score_components", "score_run"]


@dataclass(frozen=True)
class ScoredComponent:
    """One component's part in a score.

    Attributes:
        key: the component.
        candidate: the candidate's measurement.
        baseline: the baseline's measurement.
        ratio: candidate ÷ baseline (inverted for a latency): above 1 is better.
        weight: its weight after renormalization (the weights of a score sum to 1).
    """

    key: str
    candidate: float
    baseline: float
    ratio: float
    weight: float


@dataclass(frozen=True)
class WorkloadScore:
    """A run's score against a baseline.

    Attributes:
        score: the weighted geometric mean of the ratios (1: as good as the baseline).
        components: the components that counted.
        unmeasured: the weighted components missing on either side (left out, weights renormalized).
    """

    score: float
    components: list[ScoredComponent]
    unmeasured: list[str] = field(default_factory=list)


def _checked(key: str, side: str, value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise RejectedMeasurementError(key, side, value)
    return value


def score_components(
    weights: Mapping[str, float],
    candidate: Mapping[str, float],
    baseline: Mapping[str, float],
    *,
    lower_is_better: frozenset[str] = frozenset(),
) -> WorkloadScore:
    """Score ``candidate`` against ``baseline`` on the components ``weights`` names.

    Args:
        weights: each component's weight (positive; they need not sum to 1).
        candidate: the candidate's measurements by component.
        baseline: the baseline's measurements by component.
        lower_is_better: the components that are latencies.

    Raises:
        RejectedMeasurementError: a component measured on both sides is not a finite positive number,
            or no weighted component was measured on both sides.
    """
    active = [key for key in weights if key in candidate and key in baseline and weights[key] > 0]
    unmeasured = [key for key in weights if key not in active]
    if not active:
        nothing = "no score component was measured on both sides"
        raise RejectedMeasurementError("score", "both", math.nan, detail=nothing)
    total = math.fsum(weights[key] for key in active)
    scored = []
    for key in active:
        measured = _checked(key, "candidate", candidate[key])
        base = _checked(key, "baseline", baseline[key])
        ratio = base / measured if key in lower_is_better else measured / base
        scored.append(ScoredComponent(key, measured, base, ratio, weights[key] / total))
    log_score = math.fsum(part.weight * math.log(part.ratio) for part in scored)
    return WorkloadScore(math.exp(log_score), scored, unmeasured)


def score_run(
    preset: WorkloadPreset, candidate: Mapping[str, float], baseline: Mapping[str, float]
) -> WorkloadScore:
    """Score a run of ``preset`` against a baseline run of it (see :func:`score_components`).

    Raises:
        RejectedMeasurementError: see :func:`score_components`.
    """
    latencies = frozenset(key for key in preset.weights if COMPONENTS[key].lower_is_better)
    return score_components(preset.weights, candidate, baseline, lower_is_better=latencies)


@dataclass(frozen=True)
class GuardInputs:
    """What a run measured that the guards look at (None: not measured, so that guard cannot apply).

    Attributes:
        short_ttft_p95_n1_s: the short chat's TTFT p95 at N=1.
        short_ttft_p95_n16_s: the short chat's TTFT p95 at N=16.
        long_ttft_s: each cold long prompt's TTFT by its size in tokens.
        requests: the timed requests sent.
        failed: those of them that failed.
        objective_correct: objective questions answered right.
        tool_calls: tool calls asked for.
        tool_calls_valid: those that validated against their tool's schema.
        vectors_valid: every embedding passed the shape check.
        unit_length: whether the embeddings were unit length.
        embedding_latency_p95_n16_s: the embeddings latency p95 at N=16.
    """

    short_ttft_p95_n1_s: float | None = None
    short_ttft_p95_n16_s: float | None = None
    long_ttft_s: Mapping[int, float] = field(default_factory=dict)
    requests: int = 0
    failed: int = 0
    objective_correct: int | None = None
    tool_calls: int = 0
    tool_calls_valid: int = 0
    vectors_valid: bool | None = None
    unit_length: bool | None = None
    embedding_latency_p95_n16_s: float | None = None


def _over(label: str, value: float | None, limit: float | None, unit: str = " s") -> list[str]:
    if value is None or limit is None:
        return []
    if not math.isfinite(value) or value > limit:
        return [f"{label} {value:.3g}{unit} is over {limit:.3g}{unit}"]
    return []


def check_guards(guards: SloGuards, run: GuardInputs, baseline: GuardInputs | None = None) -> list[str]:
    """Which of ``guards`` the run breaks, in words (empty: it passes).

    The relative guards (long prompts, objective answers, normalization, embeddings latency) need the
    baseline and are skipped without one; a guard on something the run did not measure is skipped too.
    """
    broken = [
        *_over("short chat TTFT p95 at N=1", run.short_ttft_p95_n1_s, guards.short_ttft_p95_n1_s),
        *_over("short chat TTFT p95 at N=16", run.short_ttft_p95_n16_s, guards.short_ttft_p95_n16_s),
    ]
    if guards.max_error_rate is not None and run.requests > 0:
        rate = run.failed / run.requests
        if rate > guards.max_error_rate:
            broken.append(f"{run.failed} of {run.requests} requests failed")
    if guards.tool_validity and run.tool_calls_valid < run.tool_calls:
        broken.append(f"{run.tool_calls - run.tool_calls_valid} of {run.tool_calls} tool calls were invalid")
    if guards.valid_vectors and run.vectors_valid is False:
        broken.append("the embeddings failed the shape check")
    if baseline is None:
        return broken
    if guards.long_ttft_vs_baseline is not None:
        for size, ttft in sorted(run.long_ttft_s.items()):
            base = baseline.long_ttft_s.get(size)
            if base is not None:
                limit = base * guards.long_ttft_vs_baseline
                broken += _over(f"cold {size}-token prompt TTFT", ttft, limit)
    if (
        guards.objective_at_least_baseline
        and run.objective_correct is not None
        and baseline.objective_correct is not None
        and run.objective_correct < baseline.objective_correct
    ):
        broken.append(
            f"{run.objective_correct} objective answers right, fewer than the baseline's "
            f"{baseline.objective_correct}"
        )
    if (
        guards.unchanged_normalization
        and run.unit_length is not None
        and baseline.unit_length is not None
        and run.unit_length != baseline.unit_length
    ):
        broken.append("the embeddings' normalization changed from the baseline's")
    if guards.embedding_latency_p95_n16_vs_baseline is not None and baseline.embedding_latency_p95_n16_s:
        limit = baseline.embedding_latency_p95_n16_s * guards.embedding_latency_p95_n16_vs_baseline
        broken += _over("embeddings latency p95 at N=16", run.embedding_latency_p95_n16_s, limit)
    return broken
