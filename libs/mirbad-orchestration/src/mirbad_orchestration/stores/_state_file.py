"""A small JSON state document in the data directory, read once and replaced atomically on each change.

The master keeps a few such documents (which models to relaunch, which restarts are paused). They are
hints for recovery, not the registry: an unreadable one must not keep the master from starting, so it
is moved aside as ``<name>.corrupt`` (for someone to look at), a warning is logged and the store starts
empty. Failing to write one, on the other hand, is reported: the caller's change did not persist.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Final, Generic, TypeVar

import anyio
import anyio.to_thread
from pydantic import ValidationError

from mirbad_orchestration.exceptions import StateFileError
from mirbad_protocol import BeforeReplace, WireModel, remove_stale_temp_files, write_json_atomic

__all__ = ["StateFile", "is_disk_full"]

DocumentT = TypeVar("DocumentT", bound=WireModel)

_logger = logging.getLogger(__name__)
# Nothing secret lives in these files; operators read them like any configuration file.
_FILE_MODE: Final = 0o644
_DISK_FULL: Final = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_disk_full(exc: OSError) -> bool:
    """Whether ``exc`` says the disk (or the quota) is full: someone must make room, no bug to fix."""
    return exc.errno in _DISK_FULL


class StateFile(Generic[DocumentT]):
    """One pydantic document stored at ``path``; one anyio lock serializes its changes.

    Args:
        path: the file; its folder is created on the first write.
        empty: the document a missing (or unreadable) file stands for.
        before_replace: test seam passed to :func:`write_json_atomic`: raising there makes the write
            fail (a full disk) with the file left as it was.
    """

    def __init__(self, path: Path, empty: DocumentT, *, before_replace: BeforeReplace | None = None) -> None:
        self._path = path
        self._empty = empty
        self._before_replace = before_replace
        self._lock = anyio.Lock()
        self._document: DocumentT | None = None

    @property
    def path(self) -> Path:
        """The file."""
        return self._path

    async def read(self) -> DocumentT:
        """Return the current document (loaded from the file on first use)."""
        async with self._lock:
            return await self._loaded()

    async def update(self, change: Callable[[DocumentT], DocumentT]) -> DocumentT:
        """Apply ``change`` to the current document and persist the result if it differs.

        Raises:
            StateFileError: the file could not be written; the document is unchanged.
        """
        async with self._lock:
            current = await self._loaded()
            changed = change(current)
            if changed != current:
                # Shielded: once the write started, memory must follow the file even if the caller is
                # cancelled meanwhile.
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(partial(self._write, changed))
                    self._document = changed
            return changed

    async def _loaded(self) -> DocumentT:
        if self._document is None:
            self._document = await anyio.to_thread.run_sync(self._load)
        return self._document

    def _load(self) -> DocumentT:
        with contextlib.suppress(OSError):
            remove_stale_temp_files(self._path)
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError:
            return self._empty
        except OSError as exc:
            raise StateFileError(self._path, f"cannot read it: {exc.strerror or exc}") from exc
        try:
            return type(self._empty).model_validate_json(raw)
        except ValidationError as exc:
            self._set_aside(exc)
            return self._empty

    def _set_aside(self, problem: ValidationError) -> None:
        aside = self._path.with_name(self._path.name + ".corrupt")
        _logger.warning(
            "%s is unreadable (%s); moved to %s, starting empty",
            self._path,
            problem.errors(include_url=False)[0]["msg"],
            aside.name,
        )
        with contextlib.suppress(OSError):
            os.replace(self._path, aside)

    def _write(self, document: DocumentT) -> None:
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            data = document.model_dump(mode="json", by_alias=True)
            write_json_atomic(self._path, data, mode=_FILE_MODE, before_replace=self._before_replace)
        except OSError as exc:
            reason = f"cannot write it: {exc.strerror or exc}"
            raise StateFileError(self._path, reason, disk_full=is_disk_full(exc)) from exc
