"""The job progress component's bar: one reading for every kind's job (benchmarks and tuning today)."""

from __future__ import annotations

from datetime import UTC, datetime

from mirbad_master.ui._job_progress import progress_fill
from mirbad_protocol.benchmarks import BenchmarkJobView, JobState
from mirbad_protocol.tuning import TuningJobView

STARTED = datetime(2026, 3, 1, tzinfo=UTC)


def tuning(state: JobState, done: int = 0, total: int = 0) -> TuningJobView:
    return TuningJobView(
        id="t", model_id="qwen", node_id="local", goal="balanced", state=state, done=done, total=total,
        started_at=STARTED,
    )  # fmt: skip


def benchmark(state: JobState) -> BenchmarkJobView:
    return BenchmarkJobView(id="b", model_id="qwen", node_id="local", state=state, started_at=STARTED)


def test_a_running_job_fills_by_its_fraction_and_never_looks_finished() -> None:
    assert progress_fill(tuning("running", 3, 12), 3 / 12) == (0.25, "primary")
    assert progress_fill(tuning("running", 12, 12), 1.0) == (0.95, "primary")
    assert progress_fill(benchmark("running"), None) == (0.0, "primary")
    assert progress_fill(None, None) == (0.0, "primary")


def test_only_a_succeeded_job_is_full_whatever_its_kind() -> None:
    for job in (tuning("succeeded"), benchmark("succeeded")):
        assert progress_fill(job, None) == (1.0, "positive")
    for job in (tuning("failed"), benchmark("failed")):
        assert progress_fill(job, 0.5) == (0.0, "negative")
    for job in (tuning("cancelled"), benchmark("cancelled")):
        assert progress_fill(job, 0.5) == (0.0, "grey-7")
