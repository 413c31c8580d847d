"""Tuning runs as the admin API and the results files carry them.

A run (``{data}/tuning/{modelId}/{stamp}.json``) is a coordinate descent over a model's settings and a
confirmation stage; a tuning job is the work that produces it, with its live progress. Stored files of
an older or newer writer load too (unknown fields ignored); the request body is user input.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field, JsonValue

from ._benchmarks import JobState
from ._definition import ModelDefinition
from ._wire import WireModel

__all__ = [
    "CandidateOutcome",
    "TuningCandidate",
    "TuningGoal",
    "TuningJobList",
    "TuningJobView",
    "TuningList",
    "TuningRequest",
    "TuningRun",
    "TuningSearch",
]

TuningGoal = Literal["balanced", "many-agents", "single-user"]
"""What a run optimizes: N = 1 speed, N = 16 aggregate speed, or the geometric mean of both gains."""
TuningSearch = Literal["quick", "full"]
"""Quick tries the few dimensions that matter most; Full tries every dimension of the runtime."""
CandidateOutcome = Literal["accepted", "rejected", "failed", "duplicate"]
"""Measured and within the guards; measured and outside them; never measured (why: ``error``); or the
same effective configuration as an earlier candidate (not started again)."""


class TuningRequest(WireModel):
    """The body of ``POST /api/models/{id}/tune`` (user input: an unknown field is refused).

    Attributes:
        goal: what to optimize.
        search: Quick or Full; ignored when ``steps`` is given.
        steps: the dimensions to try, in the engine's order (names as ``GET /api/tuning`` lists them).
        preset: a workload preset (``interactive``, ``agents``, ...): the workload-preset search with
            its phases, scored by the preset; None runs the classic goal's descent.
    """

    goal: TuningGoal = "balanced"
    search: TuningSearch = "quick"
    steps: list[str] | None = None
    preset: str | None = None


class TuningCandidate(WireModel):
    """One configuration a run tried.

    Attributes:
        step: the dimension it varies (``baseline`` for the saved settings).
        changes: the dimension values it sets, by dimension name.
        description: what it tries, in words.
        effective_config: the normalized settings in one line.
        fingerprint: the config hash of its effective configuration (duplicates share it).
        outcome: how it ended.
        error: why it failed or was rejected.
        scores: the goal score of each repetition (the baseline's own median is 1).
        score: the median of ``scores``.
        score_min: the lowest repetition's score.
        score_max: the highest repetition's score.
        guard_violations: the guards it broke.
        benchmark_seconds: the seconds its repetitions took (the start excluded).
        start_seconds: the seconds its start took until Ready (the ETA of later runs reads them).
        goal: what trying it is for, in one sentence.
        tradeoff: what it may cost, in one sentence.
        runtime_notes: what the runtime's log says it resolved differently from the request
            (``["as requested"]`` when nothing differs; empty when the log was not read).
    """

    step: str
    changes: dict[str, JsonValue] = Field(default_factory=dict)
    description: str = ""
    effective_config: str = ""
    fingerprint: str = ""
    outcome: CandidateOutcome = "accepted"
    error: str | None = None
    scores: list[float] = Field(default_factory=list)
    score: float | None = None
    score_min: float | None = None
    score_max: float | None = None
    guard_violations: list[str] = Field(default_factory=list)
    benchmark_seconds: float | None = None
    start_seconds: float | None = None
    goal: str = ""
    tradeoff: str = ""
    runtime_notes: list[str] = Field(default_factory=list)


class TuningRun(WireModel):
    """A finished (or stopped) tuning run.

    Attributes:
        schema_version: 2 (a run with a confirmation stage).
        model_id: the model tuned.
        node_id: the node it ran on.
        runtime: its runtime.
        goal: what it optimized.
        steps: the dimensions tried, in order.
        repetitions: the repetitions per candidate in the search.
        confirm_repetitions: the repetitions per candidate in the confirmation stage.
        started_at: when it started.
        finished_at: when it ended.
        state: how it ended.
        error: why it failed.
        candidates: the search's candidates, in the order tried (the baseline first).
        confirmation: the confirmation stage's re-measurements, in the order they ran.
        winner: the candidate that won (the baseline's re-measurement when nothing beat it).
        winner_is_baseline: whether the saved settings are kept.
        best_definition: the normalized definition of the winner (what Apply best saves); None when the
            baseline won.
        notes: what the run noted (guards made relative, skipped dimensions, the restore).
        preset: the workload preset it was scored on; None for a classic goal's run.
        search: Quick or Full (None: explicit steps, or a run stored before it was recorded).
    """

    schema_version: int = 2
    model_id: str
    node_id: str
    runtime: str
    goal: TuningGoal
    steps: list[str] = Field(default_factory=list)
    repetitions: int = 3
    confirm_repetitions: int = 5
    started_at: datetime
    finished_at: datetime | None = None
    state: JobState = "succeeded"
    error: str | None = None
    candidates: list[TuningCandidate] = Field(default_factory=list)
    confirmation: list[TuningCandidate] = Field(default_factory=list)
    winner: TuningCandidate | None = None
    winner_is_baseline: bool = True
    best_definition: ModelDefinition | None = None
    notes: list[str] = Field(default_factory=list)
    preset: str | None = None
    search: TuningSearch | None = None


class TuningList(WireModel):
    """A model's stored tuning runs, newest first, each with its file's name."""

    runs: list[TuningRun] = Field(default_factory=list)
    files: list[str] = Field(default_factory=list)


class TuningJobView(WireModel):
    """A tuning job and its live progress.

    Attributes:
        id: the job's id.
        model_id: the model tuned.
        node_id: the node it holds in maintenance.
        goal: what it optimizes.
        steps: the dimensions it tries.
        state: running, or how it ended.
        phase: ``search``, ``confirmation``, ``restoring`` ...
        candidate: the description of the candidate being measured.
        candidate_goal: what the candidate being measured is for.
        candidate_tradeoff: what it may cost.
        preset: the workload preset it is scored on (None: a classic goal).
        done: the candidates finished so far.
        total: the candidates planned (duplicates and the confirmation stage's three included).
        eta_s: the seconds it expects to still need.
        started_at: when it started.
        finished_at: when it ended.
        error: why it failed.
        result: the results file's name once written.
    """

    id: str
    model_id: str
    node_id: str
    goal: TuningGoal
    steps: list[str] = Field(default_factory=list)
    state: JobState = "running"
    phase: str = "queued"
    candidate: str | None = None
    candidate_goal: str | None = None
    candidate_tradeoff: str | None = None
    preset: str | None = None
    done: int = 0
    total: int = 0
    eta_s: float | None = None
    started_at: datetime
    finished_at: datetime | None = None
    error: str | None = None
    result: str | None = None


class TuningJobList(WireModel):
    """Every node's current or last tuning job."""

    jobs: list[TuningJobView] = Field(default_factory=list)
