"""Reading the audit log back: filters, newest first, a page at a time behind an opaque cursor.

The files are walked from the newest to the oldest and each file from its end, a chunk at a time, so
a page costs what it reads, never the whole log. A cursor is the place the last page stopped: a file
and the byte offset of the last line it returned. Files are only ever appended to and rotation never
renames one, so that place stays valid while lines are written: a reader that follows the cursors sees
every line that was there when it started exactly once (the lines written since are on a new first page).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO, Final

from pydantic import ValidationError

from mirbad_orchestration.exceptions import AuditQueryError
from mirbad_protocol.admin import AuditEntry

from ._audit_files import Segment, segments

__all__ = [
    "DEFAULT_AUDIT_PAGE",
    "MAX_AUDIT_PAGE",
    "AuditPage",
    "AuditQuery",
    "parse_audit_time",
]

DEFAULT_AUDIT_PAGE: Final = 50
"""Entries in a page unless asked otherwise."""
MAX_AUDIT_PAGE: Final = 500
"""The most entries one page may ask for."""

_CHUNK: Final = 64 * 1024
_CURSOR: Final = re.compile(r"(?P<name>[0-9.\-]+\.jsonl):(?P<offset>0|[1-9]\d{0,15})")


@dataclass(frozen=True)
class AuditQuery:
    """Which entries to read; every filter left None matches all.

    Attributes:
        actor: the actor, exactly (``user:admin``, ``key:ci``, ``system:autostart``).
        action: the action exactly, or a dotted prefix of it (``model`` matches ``model.start`` and
            ``model.tune.cancel``, never ``models.x``).
        subject: what the entry is about: its target, or the node it involved (a node's id finds the
            node's own actions and those of the models on it).
        since: the earliest time, included (aware).
        until: the latest time, excluded (aware).
    """

    actor: str | None = None
    action: str | None = None
    subject: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        for name, value in (("since", self.since), ("until", self.until)):
            if value is not None and value.utcoffset() is None:
                raise AuditQueryError(name, "needs a time zone (an ISO 8601 time ending in Z or +hh:mm)")
        if self.since is not None and self.until is not None and self.until <= self.since:
            raise AuditQueryError("until", "must be later than since")

    def matches(self, entry: AuditEntry) -> bool:
        """Whether ``entry`` passes every filter."""
        if self.actor is not None and entry.actor != self.actor:
            return False
        if self.action is not None and not (
            entry.action == self.action or entry.action.startswith(f"{self.action}.")
        ):
            return False
        if self.subject is not None and self.subject not in (entry.target, entry.node_id):
            return False
        if self.since is not None and entry.at < self.since:
            return False
        return self.until is None or entry.at < self.until

    def may_hold(self, segment: Segment) -> bool:
        """Whether a file of ``segment``'s day can hold a match (the day is the lines' UTC day)."""
        if self.since is not None and segment.day < self.since.astimezone(UTC).date():
            return False
        return self.until is None or segment.day <= self.until.astimezone(UTC).date()


@dataclass(frozen=True)
class AuditPage:
    """One page of entries, newest first.

    Attributes:
        entries: the entries.
        next: the cursor of the following (older) page, or None when no older entry matches.
    """

    entries: list[AuditEntry]
    next: str | None


def parse_audit_time(field: str, text: str) -> datetime:
    """An ISO 8601 time from a query (``2025-03-01T09:30:00Z``); one without a zone is taken as UTC.

    Raises:
        AuditQueryError: naming ``field``, for text that is no such time.
    """
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise AuditQueryError(field, f"{text!r} is not an ISO 8601 time (2025-03-01T09:30:00Z)") from None
    return value if value.utcoffset() is not None else value.replace(tzinfo=UTC)


def encode_cursor(segment: Segment, offset: int) -> str:
    """The cursor of the place just before the line at ``offset`` of ``segment``."""
    return base64.urlsafe_b64encode(f"{segment.name}:{offset}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[Segment, int]:
    """The place a cursor names.

    Raises:
        AuditQueryError: naming ``cursor``, for one this log did not give out.
    """
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, ValueError):
        raise AuditQueryError("cursor", "not a cursor of this log") from None
    match = _CURSOR.fullmatch(text)
    segment = None if match is None else Segment.parse(match["name"])
    if match is None or segment is None:
        raise AuditQueryError("cursor", "not a cursor of this log")
    return segment, int(match["offset"])


def read_page(folder: Path, query: AuditQuery, limit: int, start: tuple[Segment, int] | None) -> AuditPage:
    """One page of ``query``'s entries from ``start`` (a decoded cursor) or the newest line on.

    Raises:
        AuditQueryError: a cursor whose place is not the start of a line of its file.
    """
    entries: list[AuditEntry] = []
    last: tuple[Segment, int] | None = None
    for segment, offset, entry in _newest_first(folder, query, start):
        if len(entries) == limit:
            # One more match exists: the page is full and has a next one.
            assert last is not None
            return AuditPage(entries, encode_cursor(*last))
        entries.append(entry)
        last = (segment, offset)
    return AuditPage(entries, None)


def _newest_first(
    folder: Path, query: AuditQuery, start: tuple[Segment, int] | None
) -> Iterator[tuple[Segment, int, AuditEntry]]:
    """The matching entries with their places, newest first, from ``start`` on."""
    for segment in reversed(segments(folder)):
        if start is not None and segment > start[0]:
            continue
        if not query.may_hold(segment):
            if query.since is not None and segment.day < query.since.astimezone(UTC).date():
                return  # every older file is older still
            continue
        end = start[1] if start is not None and segment == start[0] else None
        try:
            handle = (folder / segment.name).open("rb")
        except FileNotFoundError:
            continue  # pruned meanwhile
        with handle:
            limit = _line_end(handle, end)
            for offset, line in _lines_backwards(handle, limit):
                with contextlib.suppress(ValidationError):
                    # A torn line (a crash mid-write) is no entry.
                    entry = AuditEntry.model_validate_json(line)
                    if query.matches(entry):
                        yield segment, offset, entry


def _line_end(handle: BinaryIO, end: int | None) -> int:
    """Where the whole lines end: ``end`` checked as a line start, or after the file's last newline."""
    size = os.fstat(handle.fileno()).st_size
    if end is not None:
        if end > size:
            raise AuditQueryError("cursor", "not a cursor of this log")
        if end > 0:
            handle.seek(end - 1)
            if handle.read(1) != b"\n":
                raise AuditQueryError("cursor", "not a cursor of this log")
        return end
    # A line being written (or torn) has no newline yet: it is not read.
    position = size
    while position > 0:
        step = min(_CHUNK, position)
        handle.seek(position - step)
        cut = handle.read(step).rfind(b"\n")
        if cut >= 0:
            return position - step + cut + 1
        position -= step
    return 0


def _lines_backwards(handle: BinaryIO, limit: int) -> Iterator[tuple[int, bytes]]:
    """The lines before ``limit`` (a line start), last first, as (their offset, their bytes)."""
    position = limit  # the buffer holds the bytes [position, position + len(buffer))
    buffer = b""
    while True:
        # The buffer always ends with the newline of the last line not yet given.
        cut = buffer.rfind(b"\n", 0, len(buffer) - 1) if buffer else -1
        if cut >= 0:
            yield position + cut + 1, buffer[cut + 1 : -1]
            buffer = buffer[: cut + 1]
            continue
        if position == 0:
            if buffer:
                yield 0, buffer[:-1]
            return
        step = min(_CHUNK, position)
        position -= step
        handle.seek(position)
        buffer = handle.read(step) + buffer
