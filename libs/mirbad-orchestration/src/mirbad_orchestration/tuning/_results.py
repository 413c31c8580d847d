"""The tuning results store: ``{data}/tuning/{modelId}/{yyyyMMddTHHmmssZ}.json``, one file per run.

Written atomically and never changed afterwards; listing reads a model's files newest first and skips
(with a warning) a file that does not hold a run, so one bad file never hides the others.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Final

import anyio.to_thread
from pydantic import ValidationError

from mirbad_orchestration.benchmarks import BenchmarkResults, result_stamp
from mirbad_orchestration.exceptions import NoTuningRunError
from mirbad_protocol import TuningList, TuningRun, write_json_atomic

__all__ = ["TUNING_FOLDER_NAME", "TuningResults"]

TUNING_FOLDER_NAME: Final = "tuning"
"""The results folder inside the data directory."""

_logger = logging.getLogger(__name__)


class TuningResults:
    """The stored tuning runs under one data directory."""

    def __init__(self, data_dir: Path) -> None:
        self._root = data_dir / TUNING_FOLDER_NAME
        # The benchmarks' store knows which ids may become a folder name.
        self._ids = BenchmarkResults(data_dir)

    def folder(self, model_id: str) -> Path:
        """The folder of a model's runs (``UnknownModelError`` for an id no model can have)."""
        return self._root / self._ids.folder(model_id).name

    async def save(self, run: TuningRun) -> str:
        """Write ``run``; returns the file's name."""
        return await anyio.to_thread.run_sync(self._save, run)

    async def list(self, model_id: str) -> TuningList:
        """Every readable run of ``model_id``, newest first, with their files' names."""
        return await anyio.to_thread.run_sync(self._list, model_id)

    async def load(self, model_id: str, name: str) -> TuningRun:
        """The run stored as ``name``.

        Raises:
            NoTuningRunError: no such run of the model.
        """
        listing = await self.list(model_id)
        for file, run in zip(listing.files, listing.runs, strict=True):
            if file == name:
                return run
        raise NoTuningRunError(f"model {model_id!r} has no tuning run {name!r}")

    def _save(self, run: TuningRun) -> str:
        folder = self.folder(run.model_id)
        folder.mkdir(parents=True, exist_ok=True)
        stem = result_stamp(run.finished_at or run.started_at)
        path = folder / f"{stem}.json"
        suffix = 1
        while path.exists():
            path = folder / f"{stem}-{suffix}.json"
            suffix += 1
        write_json_atomic(path, run.model_dump(mode="json", by_alias=True), mode=0o644)
        return path.name

    def _list(self, model_id: str) -> TuningList:
        folder = self.folder(model_id)
        if not folder.is_dir():
            return TuningList()
        listing = TuningList()
        for path in sorted(folder.glob("*.json"), reverse=True):
            try:
                listing.runs.append(TuningRun.model_validate_json(path.read_bytes()))
            except (OSError, ValidationError) as exc:
                _logger.warning("skipping the unreadable tuning run %s: %s", path, str(exc).splitlines()[:1])
                continue
            listing.files.append(path.name)
        return listing
