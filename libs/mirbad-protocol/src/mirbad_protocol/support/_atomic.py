"""Atomic file writes: a reader sees the old file or the new one, never a torn mix.

The bytes go to a temporary file in the target's own folder (``os.replace`` is only atomic within one
file system), are flushed and fsynced, and the temporary file then replaces the target; on POSIX the
folder is fsynced too so the rename itself survives a power cut. These functions block: async callers
run them with ``anyio.to_thread.run_sync``.

A store using them must be the only writer of its file (one process, one lock): that is what makes
:func:`remove_stale_temp_files` safe to call when the store first loads.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Final

__all__ = [
    "DEFAULT_FILE_MODE",
    "BeforeReplace",
    "remove_stale_temp_files",
    "write_bytes_atomic",
    "write_json_atomic",
]

DEFAULT_FILE_MODE: Final = 0o600
"""Owner-only by default, so a store that later holds a secret cannot leak it through its mode."""

_TEMP_SUFFIX: Final = ".tmp"

BeforeReplace = Callable[[Path], None]
"""Called with the fully written temporary file just before it replaces the target (a test seam)."""


def write_bytes_atomic(
    path: Path,
    data: bytes,
    *,
    mode: int = DEFAULT_FILE_MODE,
    before_replace: BeforeReplace | None = None,
) -> None:
    """Replace ``path`` with ``data`` atomically and durably.

    Args:
        path: the file to write; its folder must exist.
        data: the complete new content.
        mode: permission bits of the new file (exactly these: the umask does not apply).
        before_replace: a hook called with the temporary file after it is written and fsynced and
            before the replace; if it raises, the target is left untouched, the temporary file is
            removed and the exception propagates. Tests use it to simulate a crash at that point.

    Raises:
        OSError: the file could not be written; the previous content is intact.
    """
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=_temp_prefix(path), suffix=_TEMP_SUFFIX)
    temp = Path(temp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            if hasattr(os, "fchmod"):
                os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if before_replace is not None:
            before_replace(temp)
        os.replace(temp, path)
    except BaseException:
        # BaseException too: a cancelled or interrupted writer must not leave its temporary file behind.
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    _fsync_folder(path.parent)


def write_json_atomic(
    path: Path,
    value: object,
    *,
    mode: int = DEFAULT_FILE_MODE,
    before_replace: BeforeReplace | None = None,
) -> None:
    """Write ``value`` as indented UTF-8 JSON (ending in a newline) with :func:`write_bytes_atomic`.

    Args:
        path: the file to write; its folder must exist.
        value: anything :func:`json.dumps` accepts; it is encoded before the file is touched, so an
            unencodable value leaves the target untouched.
        mode: permission bits of the new file.
        before_replace: see :func:`write_bytes_atomic`.

    Raises:
        TypeError: ``value`` is not JSON-serializable.
        ValueError: ``value`` holds NaN or an infinity, which JSON cannot carry.
        OSError: the file could not be written; the previous content is intact.
    """
    text = json.dumps(value, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    write_bytes_atomic(path, text.encode("utf-8"), mode=mode, before_replace=before_replace)


def remove_stale_temp_files(path: Path) -> list[Path]:
    """Delete temporary files a crashed writer of ``path`` left behind; return what was removed.

    Only the sole writer of ``path`` may call this (a concurrent writer's temporary file would match).
    A missing folder or a file that vanishes meanwhile is not an error.
    """
    removed: list[Path] = []
    if not path.parent.is_dir():
        return removed
    for stale in path.parent.glob(f"{_temp_prefix(path)}*{_TEMP_SUFFIX}"):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
            removed.append(stale)
    return removed


def _temp_prefix(path: Path) -> str:
    # A dot prefix hides the temporary file from ls and from globs such as *.json.
    return f".{path.name}."


def _fsync_folder(folder: Path) -> None:
    if os.name != "posix":
        return  # Windows cannot open a folder for fsync; NTFS journals the rename itself.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        # Some file systems refuse fsync on a folder (EINVAL); the replace has happened, only the
        # durability of the rename across a power cut is best effort there.
        pass
    finally:
        os.close(fd)
