"""The backup share at the fixed target: test it, apply it as a mount unit, remove it, report it.

Apply checks in this order, and writes nothing until every check and the probe passed: a unit or an
automount at the target that hostd did not write, or a mount there it did not make, is a conflict
(409); the share is then mounted into a fresh private folder and written to as the backup account
(422 when either fails); only then are the credentials (0600) and the unit (0644) written, atomically,
and systemd reloads, enables and restarts the unit. A restart that fails puts the previous files back
and restarts the previous unit, so a typo never costs a working share. The password goes to the
credentials file and nowhere else: not the state, not a log line, not an error message.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import anyio

from mirbad_protocol import InvalidFieldError
from mirbad_protocol.hostd import (
    BackupMountRemoved,
    BackupMountStatus,
    BackupShare,
    BackupShareProbe,
    BackupShareSettings,
)
from mirbad_protocol.support import (
    NETWORK_FS_TYPES,
    MountEntry,
    mount_at,
    parse_mountinfo,
    write_bytes_atomic,
    write_json_atomic,
)

from ._mount_render import (
    MANAGED_MARKER,
    mount_options,
    mount_source,
    mount_unit_name,
    render_credentials,
    render_mount_unit,
)
from ._probe_write import probe_write_as
from ._settings import HostdSettings
from ._systemctl import Manager, Systemctl
from .exceptions import (
    ActionFailedError,
    BackupMountConflictError,
    BackupMountNotConfiguredError,
    MountBusyError,
    MountProbeError,
    SystemctlError,
)

__all__ = ["BackupMount"]

logger = logging.getLogger(__name__)

_UNIT_MODE = 0o644
_CREDENTIALS_MODE = 0o600
_SHOWN_ERROR = 500


@dataclass(frozen=True)
class _Previous:
    """The unit and credentials as they were before an apply, to put back if it fails."""

    unit: bytes | None
    credentials: bytes | None


class BackupMount:
    """hostd's backup share: one mount unit at :attr:`HostdSettings.backup_target`.

    Args:
        settings: the target, the paths, the executables, the account and the bounds.
        systemctl: the systemctl runner.
    """

    def __init__(self, settings: HostdSettings, systemctl: Systemctl) -> None:
        self._settings = settings
        self._systemctl = systemctl
        self._target = PurePosixPath(settings.backup_target)
        self.unit = mount_unit_name(self._target)
        self._automount = self.unit.removesuffix(".mount") + ".automount"
        self._unit_file = settings.unit_dir / self.unit
        self._lock = anyio.Lock()

    # ---------------------------------------------------------------- reading

    async def status(self) -> BackupMountStatus:
        """The configured share and what is mounted at the target, with its free space (bounded)."""
        share = await anyio.to_thread.run_sync(self._read_state)
        configured = share is not None and await anyio.to_thread.run_sync(self._unit_is_ours)
        entry = await self._mounted()
        free, total, error = await self._space()
        return BackupMountStatus(
            target=str(self._target),
            unit=self.unit,
            configured=configured,
            share=share if configured else None,
            mounted=entry is not None,
            fs_type=entry.fs_type if entry is not None else None,
            source=entry.source if entry is not None else None,
            network=entry is not None and entry.fs_type in NETWORK_FS_TYPES,
            free_bytes=free,
            total_bytes=total,
            error=error,
        )

    async def _mounted(self) -> MountEntry | None:
        """What is mounted at the target now, as hostd's namespace sees it."""
        try:
            text = await anyio.to_thread.run_sync(self._settings.mountinfo_file.read_text)
        except OSError as exc:
            logger.warning("backup-mount: cannot read %s: %s", self._settings.mountinfo_file, exc)
            return None
        return mount_at(parse_mountinfo(text), str(self._target))

    async def _space(self) -> tuple[int | None, int | None, str | None]:
        bound = self._settings.mount_status_timeout_s
        try:
            with anyio.fail_after(bound):
                # abandoned on timeout: a hung share keeps one worker thread, never the request.
                info = await anyio.to_thread.run_sync(os.statvfs, self._target, abandon_on_cancel=True)
        except TimeoutError:
            return None, None, f"the free space at {self._target} was not known within {bound:g} s"
        except OSError as exc:
            return None, None, f"{self._target}: {exc.strerror or exc}"
        return info.f_bavail * info.f_frsize, info.f_blocks * info.f_frsize, None

    def _read_state(self) -> BackupShareSettings | None:
        try:
            text = self._settings.backup_state_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            return BackupShareSettings.from_wire_json(text)
        except InvalidFieldError as exc:
            logger.warning(
                "backup-mount: %s is malformed (%s); shown as not configured", self._state_path, exc
            )
            return None

    @property
    def _state_path(self) -> Path:
        return self._settings.backup_state_file

    def _unit_is_ours(self) -> bool:
        try:
            with self._unit_file.open("rb") as handle:
                first = handle.readline()
        except FileNotFoundError:
            return False
        return first.rstrip(b"\n") == MANAGED_MARKER.encode()

    # ---------------------------------------------------------------- test and apply

    async def test(self, share: BackupShare) -> BackupShareProbe:
        """Mount ``share`` into a fresh private folder and write, read and delete a file on it.

        Raises:
            MountProbeError: it did not mount or the account could not write (nothing is written).
        """
        await self._probe(share)
        logger.info("backup-mount test source=%s kind=%s result=ok", mount_source(share), share.kind)
        return BackupShareProbe(
            source=mount_source(share),
            fs_type=share.kind,
            uid=self._settings.backup_uid,
            gid=self._settings.backup_gid,
        )

    async def apply(self, share: BackupShare) -> BackupMountStatus:
        """Make ``share`` the backup share at the target.

        Raises:
            BackupMountConflictError: a foreign unit, automount or mount at the target (nothing changed).
            MountProbeError: the probe failed (nothing written).
            ActionFailedError: systemd could not mount it (the previous files and unit are back).
        """
        async with self._lock:
            await self._check_foreign()
            await self._probe(share)
            previous = await anyio.to_thread.run_sync(self._snapshot)
            try:
                await anyio.to_thread.run_sync(self._write_files, share)
                await self._systemctl.manage_own("daemon-reload")
                await self._systemctl.manage_own("enable", "--", self.unit)
                await self._systemctl.manage_own("restart", "--", self.unit)
            except (ActionFailedError, OSError) as exc:
                reason = _scrub(str(exc), share.password)
                await self._put_back(previous)
                logger.warning(
                    "backup-mount apply source=%s result=failed reason=%r", mount_source(share), reason
                )
                raise ActionFailedError(
                    f"{self.unit} did not mount {mount_source(share)} ({reason}); the previous "
                    "configuration is back"
                ) from None
            await anyio.to_thread.run_sync(self._write_state, share)
        logger.info("backup-mount apply source=%s kind=%s result=ok", mount_source(share), share.kind)
        return await self.status()

    async def _check_foreign(self) -> None:
        ours = await anyio.to_thread.run_sync(self._unit_is_ours)
        unit_dir = self._settings.unit_dir
        if not ours and self._unit_file.exists():
            raise BackupMountConflictError(f"{self._unit_file} was not written by hostd; remove it first")
        if (unit_dir / self._automount).exists():
            raise BackupMountConflictError(f"{unit_dir / self._automount} mounts the target on access")
        try:
            shown = await self._systemctl.show(Manager(), [self.unit, self._automount])
        except SystemctlError as exc:
            raise ActionFailedError(f"cannot ask systemd about {self.unit}: {exc}") from None
        mount_unit, automount = shown[self.unit], shown[self._automount]
        fragment = mount_unit.get("FragmentPath", "")
        if mount_unit.get("LoadState") == "loaded" and fragment not in ("", str(self._unit_file)):
            raise BackupMountConflictError(
                f"{self.unit} is defined by {fragment} (an fstab line?), not hostd"
            )
        if automount.get("LoadState") == "loaded":
            raise BackupMountConflictError(f"{self._automount} mounts the target on access; hostd will not")
        if not ours:
            entry = await self._mounted()
            if entry is not None:
                raise BackupMountConflictError(
                    f"{entry.source} ({entry.fs_type}) is mounted at {self._target} already, not by hostd"
                )

    async def _probe(self, share: BackupShare) -> None:
        settings = self._settings
        folder = Path(await anyio.to_thread.run_sync(_fresh_folder, settings.probe_root))
        credentials: Path | None = None
        try:
            if share.kind == "cifs":
                credentials = await anyio.to_thread.run_sync(_private_file, settings.probe_root, share)
            options = mount_options(
                share,
                credentials=PurePosixPath(credentials) if credentials else None,
                uid=settings.backup_uid,
                gid=settings.backup_gid,
            )
            argv = [
                settings.mount,
                "-n",
                "-t",
                share.kind,
                "-o",
                options,
                "--",
                mount_source(share),
                str(folder),
            ]
            await self._run_mount(argv, "mount", share.password)
            try:
                await anyio.to_thread.run_sync(
                    lambda: probe_write_as(
                        folder, settings.backup_uid, settings.backup_gid, timeout_s=settings.mount_timeout_s
                    )
                )
            finally:
                await self._unmount(folder)
        except MountProbeError as exc:
            logger.warning(
                "backup-mount probe source=%s result=failed reason=%r", mount_source(share), str(exc)
            )
            raise
        finally:
            await anyio.to_thread.run_sync(_clean_probe, folder, credentials)

    async def _unmount(self, folder: Path) -> None:
        umount = self._settings.umount
        try:
            await self._run_mount([umount, "-n", "--", str(folder)], "umount", None)
        except MountProbeError as exc:
            logger.warning("backup-mount: %s; detaching it lazily", exc)
            with contextlib.suppress(MountProbeError):
                await self._run_mount([umount, "-n", "-l", "--", str(folder)], "umount -l", None)

    async def _run_mount(self, argv: list[str], what: str, password: str | None) -> None:
        bound = self._settings.mount_timeout_s
        try:
            with anyio.fail_after(bound):
                result = await anyio.run_process(argv, check=False)
        except TimeoutError:
            raise MountProbeError(f"{what} did not end within {bound:g} s") from None
        except OSError as exc:
            raise MountProbeError(f"{what} could not be run: {exc.strerror or exc}") from None
        if result.returncode != 0:
            stderr = _scrub(result.stderr.decode(errors="replace").strip(), password)[:_SHOWN_ERROR]
            raise MountProbeError(f"{what} exited with {result.returncode}: {stderr or 'no message'}")

    def _snapshot(self) -> _Previous:
        return _Previous(
            _read_or_none(self._unit_file), _read_or_none(self._settings.backup_credentials_file)
        )

    def _write_files(self, share: BackupShare) -> None:
        settings = self._settings
        credentials = settings.backup_credentials_file if share.kind == "cifs" else None
        if share.kind == "cifs":
            write_bytes_atomic(
                settings.backup_credentials_file, render_credentials(share).encode(), mode=_CREDENTIALS_MODE
            )
        unit = render_mount_unit(
            share,
            target=self._target,
            credentials=PurePosixPath(credentials) if credentials else None,
            uid=settings.backup_uid,
            gid=settings.backup_gid,
        )
        settings.unit_dir.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(self._unit_file, unit.encode(), mode=_UNIT_MODE)

    def _write_state(self, share: BackupShare) -> None:
        write_json_atomic(self._state_path, share.without_secret().to_wire(), mode=_CREDENTIALS_MODE)
        if share.kind != "cifs":
            with contextlib.suppress(FileNotFoundError):
                self._settings.backup_credentials_file.unlink()

    async def _put_back(self, previous: _Previous) -> None:
        await anyio.to_thread.run_sync(self._restore_files, previous)
        steps: list[tuple[str, ...]] = [("daemon-reload",)]
        if previous.unit is not None:
            steps.append(("restart", "--", self.unit))
        else:
            steps += [("disable", "--", self.unit), ("reset-failed", "--", self.unit)]
        for step in steps:
            try:
                await self._systemctl.manage_own(*step)
            except ActionFailedError as exc:
                logger.warning("backup-mount: putting the previous unit back, %s failed: %s", step[0], exc)

    def _restore_files(self, previous: _Previous) -> None:
        for path, content, mode in (
            (self._unit_file, previous.unit, _UNIT_MODE),
            (self._settings.backup_credentials_file, previous.credentials, _CREDENTIALS_MODE),
        ):
            if content is None:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            else:
                write_bytes_atomic(path, content, mode=mode)

    # ---------------------------------------------------------------- remove

    async def remove(self) -> BackupMountRemoved:
        """Unmount and disable the share, then remove its unit, credentials and state.

        Raises:
            BackupMountNotConfiguredError: hostd manages no share.
            BackupMountConflictError: the unit at the target is not hostd's.
            MountBusyError: the share could not be unmounted (nothing removed).
        """
        async with self._lock:
            ours = await anyio.to_thread.run_sync(self._unit_is_ours)
            if not ours and self._unit_file.exists():
                raise BackupMountConflictError(
                    f"{self._unit_file} was not written by hostd; it is left alone"
                )
            if not ours and not self._state_path.exists():
                raise BackupMountNotConfiguredError("no backup share is configured")
            if ours:
                try:
                    await self._systemctl.manage_own("disable", "--now", "--", self.unit)
                except ActionFailedError as exc:
                    with contextlib.suppress(ActionFailedError):
                        await self._systemctl.manage_own("enable", "--", self.unit)
                    logger.warning("backup-mount remove result=refused reason=%r", str(exc))
                    raise MountBusyError(
                        f"{self._target} could not be unmounted (in use?); nothing was removed: {exc}"
                    ) from None
            await anyio.to_thread.run_sync(self._remove_files)
            await self._systemctl.manage_own("daemon-reload")
            try:
                await self._systemctl.manage_own("reset-failed", "--", self.unit)
            except ActionFailedError as exc:
                logger.debug("backup-mount: reset-failed: %s", exc)  # systemd may have unloaded it already
            warnings = await anyio.to_thread.run_sync(self._ownership_warnings)
        logger.info("backup-mount remove unit=%s result=ok", self.unit)
        for warning in warnings:
            logger.warning("backup-mount: %s", warning)
        return BackupMountRemoved(unit=self.unit, warnings=warnings)

    def _remove_files(self) -> None:
        for path in (self._unit_file, self._settings.backup_credentials_file, self._state_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _ownership_warnings(self) -> list[str]:
        uid, gid = self._settings.backup_uid, self._settings.backup_gid
        try:
            info = os.stat(self._target)
        except OSError as exc:
            return [
                f"{self._target}: {exc.strerror or exc}; backups need it as a folder owned by {uid}:{gid}"
            ]
        if (info.st_uid, info.st_gid) != (uid, gid):
            return [
                f"{self._target} is owned by {info.st_uid}:{info.st_gid}, not {uid}:{gid}: the master "
                f"cannot write backups there until `chown {uid}:{gid} {self._target}`"
            ]
        return []


def _fresh_folder(root: Path) -> str:
    return tempfile.mkdtemp(prefix="mirbad-share-", dir=root)


def _private_file(root: Path, share: BackupShare) -> Path:
    descriptor, name = tempfile.mkstemp(prefix="mirbad-share-", suffix=".credentials", dir=root)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:  # mkstemp makes it 0600
        handle.write(render_credentials(share))
    return Path(name)


def _clean_probe(folder: Path, credentials: Path | None) -> None:
    if credentials is not None:
        with contextlib.suppress(OSError):
            credentials.unlink()
    with contextlib.suppress(OSError):
        folder.rmdir()  # fails (and is left) only when even the lazy unmount failed


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _scrub(text: str, password: str | None) -> str:
    """``text`` without the password, should a tool ever echo it."""
    return text.replace(password, "********") if password else text
