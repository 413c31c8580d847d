"""``processes.json``: what the process driver knows about each native model it started.

A native process, unlike a container, carries no labels to read back, so the driver writes down each
launch (pid, start time, image, port, log file, the spec's hash and budget) and a restarted agent adopts
what it finds here. The store is the file's only writer: one ``anyio.Lock`` orders its writes, and each
write replaces the whole file atomically.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Final

import anyio
import anyio.to_thread
from pydantic import Field, ValidationError

from mirbad_protocol import (
    MODEL_ID_PATTERN,
    ExecutableRef,
    GpuSelection,
    ProcessLaunch,
    RuntimeKind,
    WireModel,
)
from mirbad_protocol.support import remove_stale_temp_files, write_json_atomic

from ._process_host import ProcessIdentity
from .exceptions import StateWriteError

__all__ = ["ProcessRecord", "ProcessRecordStore"]

logger = logging.getLogger(__name__)

_FORMAT_VERSION: Final = 1
_DISK_FULL: Final = frozenset({errno.ENOSPC, errno.EDQUOT})


class ProcessRecord(WireModel):
    """One launched model process, as ``processes.json`` keeps it (never its API key).

    Attributes:
        model_id: the model this process serves.
        served_name: the name clients use for it.
        runtime: llamacpp or mlx.
        pid: the process id.
        start_time: the operating system's start-time token (see :class:`ProcessIdentity`).
        executable: the image path the operating system reported for the process when it was spawned
            (a wrapper's shell or a script's interpreter, or the binary it ``exec``-ed into).
        group: the process group the driver created for it (None in records of older agents).
        executable_ref: the catalogue entry it was launched from.
        port: the loopback port it listens on.
        log_path: the file receiving its stdout and stderr.
        cwd: its working directory (the model root its model file lies under).
        argv: the full command line it was started with, executable first.
        config_hash: the launch spec's configuration hash.
        budget_gib: the memory budget the master reserved for it.
        labels: the launch spec's labels.
        started_at: when the agent spawned it (UTC).
        gpus: the GPUs it was given, read back on adoption; None (and absent from the file) for all of
            them, as in the records of older agents.
    """

    model_id: Annotated[str, Field(pattern=MODEL_ID_PATTERN)]
    served_name: str
    runtime: RuntimeKind
    pid: Annotated[int, Field(gt=0)]
    start_time: str
    executable: str
    group: int | None = None
    executable_ref: ExecutableRef
    port: Annotated[int, Field(gt=0, lt=65536)]
    log_path: str
    cwd: str
    argv: list[str]
    config_hash: str
    budget_gib: float = Field(alias="budgetGiB")
    labels: dict[str, str] = Field(default_factory=dict)
    started_at: datetime
    gpus: GpuSelection | None = Field(default=None, exclude_if=lambda value: value is None)

    @classmethod
    def of_launch(
        cls,
        spec: ProcessLaunch,
        identity: ProcessIdentity,
        *,
        port: int,
        log_path: Path,
        cwd: Path,
        argv: list[str],
    ) -> ProcessRecord:
        """The record of ``spec`` just spawned as ``identity``, stamped with the current time."""
        return cls(
            model_id=spec.model_id,
            served_name=spec.served_name,
            runtime=spec.runtime,
            pid=identity.pid,
            start_time=identity.start_time,
            executable=identity.executable,
            group=identity.group,
            executable_ref=spec.executable,
            port=port,
            log_path=str(log_path),
            cwd=str(cwd),
            argv=argv,
            config_hash=spec.config_hash,
            budget_gib=spec.budget_gib,
            labels=spec.labels,
            started_at=datetime.now(UTC),
            gpus=None if spec.gpus.mode == "all" else spec.gpus,
        )

    @property
    def log_file(self) -> Path:
        """:attr:`log_path` as a path."""
        return Path(self.log_path)

    @property
    def identity(self) -> ProcessIdentity:
        """The identity that adoption and signalling compare against the live process."""
        return ProcessIdentity(
            pid=self.pid, start_time=self.start_time, executable=self.executable, group=self.group
        )


class ProcessRecordStore:
    """The records of ``processes.json``, cached in memory and written through on every change.

    The file is read on first use. A file that cannot be parsed (or holds entries that cannot) is
    copied aside as ``processes.json.corrupt-<time>`` and the readable entries are kept, so an agent
    never refuses to start over it and the evidence survives. A removal the file cannot take (a full
    disk) is kept in memory and written by the next read or write that finds room.

    Args:
        path: the file, normally ``{state dir}/processes.json``; its folder is created when missing.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = anyio.Lock()
        self._records: dict[str, ProcessRecord] | None = None
        self._unwritten = False

    @property
    def path(self) -> Path:
        """The file the records live in."""
        return self._path

    async def all(self) -> list[ProcessRecord]:
        """Every record, in model-id order."""
        async with self._lock:
            records = await self._current()
            return [records[model_id] for model_id in sorted(records)]

    async def get(self, model_id: str) -> ProcessRecord | None:
        """The record of ``model_id``, or None."""
        async with self._lock:
            return (await self._current()).get(model_id)

    async def put(self, record: ProcessRecord) -> None:
        """Add or replace the record of ``record.model_id`` and write the file.

        Raises:
            StateWriteError: the file cannot be written; the record is not added.
        """
        async with self._lock:
            records = dict(await self._loaded())
            records[record.model_id] = record
            await self._write(records)

    async def remove(self, model_id: str) -> ProcessRecord | None:
        """Drop the record of ``model_id`` (writing the file only if there was one); return it.

        Raises:
            StateWriteError: the file cannot be written. The record is dropped from memory all the
                same: its process is gone, and a record kept for it would read as a failed model.
        """
        async with self._lock:
            records = dict(await self._loaded())
            removed = records.pop(model_id, None)
            if removed is not None:
                self._records, self._unwritten = records, True
                await self._write(records)
            return removed

    async def _current(self) -> dict[str, ProcessRecord]:
        records = await self._loaded()
        if self._unwritten:
            with contextlib.suppress(StateWriteError):  # still no room: the next read tries again
                await self._write(records)
        return records

    async def _loaded(self) -> dict[str, ProcessRecord]:
        if self._records is None:
            self._records = await anyio.to_thread.run_sync(self._read)
        return self._records

    async def _write(self, records: dict[str, ProcessRecord]) -> None:
        document = {
            "version": _FORMAT_VERSION,
            "processes": [
                records[model_id].model_dump(mode="json", by_alias=True) for model_id in sorted(records)
            ],
        }
        try:
            await anyio.to_thread.run_sync(write_json_atomic, self._path, document)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            message = f"cannot write {self._path}: {reason}"
            raise StateWriteError(self._path, message, disk_full=exc.errno in _DISK_FULL) from exc
        self._records, self._unwritten = records, False

    def _read(self) -> dict[str, ProcessRecord]:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temp_files(self._path)
        try:
            entries = _entries_of(json.loads(self._path.read_bytes()))
        except FileNotFoundError:
            return {}
        except ValueError as exc:
            self._quarantine(f"cannot be parsed ({exc})")
            return {}
        records: dict[str, ProcessRecord] = {}
        unreadable = 0
        for entry in entries:
            try:
                record = ProcessRecord.model_validate(entry)
            except ValidationError:
                unreadable += 1
                continue
            records[record.model_id] = record
        if unreadable:
            self._quarantine(f"holds {unreadable} unreadable entries")
        return records

    def _quarantine(self, reason: str) -> None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        aside = self._path.with_name(f"{self._path.name}.corrupt-{stamp}")
        shutil.copy2(self._path, aside)
        logger.error("%s %s; a copy is kept as %s", self._path, reason, aside)


def _entries_of(document: Any) -> list[Any]:
    if not isinstance(document, dict) or not isinstance(document.get("processes"), list):
        raise ValueError("expected an object with a 'processes' list")
    version = document.get("version")
    if version != _FORMAT_VERSION:
        raise ValueError(f"unknown format version {version!r}")
    return list(document["processes"])
