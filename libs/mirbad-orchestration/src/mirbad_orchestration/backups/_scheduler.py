"""The backup scheduler: one backup a day into the backup directory, and "back up now" on demand.

It does not know the master's stores: it calls a :class:`BuildBackup` the master composes, encodes the
document, writes it atomically and prunes the host's backups to the newest ``keep``. A scheduled run
never raises: its failure is recorded in :attr:`BackupScheduler.state` for the portal; an on-demand
run records it too and raises :class:`BackupRunError` for its caller.

"One a day" is read from the directory itself (a backup of this host stamped in the last 24 hours), so
a restarted master neither skips a day nor writes a second one, and an on-demand backup counts.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final, NoReturn, Protocol

import anyio
from pydantic import AwareDatetime

from mirbad_orchestration.exceptions import BackupRunError
from mirbad_protocol import WireModel

from ._crypto import Entropy, check_passphrase
from ._directory import (
    BackupFile,
    free_backup_time,
    list_backup_files,
    prune_backup_files,
    write_backup_file,
)
from ._format import BackupContents, encode_backup
from ._names import backup_file_name, backup_host_label

__all__ = [
    "BACKUP_INTERVAL",
    "DEFAULT_BACKUP_KEEP",
    "BackupFailure",
    "BackupRecord",
    "BackupScheduler",
    "BackupSettings",
    "BackupState",
    "BuildBackup",
    "Clock",
    "DestinationCheck",
]

BACKUP_INTERVAL: Final = timedelta(days=1)
"""How often a scheduled backup is written."""

DEFAULT_BACKUP_KEEP: Final = 7
"""How many of its backups a master keeps in the directory unless told otherwise."""

_FUTURE_SLACK: Final = timedelta(minutes=1)

Clock = Callable[[], datetime]
"""The current time, timezone-aware (a test passes a fake one)."""

Sleep = Callable[[float], Awaitable[None]]
DestinationCheck = Callable[[Path], Awaitable[str | None]]
"""Why a scheduled backup may not go into the directory now, or None when it may."""


class BuildBackup(Protocol):
    """Composes what a backup holds from the master's stores."""

    async def __call__(self, *, secrets: bool) -> BackupContents:
        """Return the contents; with ``secrets`` true, the secrets too (a passphrase backup)."""
        ...


@dataclass(frozen=True)
class BackupSettings:
    """The backup settings.

    Attributes:
        directory: where backups go (the compose file mounts ``/backups``); None turns scheduled
            backups off. It must exist: it is never created.
        keep: how many of this host's backups to keep (the newest).
        include_ca: whether passphrase backups carry the fleet CA.
    """

    directory: Path | None = None
    keep: int = DEFAULT_BACKUP_KEEP
    include_ca: bool = True

    def __post_init__(self) -> None:
        """Refuse a ``keep`` below one (that would prune the backup just written)."""
        if self.keep < 1:
            raise ValueError(f"keep must be at least 1, not {self.keep}")


class BackupRecord(WireModel):
    """The last backup written.

    Attributes:
        name: its file name.
        created_at: when.
        size_bytes: its size.
        encrypted: whether it has an encrypted section.
        scheduled: whether the schedule wrote it (else someone asked for it).
    """

    name: str
    created_at: AwareDatetime
    size_bytes: int
    encrypted: bool
    scheduled: bool


class BackupFailure(WireModel):
    """The last backup that failed.

    Attributes:
        at: when it was tried.
        reason: why it failed, for people.
        scheduled: whether it was a scheduled run.
    """

    at: AwareDatetime
    reason: str
    scheduled: bool


class BackupState(WireModel):
    """What the portal shows of the backups: the last success and the last failure (either may be older)."""

    last_backup: BackupRecord | None = None
    last_failure: BackupFailure | None = None


def _utc_now() -> datetime:
    return datetime.now(UTC)


class BackupScheduler:
    """Writes the daily backup and the on-demand ones.

    Args:
        build: composes the contents.
        settings: the directory, how many to keep, whether the CA goes in.
        host: the master's host name (its label names the files; only that label's files are pruned).
        clock: the current time.
        entropy: salts and nonces (``os.urandom``).
        destination_check: asked before each scheduled write with the directory; a reason it answers
            skips the day's backup and is recorded as the last failure (a share that is configured but
            not mounted there: the backup would land on the local disk). None: always written.
    """

    def __init__(
        self,
        build: BuildBackup,
        settings: BackupSettings,
        *,
        host: str,
        clock: Clock = _utc_now,
        entropy: Entropy = os.urandom,
        destination_check: DestinationCheck | None = None,
    ) -> None:
        self._build = build
        self._destination_check = destination_check
        self._settings = settings
        self._host = host
        self._label = backup_host_label(host)
        self._clock = clock
        self._entropy = entropy
        self._lock = anyio.Lock()
        self._state = BackupState()

    @property
    def settings(self) -> BackupSettings:
        """The settings it runs with."""
        return self._settings

    @property
    def state(self) -> BackupState:
        """The last backup and the last failure."""
        return self._state

    async def is_due(self) -> bool:
        """Whether the directory lacks a backup of this host from the last 24 hours.

        Raises:
            BackupRunError: no directory is set, or it cannot be listed.
        """
        directory = self._directory()
        now = self._clock()
        files = await anyio.to_thread.run_sync(lambda: list_backup_files(directory, host=self._label))
        return not any(now - BACKUP_INTERVAL < file.created_at <= now + _FUTURE_SLACK for file in files)

    async def run_scheduled(self) -> BackupFile | None:
        """Write the day's backup if it is due; never raises (a failure is recorded in :attr:`state`).

        Returns:
            The backup written, or None (not due, scheduled backups off, or failed).
        """
        if self._settings.directory is None:
            return None
        try:
            async with self._lock:
                if not await self.is_due():
                    return None
                if self._destination_check is not None:
                    reason = await self._destination_check(self._directory())
                    if reason is not None:
                        raise BackupRunError(f"the scheduled backup was skipped: {reason}")
                return await self._write(None, scheduled=True)
        except Exception as exc:
            self._record_failure(exc, scheduled=True)
            return None

    async def back_up_now(self, passphrase: str | None = None) -> BackupFile:
        """Write a backup now, encrypted when a passphrase is given.

        Raises:
            BackupPassphraseTooShortError: the passphrase is too short (nothing is tried or recorded).
            BackupRunError: it failed (also recorded in :attr:`state`).
        """
        if passphrase is not None:
            check_passphrase(passphrase)
        try:
            async with self._lock:
                return await self._write(passphrase, scheduled=False)
        except Exception as exc:
            self._record_failure(exc, scheduled=False)
            if isinstance(exc, BackupRunError):
                raise
            raise BackupRunError(_reason(exc)) from exc

    async def run_forever(self, *, check_interval_s: float = 900.0, sleep: Sleep = anyio.sleep) -> NoReturn:
        """Check every ``check_interval_s`` seconds whether the day's backup is due, and write it."""
        while True:
            await self.run_scheduled()
            await sleep(check_interval_s)

    async def _write(self, passphrase: str | None, *, scheduled: bool) -> BackupFile:
        directory = self._directory()
        now = self._clock()
        created_at = await anyio.to_thread.run_sync(lambda: free_backup_time(directory, self._host, now))
        contents = await self._build(secrets=passphrase is not None)
        data = encode_backup(
            contents,
            host=self._host,
            created_at=created_at,
            passphrase=passphrase,
            include_ca=self._settings.include_ca,
            entropy=self._entropy,
        )
        name = backup_file_name(self._host, created_at)
        written = await anyio.to_thread.run_sync(lambda: write_backup_file(directory, name, data))
        record = BackupRecord(
            name=name,
            created_at=created_at,
            size_bytes=written.size_bytes,
            encrypted=passphrase is not None,
            scheduled=scheduled,
        )
        self._state = self._state.model_copy(update={"last_backup": record})
        try:
            await anyio.to_thread.run_sync(
                lambda: prune_backup_files(directory, self._label, self._settings.keep, spare=name)
            )
        except BackupRunError as exc:
            # The backup is written; a prune that failed is worth showing, not worth failing the run for.
            self._record_failure(
                BackupRunError(f"{name} written, but pruning failed: {exc.reason}"), scheduled=scheduled
            )
        return written

    def _directory(self) -> Path:
        if self._settings.directory is None:
            raise BackupRunError("no backup directory is set")
        return self._settings.directory

    def _record_failure(self, exc: Exception, *, scheduled: bool) -> None:
        failure = BackupFailure(at=self._clock(), reason=_reason(exc), scheduled=scheduled)
        self._state = self._state.model_copy(update={"last_failure": failure})


def _reason(exc: Exception) -> str:
    if isinstance(exc, BackupRunError):
        return exc.reason
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
