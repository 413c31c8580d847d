"""The audit log's file names: one per UTC day and rotation, ``2025-03-01.jsonl``, ``2025-03-01.1.jsonl``.

The day's first file keeps the plain name (the name the log always had); each rotation adds the next
number. A name orders the files: by day, then by number, oldest first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Final

# Shared by the log's writer and reader only; not part of the stores' API.
__all__: list[str] = []

AUDIT_SUFFIX: Final = ".jsonl"
_NAME: Final = re.compile(r"(?P<day>\d{4}-\d{2}-\d{2})(?:\.(?P<number>[1-9]\d{0,8}))?\.jsonl")


@dataclass(frozen=True, order=True)
class Segment:
    """One file of the log: the day's ``number``-th (0 for the day's first)."""

    day: date
    number: int = 0

    @property
    def name(self) -> str:
        """The file's name in the audit folder."""
        if self.number == 0:
            return f"{self.day.isoformat()}{AUDIT_SUFFIX}"
        return f"{self.day.isoformat()}.{self.number}{AUDIT_SUFFIX}"

    def next(self) -> Segment:
        """The file a rotation starts."""
        return Segment(self.day, self.number + 1)

    @classmethod
    def parse(cls, name: str) -> Segment | None:
        """The segment a file name is, or None for a name that is not one of the log's."""
        match = _NAME.fullmatch(name)
        if match is None:
            return None
        try:
            day = date.fromisoformat(match["day"])
        except ValueError:
            return None
        return cls(day, int(match["number"] or 0))


def segments(folder: Path) -> list[Segment]:
    """Every file of the log in ``folder``, oldest first (none when there is no folder)."""
    try:
        names = [path.name for path in folder.iterdir()]
    except FileNotFoundError:
        return []
    return sorted(segment for name in names if (segment := Segment.parse(name)) is not None)


def day_segments(folder: Path, day: date) -> list[Segment]:
    """The files of ``day``, oldest first."""
    found = (Segment.parse(path.name) for path in folder.glob(f"{day.isoformat()}*{AUDIT_SUFFIX}"))
    return sorted(segment for segment in found if segment is not None and segment.day == day)
