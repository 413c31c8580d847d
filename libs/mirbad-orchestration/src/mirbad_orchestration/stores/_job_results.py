"""The result store of every job kind: ``{data}/{kind folder}/{modelId}/{yyyyMMddTHHmmssZ}.json``.

One file per finished job, written atomically (temporary file, fsync, rename) and never changed
afterwards; two results stamped in the same second keep both files (``-1``, ``-2`` ...). Reading a
model's folder goes newest first and skips (with a warning) a file that cannot be read or does not hold
a result of the kind, naming it in ``skipped``, so one bad file never hides the others. A kind is the
folder and the wire model of its results (:class:`JobResultKind`); benchmarks and tuning runs are two.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Generic, TypeVar

import anyio.to_thread
from pydantic import ValidationError

from mirbad_orchestration.exceptions import UnknownModelError
from mirbad_protocol import WireModel
from mirbad_protocol.support import write_json_atomic

__all__ = ["JobResultKind", "JobResults", "StoredResults", "result_stamp"]

ResultT = TypeVar("ResultT", bound=WireModel)

_logger = logging.getLogger(__name__)
_STAMP: Final = "%Y%m%dT%H%M%SZ"
# Registry ids are slugs; anything else must never become a path below the data directory.
_SAFE_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def result_stamp(at: datetime) -> str:
    """The file stem of a result finished at ``at``: ``yyyyMMddTHHmmssZ`` in UTC."""
    return at.astimezone(UTC).strftime(_STAMP)


@dataclass(frozen=True)
class JobResultKind(Generic[ResultT]):
    """What a job kind stores.

    Attributes:
        folder: its folder inside the data directory (``benchmarks``, ``tuning``).
        model: the wire model of one result.
        noun: one result in words, for the log (``benchmark result``).
        model_id: the model a result belongs to (its folder).
        stamped_at: the time that names a result's file.
    """

    folder: str
    model: type[ResultT]
    noun: str
    model_id: Callable[[ResultT], str]
    stamped_at: Callable[[ResultT], datetime]


@dataclass
class StoredResults(Generic[ResultT]):
    """A model's readable results, newest first, with their files' names, and the skipped files."""

    results: list[ResultT] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


class JobResults(Generic[ResultT]):
    """The stored results of one job kind under one data directory.

    Args:
        data_dir: the data directory.
        kind: what the kind stores, and where.
    """

    def __init__(self, data_dir: Path, kind: JobResultKind[ResultT]) -> None:
        self._root = data_dir / kind.folder
        self._kind = kind

    def folder(self, model_id: str) -> Path:
        """The folder of a model's results.

        Raises:
            UnknownModelError: ``model_id`` is not an id a model can have.
        """
        if _SAFE_ID.fullmatch(model_id) is None or ".." in model_id:
            raise UnknownModelError(model_id)
        return self._root / model_id

    async def save(self, result: ResultT) -> str:
        """Write ``result``; returns the file's name."""
        return await anyio.to_thread.run_sync(self._save, result)

    async def read(self, model_id: str) -> StoredResults[ResultT]:
        """Every readable result of ``model_id``, newest first, and the names of the skipped files."""
        return await anyio.to_thread.run_sync(self._read, model_id)

    def _save(self, result: ResultT) -> str:
        folder = self.folder(self._kind.model_id(result))
        folder.mkdir(parents=True, exist_ok=True)
        stem = result_stamp(self._kind.stamped_at(result))
        path = folder / f"{stem}.json"
        suffix = 1
        while path.exists():
            path = folder / f"{stem}-{suffix}.json"
            suffix += 1
        write_json_atomic(path, result.model_dump(mode="json", by_alias=True), mode=0o644)
        return path.name

    def _read(self, model_id: str) -> StoredResults[ResultT]:
        folder = self.folder(model_id)
        stored: StoredResults[ResultT] = StoredResults()
        if not folder.is_dir():
            return stored
        for path in sorted(folder.glob("*.json"), reverse=True):
            try:
                stored.results.append(self._kind.model.model_validate_json(path.read_bytes()))
            except (OSError, ValidationError) as exc:
                _logger.warning("skipping the unreadable %s %s: %s", self._kind.noun, path, _first_line(exc))
                stored.skipped.append(path.name)
                continue
            stored.files.append(path.name)
        return stored


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
