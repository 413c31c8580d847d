"""One value of the master's in the data directory: read once, changed under one lock, replaced atomically.

Every small JSON file of the master (the model and node registries, the recovery state, the restart
pauses) is a :class:`StateFile`: an :class:`anyio.Lock` serializes each read-modify-write, file I/O
runs in a worker thread, and each change is written to a temporary file, fsynced and renamed over the
old one (:func:`~mirbad_protocol.support.write_json_atomic`), so a crash leaves either the old file or the new
one, never half of one.

What a file holds and how an unreadable one is treated is the owner's choice:

- by default the value is a pydantic document; an invalid one is only a hint lost (the recovery state,
  the pauses), so it is moved aside as ``<name>.corrupt`` (for someone to look at), a warning is logged
  and the file starts empty;
- an owner that must fail closed (the registries) passes its own ``decode``, which raises on an invalid
  file: the error repeats on every call until someone fixes the file, which is never overwritten.

A reader on a hot path (the router's model lookup) takes :attr:`StateFile.cached` without the lock and
calls :meth:`StateFile.reload_if_changed` now and then: it compares the file's identity (inode, size,
modification time) with the one it loaded or wrote, and loads the file again when someone replaced or
edited it under the process.

Failing to read or write a file is always reported, as the error the owner's ``failure`` builds (a
:class:`~mirbad_orchestration.exceptions.StateFileError` by default): the caller's change did not
persist.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Final, Generic, Literal, TypeVar, cast

import anyio
import anyio.to_thread
from pydantic import ValidationError

from mirbad_orchestration.exceptions import StateFileError
from mirbad_protocol import WireModel
from mirbad_protocol.support import BeforeReplace, remove_stale_temp_files, write_json_atomic

__all__ = ["StateFile", "StoreAction", "StoreFailure", "is_disk_full"]

ValueT = TypeVar("ValueT")

StoreAction = Literal["read", "write"]
"""What a store failed to do with its file."""
StoreFailure = Callable[[Path, StoreAction, str, bool], Exception]
"""Builds the error for a file that cannot be read or written: ``(path, action, detail, disk_full)``."""

_Stamp = tuple[int, int, int, int]
"""A file's device, inode, size and modification time (ns)."""

_logger = logging.getLogger(__name__)
# Nothing secret lives in these files; operators read them like any configuration file.
_FILE_MODE: Final = 0o644
_DISK_FULL: Final = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_disk_full(exc: OSError) -> bool:
    """Whether ``exc`` says the disk (or the quota) is full: someone must make room, no bug to fix."""
    return exc.errno in _DISK_FULL


def _state_file_error(
    path: Path, action: Literal["read", "write"], detail: str, disk_full: bool
) -> Exception:
    return StateFileError(path, f"cannot {action} it: {detail}", disk_full=disk_full)


class StateFile(Generic[ValueT]):
    """One value stored at ``path``; one anyio lock serializes its changes (see the module).

    Args:
        path: the file; its folder is created on the first write.
        empty: the value a missing file stands for (and, by default, an invalid one).
        before_replace: test seam passed to :func:`write_json_atomic`: raising there makes the write
            fail (a full disk, a crash) with the file left as it was.
        decode: reads the file's bytes; it raises to fail closed. By default ``empty``'s pydantic type
            validates them and an invalid file is set aside.
        encode: the JSON value written for a value; by default the document's camelCase dump.
        seed: when given, a missing file is created at the first read with what it returns.
        failure: builds the error for a file that cannot be read or written.
    """

    def __init__(
        self,
        path: Path,
        empty: ValueT,
        *,
        before_replace: BeforeReplace | None = None,
        decode: Callable[[Path, bytes], ValueT] | None = None,
        encode: Callable[[ValueT], Any] | None = None,
        seed: Callable[[], ValueT] | None = None,
        failure: StoreFailure = _state_file_error,
    ) -> None:
        self._path = path
        self._empty = empty
        self._before_replace = before_replace
        self._decode = decode or self._validate_or_set_aside
        self._encode = encode or _dump
        self._seed = seed
        self._failure = failure
        self._lock = anyio.Lock()
        self._value: ValueT | None = None
        # The identity of the file as last loaded or written: a different one means it changed under us.
        self._stamp: _Stamp | None = None

    @property
    def path(self) -> Path:
        """The file."""
        return self._path

    @property
    def cached(self) -> ValueT | None:
        """The value in memory, or None before the first load; taken without the lock.

        Safe on the event loop: the value is only ever replaced whole, after a write succeeded.
        """
        return self._value

    async def reload_if_changed(self) -> ValueT:
        """Return the current value, loading the file again first when it changed under this process.

        "Changed" is a different inode, size or modification time than at the last load or write (an
        atomic replace gives a new inode). A file that went missing keeps the value in memory: the
        next write recreates it, as before.

        Raises:
            Exception: what ``failure`` (or ``decode``) builds when the changed file cannot be read;
                the value in memory is dropped, so every read fails until the file is fixed.
        """
        async with self._lock:
            if self._value is not None:
                stamp = await anyio.to_thread.run_sync(self._stat)
                if stamp is not None and stamp != self._stamp:
                    self._value = None
            return await self._loaded()

    async def read(self) -> ValueT:
        """Return the current value (loaded from the file on first use).

        Raises:
            Exception: what ``failure`` (or ``decode``) builds when the file cannot be read; a failed
                load is not remembered, so once the file is fixed the next call reads it.
        """
        # Once loaded, the value is only ever replaced whole after a write succeeded, so a reader needs
        # no lock: waiting for a change in flight would only hand out the newer value a little later.
        # (The router reads the node registry on every request; the lock cost an event-loop pass.)
        value = self._value
        if value is not None:
            return value
        async with self._lock:
            return await self._loaded()

    async def update(self, change: Callable[[ValueT], ValueT], *, write_unchanged: bool = False) -> ValueT:
        """Apply ``change`` to the current value and persist the result if it differs.

        ``change`` runs under the lock; an exception it raises leaves value and file as they were.

        Args:
            change: the new value from the current one.
            write_unchanged: write the file even when the value did not change (a save the caller
                asked for reaches the disk, or fails).

        Raises:
            Exception: what ``failure`` builds when the file could not be written; the value is unchanged.
        """
        async with self._lock:
            current = await self._loaded()
            changed = change(current)
            if write_unchanged or changed != current:
                # Shielded: once the write started, memory must follow the file even if the caller is
                # cancelled meanwhile.
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(partial(self._write, changed))
                    self._value = changed
            return changed

    async def _loaded(self) -> ValueT:
        if self._value is None:
            self._value = await anyio.to_thread.run_sync(self._load)
        return self._value

    def _stat(self) -> _Stamp | None:
        try:
            found = os.stat(self._path)
        except OSError:
            return None
        return (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns)

    def _load(self) -> ValueT:
        with contextlib.suppress(OSError):
            remove_stale_temp_files(self._path)
        # Taken before the read: a change between the two is seen at the next check, never missed.
        stamp = self._stat()
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError:
            return self._seeded() if self._seed is not None else self._empty
        except OSError as exc:
            raise self._failure(self._path, "read", str(exc.strerror or exc), False) from exc
        value = self._decode(self._path, raw)
        self._stamp = stamp
        return value

    def _seeded(self) -> ValueT:
        assert self._seed is not None
        value = self._seed()
        self._write(value)
        return value

    def _validate_or_set_aside(self, path: Path, raw: bytes) -> ValueT:
        document_type = type(self._empty)
        if not issubclass(document_type, WireModel):
            raise TypeError(f"{path}: a StateFile of a {document_type.__name__} needs its own decode")
        try:
            return cast(ValueT, document_type.model_validate_json(raw))
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

    def _write(self, value: ValueT) -> None:
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            data = self._encode(value)
            write_json_atomic(self._path, data, mode=_FILE_MODE, before_replace=self._before_replace)
        except OSError as exc:
            raise self._failure(self._path, "write", str(exc.strerror or exc), is_disk_full(exc)) from exc
        self._stamp = self._stat()


def _dump(value: object) -> Any:
    if not isinstance(value, WireModel):
        raise TypeError(f"a StateFile of a {type(value).__name__} needs its own encode")
    return value.model_dump(mode="json", by_alias=True)
