"""The confirmation stage: does the search's best really beat the saved settings?

The top two accepted candidates of the search and the baseline are re-measured with more repetitions
each (5 in the product), each from a fresh start, in a random order (so a drift of the machine does
not favour whoever runs last). Every repetition is scored against the median of the baseline's
re-measurement. A candidate wins only when its median score beats the baseline's by the margin (5 %)
and its lowest repetition scores above the baseline's highest (non-overlapping ranges); otherwise
the baseline's re-measurement wins and the saved settings are kept.
"""

from __future__ import annotations

import random
from typing import Protocol

from pydantic import JsonValue

from mirbad_protocol import ModelDefinition
from mirbad_protocol.tuning import TuningCandidate, TuningGoal

from ._goals import Measurement
from ._outcome import EngineOutcome, Measured

__all__ = ["Confirmation"]

_CONFIRMATION = "confirmation"


class _Measurer(Protocol):
    async def measure(
        self,
        definition: ModelDefinition,
        step: str,
        changes: dict[str, JsonValue],
        described: str,
        repetitions: int,
        *,
        sentences: tuple[str, str] = ("", ""),
    ) -> Measured: ...

    def reference(self, measurements: list[Measurement]) -> Measurement: ...

    async def announce(self, phase: str, candidate: TuningCandidate) -> None: ...

    def judge(self, measured: Measured, reference: Measurement, relative: list[str]) -> None: ...


class Confirmation:
    """Re-measures the best two and the baseline and picks the winner (see the module)."""

    def __init__(self, engine: _Measurer, goal: TuningGoal, *, margin: float, rng: random.Random) -> None:
        self._engine = engine
        self._goal = goal
        self._margin = margin
        self._rng = rng

    async def run(
        self,
        baseline: Measured,
        accepted: list[Measured],
        relative: list[str],
        outcome: EngineOutcome,
        *,
        repetitions: int,
    ) -> None:
        """Fill ``outcome``'s confirmation, winner and winner definition."""
        contenders = self._top_two(baseline, accepted)
        if not contenders:
            outcome.winner = baseline.candidate
            outcome.notes.append("no candidate beat the baseline in the search: the saved settings are kept")
            return
        order = [baseline, *contenders]
        self._rng.shuffle(order)
        again: dict[int, Measured] = {}
        for entry in order:
            await self._engine.announce(_CONFIRMATION, entry.candidate)  # the live progress and ETA
            again[id(entry)] = await self._engine.measure(
                entry.definition,
                _CONFIRMATION,
                dict(entry.candidate.changes),
                entry.candidate.description,
                repetitions,
                sentences=(entry.candidate.goal, entry.candidate.tradeoff),
            )
        outcome.confirmation = [again[id(entry)].candidate for entry in order]
        base = again[id(baseline)]
        if base.measurements is None:
            outcome.winner = baseline.candidate
            outcome.notes.append("the baseline failed to start again: the saved settings are kept")
            return
        reference = self._engine.reference(base.measurements)
        for entry in again.values():
            self._engine.judge(entry, reference, relative)
        outcome.confirmation = [again[id(entry)].candidate for entry in order]
        winner = self._winner(again[id(baseline)], [again[id(entry)] for entry in contenders])
        if winner is None:
            outcome.winner = again[id(baseline)].candidate
            outcome.notes.append(
                f"no candidate beat the re-measured baseline by {self._margin:.0%} with non-overlapping "
                "ranges: the saved settings are kept"
            )
            return
        outcome.winner = winner.candidate
        outcome.winner_definition = winner.definition

    @staticmethod
    def _top_two(baseline: Measured, accepted: list[Measured]) -> list[Measured]:
        """The two best accepted candidates that scored above the baseline, distinct configurations."""
        floor = baseline.candidate.score or 1.0
        better = [entry for entry in accepted if (entry.candidate.score or 0.0) > floor]
        better.sort(key=lambda entry: entry.candidate.score or 0.0, reverse=True)
        chosen: list[Measured] = []
        for entry in better:
            if all(entry.candidate.fingerprint != other.candidate.fingerprint for other in chosen):
                chosen.append(entry)
        return chosen[:2]

    def _winner(self, baseline: Measured, contenders: list[Measured]) -> Measured | None:
        base = baseline.candidate
        if base.score is None or base.score_max is None:
            return None
        wins = [
            entry
            for entry in contenders
            if entry.candidate.outcome == "accepted"
            and entry.candidate.score is not None
            and entry.candidate.score_min is not None
            and entry.candidate.score >= base.score * (1 + self._margin)
            and entry.candidate.score_min > base.score_max
        ]
        return max(wins, key=lambda entry: entry.candidate.score or 0.0, default=None)
