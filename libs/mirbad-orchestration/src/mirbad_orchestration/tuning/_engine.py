"""The tuning engine: coordinate descent over a plan's dimensions, then the confirmation stage.

The baseline is the normalized saved definition, measured first. Each dimension is tried in the plan's
order on top of the best configuration so far: every value becomes a candidate; a candidate whose
effective configuration has the fingerprint of one measured already is a duplicate (not started
again); a candidate that fails to start or to measure fails alone; the best accepted candidate of a
dimension (a higher score than the best so far, no guard broken) becomes the base of the next one.
The confirmation stage (:mod:`._confirmation`) then decides whether the best two beat the baseline.
Whatever happens the runner restores the saved settings; cancelling always propagates, and a
candidate's instance is removed even then.
"""

from __future__ import annotations

import random
import time
from typing import Final, Protocol

import anyio
from pydantic import JsonValue

from mirbad_orchestration.benchmarks import median
from mirbad_orchestration.commandline import normalize_definition
from mirbad_orchestration.exceptions import CandidateFailedError, TuningError, TuningInfrastructureError
from mirbad_protocol import MirbadError, ModelDefinition
from mirbad_protocol.tuning import TuningCandidate, TuningGoal

from ._confirmation import Confirmation
from ._dimensions import TuningPlan, effective_config, fingerprint
from ._goals import Measurement
from ._outcome import EngineOutcome, Measured
from ._runner import CandidateRunner
from ._runtime_notes import compare_with_request, parse_runtime_log
from ._scoring import GoalScorer, TuningScorer

__all__ = ["TuningEngine", "TuningProgress"]

_REMOVE_BOUND_S: Final = 180.0  # the runner verifies within 120 s; this only bounds a shielded wait
_LOG_BOUND_S: Final = 30.0  # reading a log tail is a quick call; a hung one must not hold the run


class TuningProgress(Protocol):
    """Told (phase, the candidate's description, candidates done, its goal and tradeoff) before each."""

    async def __call__(
        self, phase: str, description: str, done: int, *, goal: str = "", tradeoff: str = ""
    ) -> None:
        """See the class."""


async def _ignore(phase: str, description: str, done: int, *, goal: str = "", tradeoff: str = "") -> None:
    return None


class TuningEngine:
    """Runs one tuning run over a runner (see the module).

    Args:
        runner: starts, measures and removes the candidates.
        goal: what to optimize.
        repetitions: the suite's repetitions per candidate in the search (3 in the product).
        confirm_repetitions: the repetitions per candidate in the confirmation stage (5).
        margin: how much the re-measured baseline must be beaten by (5 %).
        rng: orders the confirmation stage (seeded in tests).
        progress: told before each candidate.
        scorer: scores and guards the candidates (the classic ``goal``'s by default; a workload
            preset's for the preset search).
    """

    def __init__(
        self,
        runner: CandidateRunner,
        goal: TuningGoal = "balanced",
        *,
        repetitions: int = 3,
        confirm_repetitions: int = 5,
        margin: float = 0.05,
        rng: random.Random | None = None,
        progress: TuningProgress = _ignore,
        scorer: TuningScorer | None = None,
    ) -> None:
        self._runner = runner
        self._goal: TuningGoal = goal
        self._scorer = scorer or GoalScorer(goal)
        self._repetitions = repetitions
        self._confirm_repetitions = confirm_repetitions
        self._margin = margin
        self._rng = rng or random.Random()  # noqa: S311 - orders measurements, no secret
        self._progress = progress
        self._done = 0
        self._outcome = EngineOutcome()

    async def run(
        self, saved: ModelDefinition, plan: TuningPlan, outcome: EngineOutcome | None = None
    ) -> EngineOutcome:
        """Tune ``saved`` over ``plan``; the saved settings are restored whatever happens.

        ``outcome`` (a new one by default) is filled as the run goes, so a caller keeps what a
        failed or cancelled run measured until then.

        Raises:
            TuningError: the baseline could not be measured.
            TuningInfrastructureError: an instance could not be removed (the run stopped).
        """
        outcome = outcome if outcome is not None else EngineOutcome()
        outcome.notes += plan.notes
        self._outcome = outcome
        try:
            await self._runner.prepare()
            await self._search(normalize_definition(saved), plan, outcome)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_REMOVE_BOUND_S):
                note = await self._runner.restore()
                if note:
                    outcome.notes.append(note)
        return outcome

    async def _search(self, baseline: ModelDefinition, plan: TuningPlan, outcome: EngineOutcome) -> None:
        await self._progress("baseline", "the saved settings", self._done)
        base = await self.measure(baseline, "baseline", {}, "the saved settings", self._repetitions)
        if base.measurements is None:
            raise TuningError(f"the baseline could not be measured: {base.candidate.error}")
        reference = self.reference(base.measurements)
        relative = self._scorer.relative(reference)
        outcome.notes += [f"guard {name} made relative: the baseline breaks it" for name in relative]
        self.judge(base, reference, relative)
        outcome.candidates.append(base.candidate)
        seen = {base.candidate.fingerprint}
        accepted: list[Measured] = []
        best, best_score = baseline, base.candidate.score or 1.0
        for dimension in plan.dimensions:
            round_best: Measured | None = None
            for value in dimension.values_for(outcome.candidates, best):
                definition = dimension.candidate(best, value)
                changes: dict[str, JsonValue] = {dimension.name: value}
                described = dimension.describe(value)
                sentences = dimension.sentences(value)
                if fingerprint(definition) in seen:
                    duplicate = self._duplicate(dimension.name, changes, described, definition)
                    goal, tradeoff = sentences
                    outcome.candidates.append(
                        duplicate.model_copy(update={"goal": goal, "tradeoff": tradeoff})
                    )
                    self._done += 1
                    continue
                seen.add(fingerprint(definition))
                await self._progress(
                    "search", described, self._done, goal=sentences[0], tradeoff=sentences[1]
                )
                measured = await self.measure(
                    definition, dimension.name, changes, described, self._repetitions, sentences=sentences
                )
                self.judge(measured, reference, relative)
                outcome.candidates.append(measured.candidate)
                if measured.candidate.outcome == "accepted":
                    accepted.append(measured)
                    score = measured.candidate.score or 0.0
                    if score > best_score and (
                        round_best is None or score > (round_best.candidate.score or 0)
                    ):
                        round_best = measured
            if round_best is not None:
                best, best_score = round_best.definition, round_best.candidate.score or best_score
        confirmation = Confirmation(self, self._goal, margin=self._margin, rng=self._rng)
        await confirmation.run(base, accepted, relative, outcome, repetitions=self._confirm_repetitions)

    async def measure(
        self,
        definition: ModelDefinition,
        step: str,
        changes: dict[str, JsonValue],
        described: str,
        repetitions: int,
        *,
        sentences: tuple[str, str] = ("", ""),
    ) -> Measured:
        """Start ``definition`` fresh, run the suite ``repetitions`` times, remove it (failing it alone).

        The candidate's log is read before it is removed: its RuntimeNotes say what the runtime
        resolved differently from the request.
        """
        candidate = TuningCandidate(
            step=step,
            changes=dict(changes),
            description=described,
            effective_config=effective_config(definition),
            fingerprint=fingerprint(definition),
            goal=sentences[0],
            tradeoff=sentences[1],
        )
        launched = time.monotonic()
        try:
            handle = await self._runner.start(definition)
        except CandidateFailedError as exc:
            self._done += 1
            return Measured(
                definition, candidate.model_copy(update={"outcome": "failed", "error": exc.cause})
            )
        started = time.monotonic()
        candidate = candidate.model_copy(update={"start_seconds": started - launched})
        # The log is read while the instance still runs; never in the finally clause, where a
        # cancelled run would skip the removal at the read's first checkpoint.
        try:
            measurements = [await self._runner.measure(handle) for _ in range(repetitions)]
            benchmark_s = time.monotonic() - started
            notes = await self._runtime_notes(handle, definition)
        except CandidateFailedError as exc:
            notes = await self._runtime_notes(handle, definition)
            update: dict[str, object] = {"outcome": "failed", "error": exc.cause, "runtime_notes": notes}
            return Measured(definition, candidate.model_copy(update=update))
        finally:
            self._done += 1
            await self._remove(handle, candidate)
        timed = candidate.model_copy(update={"benchmark_seconds": benchmark_s, "runtime_notes": notes})
        return Measured(definition, timed, measurements)

    async def _runtime_notes(self, handle: str, definition: ModelDefinition) -> list[str]:
        """The candidate's RuntimeNotes from its log (empty when the runtime has no log to read)."""
        try:
            with anyio.fail_after(_LOG_BOUND_S):
                lines = await self._runner.log(handle)
        except (MirbadError, TimeoutError) as exc:
            return [f"the log could not be read: {exc or 'timed out'}"]
        if not lines:
            return []
        return compare_with_request(parse_runtime_log(lines), definition)

    async def announce(self, phase: str, candidate: TuningCandidate) -> None:
        """Tell the progress that ``candidate`` is measured next in ``phase``."""
        await self._progress(
            phase, candidate.description, self._done, goal=candidate.goal, tradeoff=candidate.tradeoff
        )

    def reference(self, measurements: list[Measurement]) -> Measurement:
        """The median of a candidate's repetitions, as the run's scorer reads it."""
        return self._scorer.reference(measurements)

    async def _remove(self, handle: str, candidate: TuningCandidate) -> None:
        """Remove the instance; one that stays is recorded as the candidate's failure and stops the run."""
        try:
            with anyio.CancelScope(shield=True), anyio.fail_after(_REMOVE_BOUND_S):
                await self._runner.remove(handle)
        except TuningInfrastructureError as exc:
            self._outcome.candidates.append(
                candidate.model_copy(update={"outcome": "failed", "error": str(exc)})
            )
            raise

    def judge(self, measured: Measured, reference: Measurement, relative: list[str]) -> None:
        """Score each repetition against ``reference`` and check the guards on their median."""
        if measured.measurements is None:
            return
        scores = [self._scorer.score(m, reference) for m in measured.measurements]
        broken = self._scorer.violations(self.reference(measured.measurements), reference, relative)
        measured.candidate = measured.candidate.model_copy(
            update={
                "scores": scores,
                "score": median(scores),
                "score_min": min(scores),
                "score_max": max(scores),
                "guard_violations": broken,
                "outcome": "rejected" if broken else "accepted",
                "error": "; ".join(broken) or None,
            }
        )

    @staticmethod
    def _duplicate(
        step: str, changes: dict[str, JsonValue], described: str, definition: ModelDefinition
    ) -> TuningCandidate:
        return TuningCandidate(
            step=step,
            changes=dict(changes),
            description=described,
            effective_config=effective_config(definition),
            fingerprint=fingerprint(definition),
            outcome="duplicate",
            error="the same effective configuration as a candidate measured already",
        )
