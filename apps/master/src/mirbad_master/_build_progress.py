"""How far a llama.cpp build is, read from the build's own progress lines.

CMake's generators print where they are: Unix Makefiles ``[ 42%] Building CXX object …`` (a share of
the build's progress marks), Ninja ``[113/274] Building CXX object …`` (steps done of the total). uv
relays a build backend's output with ``-v``, each line behind ``DEBUG `` (its log level). A line that
carries neither form (uv's own messages, compiler warnings, CMake's configure step) reads as None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = ["BuildProgress", "parse_build_progress"]

# Optional log prefix (uv -v's "DEBUG "), then the bracket at the start of what the build printed.
_MAKE: Final = re.compile(r"^(?:DEBUG\s+)?\[\s*(\d{1,3})%\]\s+\S")
_NINJA: Final = re.compile(r"^(?:DEBUG\s+)?\[(\d{1,7})/(\d{1,7})\]\s+\S")


@dataclass(frozen=True)
class BuildProgress:
    """Units of the build done of its total (a Makefile build counts percent: ``total`` is 100)."""

    done: int
    total: int
    percent: bool = False

    @property
    def fraction(self) -> float:
        """The share done, from 0 to 1."""
        return self.done / self.total

    def describe(self) -> str:
        """``113 of 274 compiled`` (Ninja) or ``42 % compiled`` (Makefiles)."""
        if self.percent:
            return f"{self.done} % compiled"
        return f"{self.done} of {self.total} compiled"


def parse_build_progress(line: str) -> BuildProgress | None:
    """The progress a build's output line states, or None when it states none."""
    text = line.strip()
    if found := _NINJA.match(text):
        done, total = int(found.group(1)), int(found.group(2))
        return BuildProgress(done, total) if total > 0 and done <= total else None
    if found := _MAKE.match(text):
        percent = int(found.group(1))
        return BuildProgress(percent, 100, percent=True) if percent <= 100 else None
    return None
