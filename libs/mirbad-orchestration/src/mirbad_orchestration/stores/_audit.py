"""The audit log: who did what to which thing, and how it went, in ``{data_dir}/audit/``.

One JSON object per line, only ever appended to, in one file per UTC day (``2025-03-01.jsonl``) that is
rotated by size: once the day's file would grow past ``max_file_bytes`` the next line starts the day's
next file (``2025-03-01.1.jsonl``, ``.2`` ...). Rotation renames nothing, it only creates the next
file, so a crash in the middle of one loses no line that was written: at worst the next file is empty
or ends in a torn line, which the next start finishes with a newline before appending. Lines are
written in a worker thread, one at a time, and fsynced: an audit line that a power cut can lose is
not much of a record. The log stays bounded: every text field is cut to a maximum length, and files
older than the retention are deleted when a new day's file is started.

Writing the log never fails the action it records (that action already happened): a line that cannot
be written is reported through :mod:`logging` instead. Reading it back (:meth:`AuditLog.page`, see
``_audit_query``) walks the files backwards, newest first, a chunk at a time.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Final, Protocol

import anyio
import anyio.to_thread
from pydantic import ValidationError

from mirbad_orchestration.exceptions import AuditQueryError
from mirbad_protocol.admin import AuditEntry, AuditOutcome

from ._audit_files import Segment, day_segments, segments
from ._audit_query import (
    DEFAULT_AUDIT_PAGE,
    MAX_AUDIT_PAGE,
    AuditPage,
    AuditQuery,
    decode_cursor,
    read_page,
)

__all__ = ["AUDIT_FOLDER_NAME", "DEFAULT_AUDIT_FILE_BYTES", "AuditLog", "AuditedJob"]

AUDIT_FOLDER_NAME: Final = "audit"
"""The audit folder's name inside the data directory."""
DEFAULT_AUDIT_FILE_BYTES: Final = 16 * 1024 * 1024
"""The size past which the day's file is rotated (about 50,000 lines)."""


class AuditedJob(Protocol):
    """A job as the audit log records it: the model it ran on and that model's node."""

    @property
    def model_id(self) -> str:
        """The model's id (the entry's target)."""
        ...

    @property
    def node_id(self) -> str:
        """The node the job ran on."""
        ...


_logger = logging.getLogger(__name__)
_FILE_MODE: Final = 0o600  # actors name people and keys: not for every local user to read
_ELLIPSIS: Final = "…"


class AuditLog:
    """Appends :class:`AuditEntry` lines to the day's file, rotates it by size, and reads it back.

    Args:
        data_dir: the data directory; lines go to ``data_dir / "audit"``.
        clock: returns the current time (aware); tests inject a fixed one.
        keep_days: how many days of files are kept besides today's.
        max_field_chars: the longest a text field may be; longer ones are cut and end in an ellipsis.
        max_file_bytes: the size past which the day's file is rotated (a line is never split: a file
            holds at least one line, however long).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        clock: Callable[[], datetime] | None = None,
        keep_days: int = 365,
        max_field_chars: int = 2000,
        max_file_bytes: int = DEFAULT_AUDIT_FILE_BYTES,
    ) -> None:
        if max_file_bytes < 1:
            raise ValueError("max_file_bytes must be positive")
        self._folder = data_dir / AUDIT_FOLDER_NAME
        self._clock = clock or partial(datetime.now, UTC)
        self._keep_days = keep_days
        self._max = max_field_chars
        self._max_bytes = max_file_bytes
        self._lock = anyio.Lock()
        self._pruned_for: date | None = None
        # The file being appended to and its size; None until the first line, and after a failed write
        # (the disk is asked again, rather than trusting what a half-done write left behind).
        self._current: tuple[Segment, int] | None = None

    @property
    def folder(self) -> Path:
        """The folder of the daily files."""
        return self._folder

    async def record(
        self,
        actor: str,
        action: str,
        target: str,
        *,
        outcome: AuditOutcome = "ok",
        node_id: str | None = None,
        detail: str | None = None,
    ) -> AuditEntry:
        """Append one line and return the entry written (see :class:`AuditEntry` for the fields)."""
        texts = {"actor": actor, "action": action, "target": target, "node_id": node_id, "detail": detail}
        cut = {name: self._cut(value) for name, value in texts.items()}
        async with self._lock:
            # The clock is read under the lock so the lines of a file are in time order.
            at = self._clock().astimezone(UTC)
            entry = AuditEntry.model_validate({**cut, "at": at, "outcome": outcome})
            try:
                await anyio.to_thread.run_sync(self._append, entry)
            except OSError as exc:
                self._current = None
                _logger.error("audit line not written (%s): %s", exc, _line(entry))
        return entry

    async def record_jobs(self, actor: str, action: str, jobs: Iterable[AuditedJob]) -> None:
        """Append one line per job (a cancel that ended several jobs), each targeting the job's model."""
        for job in jobs:
            await self.record(actor, action, job.model_id, node_id=job.node_id)

    async def read(self, day: date) -> builtins.list[AuditEntry]:
        """Every entry of ``day`` (UTC) across its rotated files, oldest first; unreadable lines are skipped.

        It holds the whole day in memory: for tests and small days. :meth:`page` reads any span.
        """
        return await anyio.to_thread.run_sync(self._read_day, day)

    async def page(
        self, query: AuditQuery | None = None, *, limit: int = DEFAULT_AUDIT_PAGE, cursor: str | None = None
    ) -> AuditPage:
        """One page of the entries ``query`` matches, newest first.

        Args:
            query: the filters (every entry when None).
            limit: the most entries in the page (1 to :data:`MAX_AUDIT_PAGE`).
            cursor: where the previous page ended (its ``next``); None for the newest entries.

        Raises:
            AuditQueryError: a limit out of range, or a cursor that is not one this log gave out.
        """
        if not 1 <= limit <= MAX_AUDIT_PAGE:
            raise AuditQueryError("limit", f"must be 1 to {MAX_AUDIT_PAGE}, not {limit}")
        start = None if cursor is None else decode_cursor(cursor)
        return await anyio.to_thread.run_sync(
            partial(read_page, self._folder, query or AuditQuery(), limit, start)
        )

    def _cut(self, value: str | None) -> str | None:
        if value is None or len(value) <= self._max:
            return value
        return value[: self._max - len(_ELLIPSIS)] + _ELLIPSIS

    def _append(self, entry: AuditEntry) -> None:
        day = entry.at.date()
        self._folder.mkdir(parents=True, exist_ok=True)
        if self._pruned_for != day:
            self._prune(day)
            self._pruned_for = day
        data = (_line(entry) + "\n").encode("utf-8")
        segment, size = self._segment_for(day)
        if size > 0 and size + len(data) > self._max_bytes:
            # Rotation only starts the next file: no rename, so a crash here leaves every line in place.
            segment, size = segment.next(), 0
        path = self._folder / segment.name
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, _FILE_MODE), "ab") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        self._current = (segment, size + len(data))

    def _segment_for(self, day: date) -> tuple[Segment, int]:
        """The day's file to append to and its size; a torn last line (a crash mid-write) is ended first."""
        if self._current is not None and self._current[0].day == day:
            return self._current
        found = day_segments(self._folder, day)
        segment = found[-1] if found else Segment(day)
        path = self._folder / segment.name
        try:
            with path.open("rb+") as handle:
                size = handle.seek(0, os.SEEK_END)
                if size > 0:
                    handle.seek(size - 1)
                    if handle.read(1) != b"\n":
                        # The torn line stays (the reader skips it); the next one must not join it.
                        handle.write(b"\n")
                        handle.flush()
                        os.fsync(handle.fileno())
                        size += 1
        except FileNotFoundError:
            size = 0
        return segment, size

    def _read_day(self, day: date) -> builtins.list[AuditEntry]:
        entries: builtins.list[AuditEntry] = []
        for segment in day_segments(self._folder, day):
            try:
                text = (self._folder / segment.name).read_text(encoding="utf-8")
            except FileNotFoundError:
                continue  # pruned meanwhile
            for line in text.splitlines():
                # A line torn by a crash mid-write is dropped rather than failing the whole day.
                with contextlib.suppress(ValidationError):
                    entries.append(AuditEntry.model_validate_json(line))
        return entries

    def _prune(self, today: date) -> None:
        oldest = today - timedelta(days=self._keep_days)
        for segment in segments(self._folder):
            if segment.day < oldest:
                with contextlib.suppress(OSError):
                    (self._folder / segment.name).unlink()


def _line(entry: AuditEntry) -> str:
    data = entry.model_dump(mode="json", by_alias=True, exclude_none=True)
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))
