"""Every change of the backup destination, whoever asks (the admin API, the portal), and its audit line.

The share is mounted by the hostd of the master's own machine, reached through that machine's node agent
(the ``local`` node), which must report the ``host.backup-mount`` feature. Applying and disconnecting
need the signed-in administrator (``actor`` non-empty) and hold the room's lock, so the master's record
of the share always describes the last change hostd accepted; a test changes nothing and needs no more
than any admin call. hostd's refusals come out as the admin API's codes (``mount_conflict`` 409,
``mount_failed`` 422, ``mount_busy`` 422, a bad field 422 naming it, ``share_not_configured`` 404,
``hostd_unavailable`` 503). Audit lines name the share's source and kind, never the password; a refused
apply or disconnect is audited as refused.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import anyio

from mirbad_master._composition import MasterServices
from mirbad_master.exceptions import ApiError
from mirbad_orchestration import NodeFeatureMissingError
from mirbad_orchestration.exceptions import AgentRequestError
from mirbad_orchestration.fleet import LOCAL_NODE_ID, AgentClient
from mirbad_protocol import InvalidFieldError, MirbadError
from mirbad_protocol.admin import AdminErrorCode
from mirbad_protocol.agent import FeatureFlag
from mirbad_protocol.hostd import (
    BackupMountRemoved,
    BackupMountStatus,
    BackupShare,
    BackupShareProbe,
    BackupShareSettings,
)

from ._destination import DestinationReadiness, backup_folder_readiness
from ._keeper import keeper_of
from ._views import DestinationStatus

__all__ = [
    "DestinationReadiness",
    "DestinationStatus",
    "apply_destination",
    "checked_share",
    "destination",
    "destination_ready",
    "disconnect_destination",
    "serve_backups",
    "share_password_for_backup",
    "test_destination",
]

_STATUS_BOUND_S: Final = 10.0  # hostd bounds its free-space read at 3 s; the agent hop adds little

# hostd's refusals (passed on by the agent) as the admin API's codes.
_PASSED: Final = {
    "mount_conflict": AdminErrorCode.MOUNT_CONFLICT,
    "mount_failed": AdminErrorCode.MOUNT_FAILED,
    "mount_busy": AdminErrorCode.MOUNT_BUSY,
    "not_found": AdminErrorCode.SHARE_NOT_CONFIGURED,
    "invalid_request": AdminErrorCode.INVALID_REQUEST,
    "hostd_unavailable": AdminErrorCode.HOSTD_UNAVAILABLE,
}


def checked_share(body: bytes | dict[str, object]) -> BackupShare:
    """The share a form or a request body describes (JSON text or its parsed object).

    Raises:
        ApiError: 422 ``invalid_request`` naming the field (the message never repeats a value), as
            hostd answers the same mistakes.
    """
    try:
        if isinstance(body, bytes):
            return BackupShare.from_user_json(body)
        return BackupShare.from_user_input(body)
    except InvalidFieldError as exc:
        raise ApiError(422, AdminErrorCode.INVALID_REQUEST, str(exc), field=exc.field) from None


async def destination(services: MasterServices) -> DestinationStatus:
    """The share's status from the local node's hostd, with what the master remembers of it.

    A node that cannot answer is a status with ``available`` false and the reason, never a refusal:
    the page shows it beside the form.
    """
    keeper = keeper_of(services)
    record = await keeper.store.read()
    view = DestinationStatus(
        node_id=LOCAL_NODE_ID, remembered=record.share, password_kept=record.has_password
    )
    try:
        with anyio.fail_after(_STATUS_BOUND_S):
            mount = await (await _local_agent(services)).host_backup_mount()
    except (MirbadError, TimeoutError) as exc:
        return view.model_copy(update={"reason": str(exc) or "the local node did not answer in time"})
    await keeper.store.note_configured(mount.configured, mount.share)
    return view.model_copy(update={"available": True, "mount": mount})


async def test_destination(services: MasterServices, share: BackupShare, actor: str) -> BackupShareProbe:
    """Have the local hostd mount ``share`` aside and write, read and delete a file on it; audited.

    Nothing is written on the master or the node. Raises ApiError with hostd's refusal as the admin
    API's code (``mount_failed`` 422 when the share does not mount or the backup account cannot write).
    """
    try:
        async with _refusals():
            probe = await (await _local_agent(services)).host_backup_mount_test(share)
    except MirbadError as exc:
        await _audit(services, actor, "backup.destination.test", share, outcome="refused", why=exc)
        raise
    await _audit(services, actor, "backup.destination.test", share)
    return probe


async def apply_destination(services: MasterServices, share: BackupShare, actor: str) -> BackupMountStatus:
    """Have the local hostd test, write and mount ``share``; keep its password sealed; audited.

    Raises:
        ApiError: 401 without a signed-in administrator; hostd's refusals as the admin API's codes.
    """
    _require_administrator(actor, "applying a backup share")
    keeper = keeper_of(services)
    async with keeper.lock:
        try:
            async with _refusals():
                status = await (await _local_agent(services)).host_backup_mount_apply(share)
        except MirbadError as exc:
            await _audit(services, actor, "backup.destination.apply", share, outcome="refused", why=exc)
            raise
        await keeper.store.keep(share.without_secret(), share.password)
    await _audit(services, actor, "backup.destination.apply", share)
    return status


async def disconnect_destination(services: MasterServices, actor: str) -> BackupMountRemoved:
    """Have the local hostd unmount and remove the share; forget it and its password; audited.

    Raises:
        ApiError: 401 without a signed-in administrator; 404 ``share_not_configured``; 422
            ``mount_busy`` (nothing removed); the node's other refusals.
    """
    _require_administrator(actor, "disconnecting the backup share")
    keeper = keeper_of(services)
    async with keeper.lock:
        record = await keeper.store.read()
        target = _source(record.share) if record.share is not None else "backup share"
        try:
            async with _refusals():
                removed = await (await _local_agent(services)).host_backup_mount_remove()
        except MirbadError as exc:
            await services.audit.record(
                actor,
                "backup.destination.disconnect",
                target,
                outcome="refused",
                node_id=LOCAL_NODE_ID,
                detail=str(exc),
            )
            raise
        await keeper.store.forget()
    detail = "; ".join(removed.warnings) or None
    await services.audit.record(
        actor, "backup.destination.disconnect", target, node_id=LOCAL_NODE_ID, detail=detail
    )
    return removed


async def share_password_for_backup(services: MasterServices) -> str | None:
    """The share's password in clear text, for a passphrase backup's secrets only; None when none is kept.

    Never show, log or write it anywhere but inside an encrypted backup.

    Raises:
        ApiError: 500 ``storage_error``: the sealed password or its key is unreadable or altered.
    """
    return await keeper_of(services).store.password()


async def destination_ready(services: MasterServices, backup_dir: Path) -> DestinationReadiness:
    """Whether a scheduled backup may be written into ``backup_dir`` now (the scheduler asks first).

    When a share is configured, as the local hostd says or, when it does not answer, as the master last
    learned, ``backup_dir`` must be on a network file system (``settings.mountinfo_file``); otherwise
    the backup is to be skipped and the verdict's reason reported. Without a share, it is always ready.
    """
    keeper = keeper_of(services)
    configured = (await keeper.store.read()).configured
    try:
        with anyio.fail_after(_STATUS_BOUND_S):
            mount = await (await _local_agent(services)).host_backup_mount()
    except (MirbadError, TimeoutError):
        pass  # the agent stopped answering: what the master last learned stands
    else:
        configured = mount.configured
        await keeper.store.note_configured(configured, mount.share)
    return await anyio.to_thread.run_sync(
        lambda: backup_folder_readiness(
            backup_dir, share_configured=configured, mountinfo=services.settings.mountinfo_file
        )
    )


async def _local_agent(services: MasterServices) -> AgentClient:
    client = await services.client_of(LOCAL_NODE_ID)
    if FeatureFlag.HOST_BACKUP_MOUNT not in (await client.info()).features:
        raise NodeFeatureMissingError(LOCAL_NODE_ID, FeatureFlag.HOST_BACKUP_MOUNT.value, field="kind")
    return client


def _require_administrator(actor: str, what: str) -> None:
    if not actor:
        raise ApiError(401, AdminErrorCode.UNAUTHORIZED, f"{what} needs the signed-in administrator")


def _source(share: BackupShareSettings) -> str:
    # As mount names it (and hostd's status shows it): //server/share, or server:/export.
    return f"{share.server}:{share.share}" if share.kind == "nfs" else f"//{share.server}/{share.share}"


async def _audit(
    services: MasterServices,
    actor: str,
    action: str,
    share: BackupShare,
    *,
    outcome: str = "ok",
    why: BaseException | None = None,
) -> None:
    # The settings only: the password is not part of without_secret(), and hostd scrubs its messages.
    settings = share.without_secret()
    detail = " ".join(
        f"{name}={value}" for name, value in settings.to_wire().items() if name not in {"server", "share"}
    )
    if why is not None:
        detail = f"{detail}: {why}"
    await services.audit.record(
        actor,
        action,
        _source(settings),
        outcome="refused" if outcome == "refused" else "ok",
        node_id=LOCAL_NODE_ID,
        detail=detail,
    )


@asynccontextmanager
async def _refusals() -> AsyncIterator[None]:
    try:
        yield
    except AgentRequestError as exc:
        code = _PASSED.get(exc.code or "")
        if code is None:
            raise
        status = 422 if code is AdminErrorCode.INVALID_REQUEST else code.http_status
        raise ApiError(status, code, exc.message, field=exc.field) from None


def serve_backups(services: MasterServices) -> None:
    """Lend the backups the destination's two answers (the app assembly calls it once).

    A passphrase backup then carries the share's password (:func:`share_password_for_backup`), and a
    scheduled backup is skipped, with the reason recorded, while a configured share is not mounted under
    the backup directory (:func:`destination_ready`): it would otherwise land on the local disk.
    """

    async def password() -> str | None:
        return await share_password_for_backup(services)

    async def check(directory: Path) -> str | None:
        verdict = await destination_ready(services, directory)
        return None if verdict.ready else verdict.reason

    services.share_password = password
    services.backup_destination_check = check
