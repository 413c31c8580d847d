"""What a tuning run optimizes: one repetition's measurement, the goals' scores and their guards.

A :class:`Measurement` is what one repetition of the classic suite says about a candidate. A goal
scores it against the baseline's reference measurement (the baseline's own score is about 1):

- Single user: the N = 1 decode speed's gain;
- Many agents: the top level's aggregate speed's gain, with TTFT p95 there at most 2x the baseline's;
- Balanced: the geometric mean of both gains, with the same guard.

A pooling (embedding) model is measured by the embeddings suite instead
(:func:`measurement_from_embeddings`): its "speeds" are input tokens per second at N = 1 and at the
top level (N = 16), its latencies stand for the TTFTs (so the same goals and the 2x guard hold on the
latency p95 at 16), its vectors' validity for the tool call, and its normalization (unit length or
not) must not change from the baseline's.

Every goal also keeps the guardrails (the tool call stays valid when the baseline's is, the objective
answers no fewer) and the absolute guards (TTFT p95 at N = 1 at most 1 s, at the top level at most
3 s, no failed request). A baseline that breaks an absolute guard makes it relative for the run: no
worse than the baseline, within :data:`RELATIVE_SLACK` of measurement noise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from mirbad_orchestration.benchmarks import GuardInputs, SuiteOutcome, median
from mirbad_protocol.benchmarks import EmbeddingsResult
from mirbad_protocol.tuning import TuningGoal

__all__ = [
    "ABSOLUTE_GUARDS",
    "GOALS",
    "RELATIVE_SLACK",
    "Measurement",
    "goal_score",
    "guard_violations",
    "measurement_from_embeddings",
    "measurement_from_outcome",
    "reference_of",
    "relative_guards_for",
]

GOALS: Final[tuple[TuningGoal, ...]] = ("balanced", "many-agents", "single-user")
"""The goals there are (``balanced`` is the default)."""
ABSOLUTE_GUARDS: Final = {"single_ttft_p95_s": 1.0, "many_ttft_p95_s": 3.0, "error_rate": 0.0}
"""The absolute guards: the most each measurement may be."""
RELATIVE_SLACK: Final = 0.10
"""How much worse than the baseline a guard made relative lets a candidate be (measurement noise)."""
_MANY_TTFT_FACTOR: Final = 2.0


@dataclass(frozen=True)
class Measurement:
    """One repetition of the suite on one candidate.

    Attributes:
        single_tok_s: the per-request decode speed at N = 1.
        many_tok_s: the aggregate speed at the top level (N = 16 in the product).
        single_ttft_p95_s: TTFT p95 at N = 1.
        many_ttft_p95_s: TTFT p95 at the top level.
        error_rate: the failed requests' share of the timed ones.
        tool_call_valid: whether the tool call validated.
        objective_correct: the objective questions answered correctly.
        seconds: how long the repetition took.
        components: a workload preset's score components by key (empty for the classic suite).
        guards: what a workload preset's guards read (None for the classic suite).
        pooling: measured by the embeddings suite (the speeds are input tok/s, the tool call the vectors).
        normalized: whether a pooling model's vectors were unit length (None: not a pooling model).
    """

    single_tok_s: float
    many_tok_s: float
    single_ttft_p95_s: float
    many_ttft_p95_s: float
    error_rate: float = 0.0
    tool_call_valid: bool = True
    objective_correct: int = 0
    seconds: float = 0.0
    components: Mapping[str, float] = field(default_factory=dict)
    guards: GuardInputs | None = None
    pooling: bool = False
    normalized: bool | None = None


def measurement_from_outcome(outcome: SuiteOutcome, *, seconds: float = 0.0) -> Measurement:
    """Read a classic suite's outcome as a measurement (N = 1 is its first level, the top its last)."""
    levels = sorted(outcome.levels, key=lambda level: level.concurrency)
    single, many = levels[0], levels[-1]
    requests = sum(level.concurrency * max(1, len(level.runs)) for level in levels)
    failed = sum(run.failed for level in levels for run in level.runs)
    return Measurement(
        single_tok_s=single.per_request_tokens_per_s,
        many_tok_s=many.aggregate_tokens_per_s,
        single_ttft_p95_s=single.ttft_p95_s,
        many_ttft_p95_s=many.ttft_p95_s,
        error_rate=failed / requests if requests else 0.0,
        tool_call_valid=outcome.tool_call.valid,
        objective_correct=outcome.questions.correct,
        seconds=seconds,
    )


def measurement_from_embeddings(result: EmbeddingsResult, *, seconds: float = 0.0) -> Measurement:
    """Read an embeddings suite's result as a measurement: N = 1 and the level at 16 (else the top one)."""
    levels = sorted(result.levels, key=lambda level: level.concurrency)
    single = levels[0]
    many = next((level for level in levels if level.concurrency == 16), levels[-1])
    requests = sum(level.requests for level in levels)
    failed = sum(level.failed for level in levels)
    return Measurement(
        single_tok_s=single.input_tokens_per_s or 0.0,
        many_tok_s=many.input_tokens_per_s or 0.0,
        single_ttft_p95_s=single.latency_p95_s if single.latency_p95_s is not None else math.inf,
        many_ttft_p95_s=many.latency_p95_s if many.latency_p95_s is not None else math.inf,
        error_rate=failed / requests if requests else 0.0,
        tool_call_valid=result.vectors_valid,
        seconds=seconds,
        pooling=True,
        normalized=result.unit_length,
    )


def reference_of(measurements: Sequence[Measurement]) -> Measurement:
    """The per-field median of the repetitions (a tool call counts valid when most were)."""

    def mid(values: list[float]) -> float:
        return median(values)

    return Measurement(
        single_tok_s=mid([m.single_tok_s for m in measurements]),
        many_tok_s=mid([m.many_tok_s for m in measurements]),
        single_ttft_p95_s=mid([m.single_ttft_p95_s for m in measurements]),
        many_ttft_p95_s=mid([m.many_ttft_p95_s for m in measurements]),
        error_rate=mid([m.error_rate for m in measurements]),
        tool_call_valid=sum(m.tool_call_valid for m in measurements) * 2 > len(measurements),
        objective_correct=round(mid([float(m.objective_correct) for m in measurements])),
        seconds=sum(m.seconds for m in measurements),
        pooling=any(m.pooling for m in measurements),
        normalized=_most([m.normalized for m in measurements]),
    )


def _most(values: list[bool | None]) -> bool | None:
    known = [value for value in values if value is not None]
    return sum(known) * 2 > len(known) if known else None


def _gain(candidate: float, baseline: float) -> float:
    if not (math.isfinite(candidate) and candidate > 0 and math.isfinite(baseline) and baseline > 0):
        return 0.0  # a non-finite or non-positive measurement never wins
    return candidate / baseline


def goal_score(goal: TuningGoal, candidate: Measurement, baseline: Measurement) -> float:
    """The goal's score of ``candidate`` against ``baseline`` (higher is better; 1 = as good)."""
    single = _gain(candidate.single_tok_s, baseline.single_tok_s)
    many = _gain(candidate.many_tok_s, baseline.many_tok_s)
    if goal == "single-user":
        return single
    if goal == "many-agents":
        return many
    return math.sqrt(single * many)


def relative_guards_for(baseline: Measurement) -> list[str]:
    """The absolute guards ``baseline`` itself breaks (they become relative for the run)."""
    return [name for name, limit in ABSOLUTE_GUARDS.items() if getattr(baseline, name) > limit]


def guard_violations(
    goal: TuningGoal, candidate: Measurement, baseline: Measurement, *, relative: Sequence[str] = ()
) -> list[str]:
    """The guards ``candidate`` (a median over its repetitions) breaks against ``baseline``."""
    broken = []
    for name, limit in ABSOLUTE_GUARDS.items():
        value = getattr(candidate, name)
        if name in relative:
            allowed = getattr(baseline, name) * (1 + RELATIVE_SLACK)
            if value > allowed:
                broken.append(
                    f"{name} {value:.3g} is worse than the baseline's {getattr(baseline, name):.3g}"
                )
        elif value > limit:
            broken.append(f"{name} {value:.3g} is over {limit:g}")
    if goal != "single-user" and candidate.many_ttft_p95_s > _MANY_TTFT_FACTOR * baseline.many_ttft_p95_s:
        broken.append(
            f"many_ttft_p95_s {candidate.many_ttft_p95_s:.3g} is over 2x the baseline's "
            f"{baseline.many_ttft_p95_s:.3g}"
        )
    if baseline.tool_call_valid and not candidate.tool_call_valid:
        broken.append(
            "the vectors are no longer valid" if candidate.pooling else "the tool call no longer validates"
        )
    if baseline.normalized is not None and candidate.normalized != baseline.normalized:
        broken.append(f"the vectors' normalization changed (unit length: {candidate.normalized})")
    if candidate.objective_correct < baseline.objective_correct:
        broken.append(
            f"objective answers {candidate.objective_correct} fewer than the baseline's "
            f"{baseline.objective_correct}"
        )
    return broken
