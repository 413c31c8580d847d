"""The results store: ``{data}/benchmarks/{modelId}/{yyyyMMddTHHmmssZ}.json``, one file per run.

Each result is written atomically (temporary file, fsync, rename) and never changed afterwards. Listing
reads every file of the model, newest first; a file that cannot be read or does not hold a result is
skipped with a warning and named in the listing's ``skipped``, so one bad file never hides the others.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import anyio.to_thread
from pydantic import ValidationError

from mirbad_orchestration.exceptions import UnknownModelError
from mirbad_protocol import BenchmarkList, BenchmarkResult, write_json_atomic

__all__ = ["BENCHMARKS_FOLDER_NAME", "BenchmarkResults", "result_stamp"]

BENCHMARKS_FOLDER_NAME: Final = "benchmarks"
"""The results folder inside the data directory."""

_logger = logging.getLogger(__name__)
_STAMP: Final = "%Y%m%dT%H%M%SZ"
# Registry ids are slugs; anything else must never become a path below the data directory.
_SAFE_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def result_stamp(at: datetime) -> str:
    """The file stem of a result finished at ``at``: ``yyyyMMddTHHmmssZ`` in UTC."""
    return at.astimezone(UTC).strftime(_STAMP)


class BenchmarkResults:
    """The stored benchmark results under one data directory.

    Args:
        data_dir: the data directory.
    """

    def __init__(self, data_dir: Path) -> None:
        self._root = data_dir / BENCHMARKS_FOLDER_NAME

    def folder(self, model_id: str) -> Path:
        """The folder of a model's results.

        Raises:
            UnknownModelError: ``model_id`` is not an id a model can have.
        """
        if _SAFE_ID.fullmatch(model_id) is None or ".." in model_id:
            raise UnknownModelError(model_id)
        return self._root / model_id

    async def save(self, result: BenchmarkResult) -> str:
        """Write ``result``; returns the file's name."""
        return await anyio.to_thread.run_sync(self._save, result)

    async def list(self, model_id: str) -> BenchmarkList:
        """Every readable result of ``model_id``, newest first, and the names of the skipped files."""
        return await anyio.to_thread.run_sync(self._list, model_id)

    def _save(self, result: BenchmarkResult) -> str:
        folder = self.folder(result.model_id)
        folder.mkdir(parents=True, exist_ok=True)
        stem = result_stamp(result.finished_at)
        path = folder / f"{stem}.json"
        suffix = 1
        while path.exists():  # two runs in one second keep both files
            path = folder / f"{stem}-{suffix}.json"
            suffix += 1
        write_json_atomic(path, result.model_dump(mode="json", by_alias=True), mode=0o644)
        return path.name

    def _list(self, model_id: str) -> BenchmarkList:
        folder = self.folder(model_id)
        if not folder.is_dir():
            return BenchmarkList()
        results: list[BenchmarkResult] = []
        skipped: list[str] = []
        for path in sorted(folder.glob("*.json"), reverse=True):
            try:
                results.append(BenchmarkResult.model_validate_json(path.read_bytes()))
            except (OSError, ValidationError) as exc:
                _logger.warning("skipping the unreadable benchmark result %s: %s", path, _first_line(exc))
                skipped.append(path.name)
        return BenchmarkList(results=results, skipped=skipped)


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
