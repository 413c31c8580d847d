"""The results store: one file per run, newest first, corrupt files skipped with a warning."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mirbad_orchestration import UnknownModelError
from mirbad_orchestration.benchmarks import BENCHMARKS_FOLDER_NAME, BenchmarkResults
from mirbad_orchestration.stores import result_stamp
from mirbad_protocol.benchmarks import BenchmarkResult

pytestmark = pytest.mark.anyio


def result(finished: datetime, model_id: str = "qwen") -> BenchmarkResult:
    return BenchmarkResult(
        model_id=model_id,
        served_name="Qwen",
        node_id="local",
        runtime="llamacpp",
        started_at=finished,
        finished_at=finished,
    )


async def test_results_are_stamped_files_listed_newest_first(tmp_path: Path) -> None:
    store = BenchmarkResults(tmp_path)
    first = datetime(2026, 3, 1, 10, 0, 0, tzinfo=UTC)
    second = datetime(2026, 3, 2, 9, 30, 5, tzinfo=UTC)

    names = [
        await store.save(result(first)),
        await store.save(result(second)),
        await store.save(result(second)),
    ]
    listed = await store.list("qwen")

    assert names == ["20260301T100000Z.json", "20260302T093005Z.json", "20260302T093005Z-1.json"]
    assert (tmp_path / BENCHMARKS_FOLDER_NAME / "qwen" / names[0]).is_file()
    assert [r.finished_at for r in listed.results] == [second, second, first]
    assert listed.skipped == []
    assert result_stamp(datetime(2026, 3, 1, 11, 0, tzinfo=UTC).astimezone()) == "20260301T110000Z"


async def test_a_corrupt_file_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = BenchmarkResults(tmp_path)
    await store.save(result(datetime(2026, 3, 1, tzinfo=UTC)))
    folder = tmp_path / BENCHMARKS_FOLDER_NAME / "qwen"
    (folder / "20260302T000000Z.json").write_text("{not json")
    (folder / "20260303T000000Z.json").write_text('{"modelId": "qwen"}')

    with caplog.at_level(logging.WARNING):
        listed = await store.list("qwen")

    assert len(listed.results) == 1
    assert listed.skipped == ["20260303T000000Z.json", "20260302T000000Z.json"]
    assert "skipping the unreadable benchmark result" in caplog.text


async def test_an_unknown_model_has_no_results_and_a_path_like_id_is_refused(tmp_path: Path) -> None:
    store = BenchmarkResults(tmp_path)

    assert (await store.list("never-run")).results == []
    with pytest.raises(UnknownModelError):
        await store.list("../etc")
