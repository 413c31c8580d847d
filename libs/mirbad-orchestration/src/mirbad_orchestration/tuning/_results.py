"""The tuning runs: the job runner's result store of the tuning kind.

``{data}/tuning/{modelId}/{yyyyMMddTHHmmssZ}.json``, one file per run (see
:class:`~mirbad_orchestration.stores.JobResults`); a listing pairs each run with its file's name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from mirbad_orchestration.exceptions import NoTuningRunError
from mirbad_orchestration.stores import JobResultKind, JobResults
from mirbad_protocol.tuning import TuningList, TuningRun

__all__ = ["TUNING_FOLDER_NAME", "TUNING_RUNS", "TuningResults"]

TUNING_FOLDER_NAME: Final = "tuning"
"""The results folder inside the data directory."""

TUNING_RUNS: Final = JobResultKind(
    folder=TUNING_FOLDER_NAME,
    model=TuningRun,
    noun="tuning run",
    model_id=lambda run: run.model_id,
    stamped_at=lambda run: run.finished_at or run.started_at,
)
"""What the tuning kind stores."""


class TuningResults(JobResults[TuningRun]):
    """The stored tuning runs under one data directory."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir, TUNING_RUNS)

    async def list(self, model_id: str) -> TuningList:
        """Every readable run of ``model_id``, newest first, with their files' names."""
        stored = await self.read(model_id)
        return TuningList(runs=stored.results, files=stored.files)

    async def load(self, model_id: str, name: str) -> TuningRun:
        """The run stored as ``name``.

        Raises:
            NoTuningRunError: no such run of the model.
        """
        stored = await self.read(model_id)
        for file, run in zip(stored.files, stored.results, strict=True):
            if file == name:
                return run
        raise NoTuningRunError(f"model {model_id!r} has no tuning run {name!r}")
