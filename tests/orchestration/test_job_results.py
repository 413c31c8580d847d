"""Stored job results: the files written before benchmarks and tuning shared one runner still load.

``stored_jobs/`` beside this file is a data directory written by the stores of that time (one classic
benchmark, one workload-preset benchmark, one embeddings benchmark, a finished and a cancelled tuning
run); the snapshot holds what each store reads back from it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from mirbad_orchestration.benchmarks import BenchmarkResults
from mirbad_orchestration.tuning import TuningResults

pytestmark = pytest.mark.anyio

STORED = Path(__file__).parent / "stored_jobs"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    shutil.copytree(STORED, tmp_path, dirs_exist_ok=True)
    return tmp_path


async def test_stored_benchmark_results_load_unchanged(
    data_dir: Path, snapshot_json: SnapshotAssertion
) -> None:
    store = BenchmarkResults(data_dir)
    loaded = {model: await store.list(model) for model in ("qwen", "embed")}

    assert all(listing.skipped == [] for listing in loaded.values())
    assert {
        m: listing.model_dump(mode="json", by_alias=True) for m, listing in loaded.items()
    } == snapshot_json


async def test_stored_tuning_runs_load_unchanged(data_dir: Path, snapshot_json: SnapshotAssertion) -> None:
    store = TuningResults(data_dir)
    listing = await store.list("qwen")
    newest = await store.load("qwen", listing.files[0])

    assert listing.files == ["20260305T100100Z.json", "20260304T103000Z.json"]
    assert newest == listing.runs[0]
    assert listing.model_dump(mode="json", by_alias=True) == snapshot_json


async def test_a_result_saved_again_is_the_stored_file(
    data_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    again = tmp_path_factory.mktemp("again")
    for model in ("qwen", "embed"):
        for result in (await BenchmarkResults(data_dir).list(model)).results:
            name = await BenchmarkResults(again).save(result)
            assert (again / "benchmarks" / model / name).read_bytes() == (
                data_dir / "benchmarks" / model / name
            ).read_bytes()
    for run in (await TuningResults(data_dir).list("qwen")).runs:
        name = await TuningResults(again).save(run)
        assert (again / "tuning" / "qwen" / name).read_bytes() == (
            data_dir / "tuning" / "qwen" / name
        ).read_bytes()
