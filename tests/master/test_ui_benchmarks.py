"""The Benchmark view's pieces: its charts, history cells and progress bar, and its empty state.

The view-model functions are tested on stored results; the empty state in NiceGUI's simulation over a
real master (the browser tier runs a real suite: ``tests/browser/test_benchmarks.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from nicegui import ui
from tests.master._stack import Master, running_master
from tests.master.test_api_benchmarks import QWEN, chatty
from tests.master.test_ui_pages import portal_user

from mirbad_master.benchmarks.page import (
    components_text,
    concurrency_chart,
    guards_text,
    levels_text,
    progress_bar,
    runs_chart,
)
from mirbad_protocol.benchmarks import BenchmarkJobView, BenchmarkResult, ConcurrencyLevelResult, SloGuards

WHEN = datetime(2026, 12, 6, 3, 0, tzinfo=UTC)


def _level(n: int, tokens: float) -> ConcurrencyLevelResult:
    return ConcurrencyLevelResult(
        concurrency=n,
        per_request_tokens_per_s=tokens / n,
        aggregate_tokens_per_s=tokens,
        ttft_p50_s=0.1,
        ttft_p95_s=0.2,
    )


def _result(levels: list[int], **fields: Any) -> BenchmarkResult:
    return BenchmarkResult(
        model_id="qwen",
        served_name="Qwen3-8B",
        node_id="local",
        runtime="llamacpp",
        started_at=WHEN,
        finished_at=WHEN,
        levels=[_level(n, 10.0 * n) for n in levels],
        **fields,
    )


def _job(state: str, **fields: Any) -> BenchmarkJobView:
    return BenchmarkJobView.model_validate(
        {"id": "j1", "modelId": "qwen", "nodeId": "local", "state": state, "startedAt": WHEN, **fields}
    )


def test_the_n_axis_is_numeric_and_each_run_draws_its_own_points() -> None:
    options = concurrency_chart(
        [_result([1, 16, 2]), _result([1, 4])], "aggregate_tokens_per_s", "Aggregate tok/s against N"
    )

    assert options["xAxis"]["type"] == "value"
    assert [series["data"] for series in options["series"]] == [
        [[1, 10.0], [2, 20.0], [16, 160.0]],
        [[1, 10.0], [4, 40.0]],  # no gap filled with None where the other run had a level
    ]


def test_the_run_names_under_the_run_chart_do_not_overlap() -> None:
    labels = runs_chart([_result([1]) for _ in range(12)])["xAxis"]["axisLabel"]

    assert labels["interval"] == 0
    assert labels["rotate"] > 0
    assert labels["overflow"] == "truncate"


def test_levels_are_listed_in_numeric_order() -> None:
    assert levels_text(_result([1, 16, 2])) == "1, 2, 16"


def test_a_preset_runs_score_components_and_guards_are_shown() -> None:
    preset = _result(
        [1],
        schema_version=2,
        preset="chat",
        components={"short_tokens_per_s": 41.25, "long_ttft_s": 0.5},
        guards=SloGuards(short_ttft_p95_n1_s=2.0, max_error_rate=0.0, tool_validity=True),
    )

    assert components_text(preset) == "long_ttft_s 0.5; short_tokens_per_s 41.2"
    assert guards_text(preset) == "maxErrorRate 0.0; shortTtftP95N1S 2.0; toolValidity"
    assert components_text(_result([1])) == guards_text(_result([1])) == ""


def test_a_failed_job_is_not_a_full_bar_and_only_a_finished_one_is() -> None:
    assert progress_bar(_job("failed", error="boom")) == (0.0, "negative")
    assert progress_bar(_job("cancelled")) == (0.0, "grey-7")
    assert progress_bar(_job("succeeded")) == (1.0, "positive")
    assert progress_bar(_job("running", run=2, runs=4)) == (0.25, "primary")
    assert progress_bar(None) == (0.0, "primary")


@pytest.fixture
async def master(tmp_path: Path) -> AsyncIterator[Master]:
    async with running_master(tmp_path, agent=chatty) as started:
        yield started


@pytest.mark.anyio
async def test_the_empty_view_says_it_once_and_offers_no_cancel(master: Master) -> None:
    async with portal_user(master) as user:
        await master.admin.post("/api/models", json=QWEN)
        await user.open("/models/qwen/benchmarks")
        await user.should_see(marker="benchmark-empty")
        (cancel,) = user.find(marker="benchmark-cancel").elements
        # An empty table would say "No data available" beside "No benchmark yet.".
        with pytest.raises(AssertionError, match="expected to find at least one"):
            user.find(ui.table)

    assert isinstance(cancel, ui.button)
    assert not cancel.enabled
