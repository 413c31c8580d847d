"""A native model's log file: rotation at launch, reading its tail, and following it.

The model writes straight into its file (no pipe through the agent), which is what lets it outlive
the agent; the agent only ever reads the file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path
from typing import Final

import anyio
import anyio.to_thread

__all__: list[str] = []

_BLOCK: Final = 64 * 1024
_FOLLOW_READ: Final = 256 * 1024


def rotate_log(path: Path) -> None:
    """Keep the previous run's log as ``<name>.1`` (one generation), so a new launch starts afresh."""
    with contextlib.suppress(FileNotFoundError):
        os.replace(path, path.with_name(path.name + ".1"))


def read_log_tail(path: Path, lines: int, *, end: int | None = None) -> list[str]:
    """The last ``lines`` lines of ``path`` (up to byte ``end``), oldest first; [] for a missing file.

    The file is read backwards in blocks, so a long log costs only what the tail needs. Blocking:
    async callers use a worker thread.
    """
    if lines <= 0:
        return []
    try:
        with path.open("rb") as handle:
            position = handle.seek(0, os.SEEK_END) if end is None else end
            data = b""
            while position > 0 and data.count(b"\n") <= lines:
                step = min(_BLOCK, position)
                position -= step
                handle.seek(position)
                data = handle.read(step) + data
    except FileNotFoundError:
        return []
    text_lines = data.split(b"\n")
    if text_lines and text_lines[-1] == b"":
        text_lines.pop()
    return [_text(line) for line in text_lines[-lines:]]


async def follow_log(
    path: Path,
    tail: int,
    running: Callable[[], Awaitable[bool]],
    *,
    poll_s: float = 0.2,
) -> AsyncGenerator[str, None]:
    """Yield the last ``tail`` lines of ``path``, then each line appended, until ``running()`` is False.

    Every wait is one ``poll_s`` sleep; once the process has ended the rest of the file (with a last
    unterminated line) is yielded and the stream ends. The caller bounds a stream of a live process.
    """
    offset = await anyio.to_thread.run_sync(_size, path)
    for old_line in await anyio.to_thread.run_sync(lambda: read_log_tail(path, tail, end=offset)):
        yield old_line
    pending = b""
    while True:
        # Ask first, read second: whatever the process wrote before it ended is read below.
        alive = await running()
        chunk = await anyio.to_thread.run_sync(_read_from, path, offset)
        offset += len(chunk)
        *complete, pending = (pending + chunk).split(b"\n")
        for line in complete:
            yield _text(line)
        if not chunk and not alive:
            if pending:
                yield _text(pending)
            return
        if not chunk:
            await anyio.sleep(poll_s)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read(_FOLLOW_READ)
    except FileNotFoundError:
        return b""


def _text(line: bytes) -> str:
    return line.decode("utf-8", errors="replace").rstrip("\r")
