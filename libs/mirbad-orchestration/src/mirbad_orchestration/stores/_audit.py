"""The audit log: who did what to which thing, and how it went, in ``{data_dir}/audit/``.

One JSON object per line, one file per UTC day (``2025-03-01.jsonl``), only ever appended to. Lines
are written in a worker thread, one at a time, and fsynced: an audit line that a power cut can lose is
not much of a record. The log stays bounded: every text field is cut to a maximum length, and files
older than the retention are deleted when a new day's file is started.

Writing the log never fails the action it records (that action already happened): a line that cannot
be written is reported through :mod:`logging` instead.
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
from typing import Final, Literal, Protocol

import anyio
import anyio.to_thread
from pydantic import ValidationError

from mirbad_protocol import WireModel

__all__ = ["AUDIT_FOLDER_NAME", "AuditEntry", "AuditLog", "AuditOutcome", "AuditedJob"]

AUDIT_FOLDER_NAME: Final = "audit"
"""The audit folder's name inside the data directory."""

AuditOutcome = Literal["ok", "failed", "refused"]
"""How an audited action ended: done, tried and failed, or not allowed / not attempted."""


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
_SUFFIX: Final = ".jsonl"
_FILE_MODE: Final = 0o600  # actors name people and keys: not for every local user to read
_ELLIPSIS: Final = "…"


class AuditEntry(WireModel):
    """One audited action.

    Attributes:
        at: when it was recorded (UTC).
        actor: who did it: ``user:<name>``, ``key:<id>``, or ``system:<part>`` for the master itself
            (``system:autostart`` for its automatic starts and restarts).
        action: what was done, dotted (``model.start``, ``model.stop``).
        target: what it was done to (a model id, a node id, a key id).
        outcome: how it ended.
        node_id: the node involved, when there is one.
        detail: an error message or other short explanation.
    """

    at: datetime
    actor: str
    action: str
    target: str
    outcome: AuditOutcome
    node_id: str | None = None
    detail: str | None = None


class AuditLog:
    """Appends :class:`AuditEntry` lines to the day's file and reads days back.

    Args:
        data_dir: the data directory; lines go to ``data_dir / "audit"``.
        clock: returns the current time (aware); tests inject a fixed one.
        keep_days: how many days of files are kept besides today's.
        max_field_chars: the longest a text field may be; longer ones are cut and end in an ellipsis.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        clock: Callable[[], datetime] | None = None,
        keep_days: int = 365,
        max_field_chars: int = 2000,
    ) -> None:
        self._folder = data_dir / AUDIT_FOLDER_NAME
        self._clock = clock or partial(datetime.now, UTC)
        self._keep_days = keep_days
        self._max = max_field_chars
        self._lock = anyio.Lock()
        self._pruned_for: date | None = None

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
                _logger.error("audit line not written (%s): %s", exc, _line(entry))
        return entry

    async def record_jobs(self, actor: str, action: str, jobs: Iterable[AuditedJob]) -> None:
        """Append one line per job (a cancel that ended several jobs), each targeting the job's model."""
        for job in jobs:
            await self.record(actor, action, job.model_id, node_id=job.node_id)

    async def read(self, day: date) -> builtins.list[AuditEntry]:
        """Every entry of ``day`` (UTC), oldest first; unreadable lines are skipped."""
        path = self._folder / f"{day.isoformat()}{_SUFFIX}"
        try:
            text = await anyio.to_thread.run_sync(partial(path.read_text, encoding="utf-8"))
        except FileNotFoundError:
            return []
        entries: builtins.list[AuditEntry] = []
        for line in text.splitlines():
            # A line torn by a crash mid-write is dropped rather than failing the whole day.
            with contextlib.suppress(ValidationError):
                entries.append(AuditEntry.model_validate_json(line))
        return entries

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
        path = self._folder / f"{day.isoformat()}{_SUFFIX}"
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, _FILE_MODE), "ab") as handle:
            handle.write((_line(entry) + "\n").encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())

    def _prune(self, today: date) -> None:
        oldest = today - timedelta(days=self._keep_days)
        for path in self._folder.glob(f"*{_SUFFIX}"):
            try:
                day = date.fromisoformat(path.name.removesuffix(_SUFFIX))
            except ValueError:
                continue  # not one of ours
            if day < oldest:
                with contextlib.suppress(OSError):
                    path.unlink()


def _line(entry: AuditEntry) -> str:
    data = entry.model_dump(mode="json", by_alias=True, exclude_none=True)
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))
