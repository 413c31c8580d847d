"""The benchmark results: the job runner's result store of the benchmark kind.

``{data}/benchmarks/{modelId}/{yyyyMMddTHHmmssZ}.json``, one file per run (see
:class:`~mirbad_orchestration.stores.JobResults`); a listing names the files it skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from mirbad_orchestration.stores import JobResultKind, JobResults
from mirbad_protocol.benchmarks import BenchmarkList, BenchmarkResult

__all__ = ["BENCHMARKS_FOLDER_NAME", "BENCHMARK_RESULTS", "BenchmarkResults"]

BENCHMARKS_FOLDER_NAME: Final = "benchmarks"
"""The results folder inside the data directory."""

BENCHMARK_RESULTS: Final = JobResultKind(
    folder=BENCHMARKS_FOLDER_NAME,
    model=BenchmarkResult,
    noun="benchmark result",
    model_id=lambda result: result.model_id,
    stamped_at=lambda result: result.finished_at,
)
"""What the benchmark kind stores."""


class BenchmarkResults(JobResults[BenchmarkResult]):
    """The stored benchmark results under one data directory.

    Args:
        data_dir: the data directory.
    """

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir, BENCHMARK_RESULTS)

    async def list(self, model_id: str) -> BenchmarkList:
        """Every readable result of ``model_id``, newest first, and the names of the skipped files."""
        stored = await self.read(model_id)
        return BenchmarkList(results=stored.results, skipped=stored.skipped)
