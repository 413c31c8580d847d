"""The tuning ETA: planned from recent runs, re-projected live from the run's own pace.

ETA = candidates x (start + benchmark) - a reused start + confirmations x (start + benchmark x 5/3):
the candidates are the search's (the baseline included), the confirmation stage re-measures three
with 5 repetitions instead of 3 (hence 5/3). The start is the median measured start (until Ready) of
the candidates of the model's recent runs; the benchmark is the median per-repetition benchmark time
of the last run with the same preset (the classic suite counts as one), else of the last benchmark
with it, else defaults. While a run goes, :meth:`EtaProjection.remaining` scales what is left of the
plan by how much slower or faster than planned the finished candidates were.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from mirbad_orchestration.benchmarks import median
from mirbad_protocol.tuning import TuningRun

__all__ = [
    "DEFAULT_BENCHMARK_S",
    "DEFAULT_START_S",
    "RECENT_RUNS",
    "EtaBasis",
    "EtaProjection",
    "eta_basis",
]

DEFAULT_START_S: Final = 20.0
"""A candidate's start until Ready, before any was measured."""
DEFAULT_BENCHMARK_S: Final = 40.0
"""A candidate's 3 repetitions, before any were measured (with the start: 60 s a candidate)."""
RECENT_RUNS: Final = 5
"""How many of the newest runs the median start is taken over."""
_DEFAULT_REPETITIONS: Final = 3
_CONFIRMED: Final = 3


@dataclass(frozen=True)
class EtaBasis:
    """The times an estimate is made of.

    Attributes:
        start_s: one candidate's start until Ready.
        repetition_s: one repetition of the suite on one candidate.
        source: where they come from, in words (the plan preview says it).
    """

    start_s: float = DEFAULT_START_S
    repetition_s: float = DEFAULT_BENCHMARK_S / _DEFAULT_REPETITIONS
    source: str = "defaults"
    start_measured: bool = False
    repetition_measured: bool = False

    @property
    def measured(self) -> bool:
        """Whether any of the times was measured on this model (else all are the defaults)."""
        return self.start_measured or self.repetition_measured

    def describe(self) -> str:
        """Which the estimate is, in words: measured pace, partly guessed, or a first guess.

        A newcomer reads "about 15 min" as a promise; saying it is a guess (and which part is)
        keeps a defaults-only estimate from reading like a measurement (issue 24 item 9).
        """
        if not self.measured:
            return "a first guess: nothing was measured on this model yet"
        guessed = [
            name
            for name, measured in (
                ("the start time", self.start_measured),
                ("the benchmark time", self.repetition_measured),
            )
            if not measured
        ]
        text = f"from the last runs' pace: {self.source}"
        return text + (f"; {' and '.join(guessed)} a first guess" if guessed else "")


def eta_basis(
    runs: Sequence[TuningRun], preset: str | None, *, last_benchmark_s: float | None = None
) -> EtaBasis:
    """The basis from ``runs`` (newest first) for a run of ``preset`` (None: the classic suite).

    Args:
        runs: the model's stored runs, newest first.
        preset: the preset the next run measures with.
        last_benchmark_s: the seconds of the last benchmark with that preset (one repetition), the
            fallback when no run with it measured anything.
    """
    starts = [
        candidate.start_seconds
        for run in runs[:RECENT_RUNS]
        for candidate in [*run.candidates, *run.confirmation]
        if candidate.start_seconds is not None and candidate.start_seconds >= 0
    ]
    start = median(starts) if starts else None
    repetition = None
    for run in runs:
        if run.preset != preset:
            continue
        timed = [
            candidate.benchmark_seconds / max(1, run.repetitions)
            for candidate in run.candidates
            if candidate.benchmark_seconds is not None and candidate.benchmark_seconds > 0
        ]
        if timed:
            repetition = median(timed)
            break
    sources = []
    if start is not None:
        sources.append("starts of recent runs")
    if repetition is not None:
        sources.append("benchmark times of the last run with this preset")
    elif last_benchmark_s is not None and last_benchmark_s > 0:
        repetition = last_benchmark_s
        sources.append("the last benchmark with this preset")
    defaults = EtaBasis()
    return EtaBasis(
        start_s=start if start is not None else defaults.start_s,
        repetition_s=repetition if repetition is not None else defaults.repetition_s,
        source=", ".join(sources) or "defaults",
        start_measured=start is not None,
        repetition_measured=repetition is not None,
    )


class EtaProjection:
    """A run's plan in seconds, and what is left of it as the run goes (see the module).

    Args:
        basis: the times.
        candidates: the search's planned candidates, the baseline excluded.
        repetitions: the search's repetitions per candidate.
        confirm_repetitions: the confirmation stage's.
        confirmations: the confirmation stage's candidates (the best two and the baseline).
    """

    def __init__(
        self,
        basis: EtaBasis,
        candidates: int,
        *,
        repetitions: int = _DEFAULT_REPETITIONS,
        confirm_repetitions: int = 5,
        confirmations: int = _CONFIRMED,
    ) -> None:
        self._basis = basis
        self._search = candidates + 1  # the baseline is a candidate too
        self._confirmations = confirmations
        self._search_each = basis.start_s + basis.repetition_s * repetitions
        self._confirm_each = basis.start_s + basis.repetition_s * confirm_repetitions

    @property
    def basis(self) -> EtaBasis:
        """The times the plan is made of (the page says whether they were measured)."""
        return self._basis

    @property
    def total(self) -> int:
        """Every planned candidate: the search's, the baseline and the confirmation stage's."""
        return self._search + self._confirmations

    def planned(self) -> float:
        """The whole run's planned seconds (one start is reused: the baseline's instance)."""
        search = self._search * self._search_each - self._basis.start_s
        return max(0.0, search + self._confirmations * self._confirm_each)

    def _planned_until(self, done: int) -> float:
        """The planned seconds of the first ``done`` candidates."""
        search = min(done, self._search)
        confirm = min(max(0, done - self._search), self._confirmations)
        spent = search * self._search_each + confirm * self._confirm_each
        return max(0.0, spent - (self._basis.start_s if search else 0.0))

    def remaining(self, elapsed_s: float, done: int) -> float:
        """The seconds left after ``done`` candidates in ``elapsed_s``: the plan's rest at the run's pace."""
        planned = self.planned()
        if done >= self.total:
            return 0.0
        if done <= 0:
            return max(0.0, planned - elapsed_s)
        until = self._planned_until(done)
        pace = elapsed_s / until if until > 0 else 1.0
        return max(0.0, (planned - until) * pace)
