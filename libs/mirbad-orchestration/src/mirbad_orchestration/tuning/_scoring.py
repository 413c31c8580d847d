"""How a run scores and guards its candidates: a classic goal, or a workload preset.

The engine asks a :class:`TuningScorer` for the baseline's reference (the median of its repetitions),
the absolute guards the baseline itself breaks (relative for the run), each repetition's score and the
guards a candidate breaks. :class:`GoalScorer` is the classic goals' (:mod:`._goals`);
:class:`PresetScorer` scores a workload preset's components (the weighted geometric mean of
candidate ÷ baseline ratios, :func:`~mirbad_orchestration.benchmarks.score_run`) and holds the
preset's guards, an absolute one the baseline breaks made "no worse than the baseline".
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import replace
from typing import Final

from mirbad_orchestration.benchmarks import (
    GuardInputs,
    WorkloadPreset,
    check_guards,
    median,
    preset_guards,
    score_run,
)
from mirbad_orchestration.exceptions import RejectedMeasurementError
from mirbad_protocol.tuning import TuningGoal

from ._goals import (
    RELATIVE_SLACK,
    Measurement,
    goal_score,
    guard_violations,
    reference_of,
    relative_guards_for,
)

__all__ = ["GoalScorer", "PresetScorer", "TuningScorer"]

# The preset guards that are absolute (a baseline breaking one makes it relative for the run).
_ABSOLUTE: Final = ("short_ttft_p95_n1_s", "short_ttft_p95_n16_s", "max_error_rate")


class TuningScorer(ABC):
    """Scores and guards a run's candidates (see the module)."""

    @abstractmethod
    def reference(self, measurements: Sequence[Measurement]) -> Measurement:
        """The median of a candidate's repetitions (the baseline's is what others are scored on)."""

    @abstractmethod
    def relative(self, baseline: Measurement) -> list[str]:
        """The absolute guards ``baseline`` itself breaks (they become relative for the run)."""

    @abstractmethod
    def score(self, candidate: Measurement, baseline: Measurement) -> float:
        """One repetition's score against the baseline's reference (1: as good; 0: rejected)."""

    @abstractmethod
    def violations(self, candidate: Measurement, baseline: Measurement, relative: Sequence[str]) -> list[str]:
        """The guards ``candidate`` (its reference) breaks against ``baseline``."""


class GoalScorer(TuningScorer):
    """A classic goal's scores and guards (see :mod:`._goals`)."""

    def __init__(self, goal: TuningGoal) -> None:
        self._goal: TuningGoal = goal

    def reference(self, measurements: Sequence[Measurement]) -> Measurement:
        """The per-field median."""
        return reference_of(measurements)

    def relative(self, baseline: Measurement) -> list[str]:
        """The absolute guards the baseline breaks."""
        return relative_guards_for(baseline)

    def score(self, candidate: Measurement, baseline: Measurement) -> float:
        """The goal's score."""
        return goal_score(self._goal, candidate, baseline)

    def violations(self, candidate: Measurement, baseline: Measurement, relative: Sequence[str]) -> list[str]:
        """The goal's guards."""
        return guard_violations(self._goal, candidate, baseline, relative=relative)


def _middle(values: Sequence[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return median(known) if known else None


def _median_guards(inputs: Sequence[GuardInputs]) -> GuardInputs:
    """The median repetition's guard inputs: latencies by median, requests and failures summed."""
    sizes = sorted({size for entry in inputs for size in entry.long_ttft_s})
    objective = [entry.objective_correct for entry in inputs if entry.objective_correct is not None]
    vectors = [entry.vectors_valid for entry in inputs if entry.vectors_valid is not None]
    units = [entry.unit_length for entry in inputs if entry.unit_length is not None]
    return GuardInputs(
        short_ttft_p95_n1_s=_middle([entry.short_ttft_p95_n1_s for entry in inputs]),
        short_ttft_p95_n16_s=_middle([entry.short_ttft_p95_n16_s for entry in inputs]),
        long_ttft_s={
            size: median([entry.long_ttft_s[size] for entry in inputs if size in entry.long_ttft_s])
            for size in sizes
        },
        requests=sum(entry.requests for entry in inputs),
        failed=sum(entry.failed for entry in inputs),
        objective_correct=round(median([float(value) for value in objective])) if objective else None,
        tool_calls=sum(entry.tool_calls for entry in inputs),
        tool_calls_valid=sum(entry.tool_calls_valid for entry in inputs),
        vectors_valid=all(vectors) if vectors else None,
        unit_length=(sum(units) * 2 > len(units)) if units else None,
        embedding_latency_p95_n16_s=_middle([entry.embedding_latency_p95_n16_s for entry in inputs]),
    )


def _error_rate(inputs: GuardInputs | None) -> float:
    return inputs.failed / inputs.requests if inputs is not None and inputs.requests else 0.0


class PresetScorer(TuningScorer):
    """A workload preset's scores and guards (see the module).

    Args:
        preset: the preset.
    """

    def __init__(self, preset: WorkloadPreset) -> None:
        self._preset = preset
        self._guards = preset_guards(preset)

    @property
    def preset(self) -> WorkloadPreset:
        """The preset scored on."""
        return self._preset

    def reference(self, measurements: Sequence[Measurement]) -> Measurement:
        """The per-component median, the median repetition's guard inputs."""
        base = reference_of(measurements)
        keys = sorted({key for m in measurements for key in m.components})
        components = {
            key: median([m.components[key] for m in measurements if key in m.components]) for key in keys
        }
        inputs = [m.guards for m in measurements if m.guards is not None]
        return replace(base, components=components, guards=_median_guards(inputs) if inputs else None)

    def relative(self, baseline: Measurement) -> list[str]:
        """The preset's absolute guards the baseline breaks."""
        inputs = baseline.guards
        if inputs is None:
            return []
        broken = []
        for name in ("short_ttft_p95_n1_s", "short_ttft_p95_n16_s"):
            limit, value = getattr(self._guards, name), getattr(inputs, name)
            if limit is not None and value is not None and value > limit:
                broken.append(name)
        limit = self._guards.max_error_rate
        if limit is not None and _error_rate(inputs) > limit:
            broken.append("max_error_rate")
        return broken

    def score(self, candidate: Measurement, baseline: Measurement) -> float:
        """The preset's weighted geometric mean of ratios; 0 when a measurement is rejected."""
        try:
            return score_run(self._preset, candidate.components, baseline.components).score
        except RejectedMeasurementError:
            return 0.0

    def violations(self, candidate: Measurement, baseline: Measurement, relative: Sequence[str]) -> list[str]:
        """The preset's guards, the relative ones no worse than the baseline (within the slack)."""
        broken = []
        try:
            score_run(self._preset, candidate.components, baseline.components)
        except RejectedMeasurementError as exc:
            broken.append(str(exc))
        if candidate.guards is None:
            return broken
        guards = self._guards.model_copy(update={name: None for name in relative if name in _ABSOLUTE})
        broken += check_guards(guards, candidate.guards, baseline.guards)
        base = baseline.guards
        for name in relative:
            if name == "max_error_rate":
                value, allowed = _error_rate(candidate.guards), _error_rate(base) * (1 + RELATIVE_SLACK)
            else:
                got, ref = getattr(candidate.guards, name), getattr(base, name, None)
                if got is None or ref is None:
                    continue
                value, allowed = got, ref * (1 + RELATIVE_SLACK)
            if value > allowed:
                broken.append(f"{name} {value:.3g} is worse than the baseline's (made relative)")
        return broken
