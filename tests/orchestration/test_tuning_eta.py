"""The tuning ETA: planned from recent runs' starts and benchmark times, re-projected from the run's pace."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_orchestration.tuning import (
    EtaBasis,
    EtaProjection,
    TuningResults,
    eta_basis,
    plan_for,
    planned_seconds,
)
from mirbad_protocol import ModelDefinition
from mirbad_protocol.tuning import TuningCandidate, TuningRun

pytestmark = pytest.mark.anyio

WHEN = datetime(2026, 12, 1, tzinfo=UTC)


def run(preset: str | None, starts: list[float], benchmarks: list[float], repetitions: int = 3) -> TuningRun:
    candidates = [
        TuningCandidate(step="x", start_seconds=start, benchmark_seconds=bench)
        for start, bench in zip(starts, benchmarks, strict=True)
    ]
    return TuningRun(
        model_id="m",
        node_id="n",
        runtime="vllm",
        goal="balanced",
        started_at=WHEN,
        preset=preset,
        repetitions=repetitions,
        candidates=candidates,
    )


def test_the_plan_is_the_specs_formula() -> None:
    basis = EtaBasis(start_s=30.0, repetition_s=10.0)
    projection = EtaProjection(basis, 6, repetitions=3, confirm_repetitions=5)
    # 7 candidates (the baseline too) x (30 + 30) - one reused start + 3 x (30 + 50)
    assert projection.planned() == pytest.approx(7 * 60 - 30 + 3 * 80)
    assert projection.total == 10


def test_without_history_the_defaults_make_60_s_a_search_candidate() -> None:
    plan = plan_for(ModelDefinition(id="m", served_name="m", model_path="m"))
    basis = eta_basis([], None)
    assert basis.source == "defaults"
    assert EtaProjection(basis, plan.candidates).planned() == pytest.approx(planned_seconds(plan))
    assert basis.start_s + 3 * basis.repetition_s == pytest.approx(60.0)


def test_the_basis_comes_from_recent_starts_and_the_last_run_with_the_preset() -> None:
    runs = [
        run("throughput", [10.0, 12.0, 14.0], [300.0, 300.0, 300.0]),  # newest: another preset
        run("interactive", [50.0, 70.0], [30.0, 60.0]),
        run("interactive", [90.0], [600.0]),  # older: not the last run with the preset
    ]
    basis = eta_basis(runs, "interactive")
    assert basis.start_s == pytest.approx(32.0)  # the median of 10, 12, 14, 50, 70, 90
    assert basis.repetition_s == pytest.approx(15.0)  # the median of 30 and 60, over 3 repetitions
    assert "recent runs" in basis.source
    assert eta_basis(runs, "long-documents", last_benchmark_s=7.0).repetition_s == pytest.approx(7.0)
    assert eta_basis(runs, "long-documents").repetition_s == pytest.approx(EtaBasis().repetition_s)


def test_the_rest_is_re_projected_from_the_runs_own_pace() -> None:
    projection = EtaProjection(EtaBasis(start_s=20.0, repetition_s=10.0), 4)
    planned = projection.planned()
    assert projection.remaining(0.0, 0) == pytest.approx(planned)
    # Two candidates planned at 50 s each (one start reused: 80 s) took 160 s: twice the plan's pace.
    assert projection.remaining(160.0, 2) == pytest.approx((planned - 80.0) * 2)
    assert projection.remaining(10_000.0, projection.total) == 0.0


@given(
    st.floats(min_value=0.0, max_value=600.0),
    st.floats(min_value=0.1, max_value=600.0),
    st.integers(min_value=0, max_value=40),
    st.floats(min_value=0.0, max_value=1e5),
    st.integers(min_value=0, max_value=60),
)
def test_the_projection_is_never_negative_and_shrinks_to_nothing(
    start: float, repetition: float, candidates: int, elapsed: float, done: int
) -> None:
    projection = EtaProjection(EtaBasis(start_s=start, repetition_s=repetition), candidates)
    assert projection.planned() >= 0.0
    left = projection.remaining(elapsed, done)
    assert left >= 0.0
    if done >= projection.total:
        assert left == 0.0


async def test_a_classic_run_stored_before_the_preset_search_loads_and_estimates_with_defaults(
    tmp_path: Path,
) -> None:
    """A run file of the classic descent (no preset, search, start seconds or runtime notes) still loads."""
    folder = tmp_path / "tuning" / "m"
    folder.mkdir(parents=True)
    classic = {
        "schemaVersion": 2,
        "modelId": "m",
        "nodeId": "n",
        "runtime": "vllm",
        "goal": "balanced",
        "startedAt": "2026-11-30T10:00:00Z",
        "candidates": [{"step": "baseline", "scores": [1.0], "score": 1.0, "benchmarkSeconds": 90.0}],
    }
    (folder / "20261130T100000Z.json").write_text(json.dumps(classic))
    [run] = (await TuningResults(tmp_path).list("m")).runs
    assert (run.preset, run.search, run.candidates[0].runtime_notes) == (None, None, [])
    basis = eta_basis([run], None)
    assert basis.start_s == EtaBasis().start_s  # no start was recorded: the default
    assert basis.repetition_s == pytest.approx(30.0)  # 90 s over the run's 3 repetitions


def test_the_estimate_says_whether_it_was_measured_or_is_a_first_guess() -> None:
    """Issue 24 item 9: "about 15 min" from the defaults must not read like a measured pace."""
    guess = eta_basis([], None)
    assert not guess.measured
    assert guess.describe().startswith("a first guess")

    recorded = [run("interactive", [40.0, 44.0], [30.0, 36.0])]
    both = eta_basis(recorded, "interactive")
    assert both.start_measured
    assert both.repetition_measured
    assert both.describe().startswith("from the last runs' pace")
    assert "first guess" not in both.describe()

    # Only the starts were measured (no run or benchmark with this preset): the benchmark is named a guess.
    starts_only = eta_basis(recorded, "throughput")
    assert starts_only.start_measured
    assert not starts_only.repetition_measured
    assert starts_only.describe().startswith("from the last runs' pace")
    assert starts_only.describe().endswith("the benchmark time a first guess")

    # A stored benchmark's measured time counts as measured.
    benched = eta_basis([], "throughput", last_benchmark_s=8.0)
    assert benched.repetition_measured
    assert not benched.start_measured
    assert benched.describe().endswith("the start time a first guess")
    assert EtaProjection(benched, 3).basis == benched
