"""The restore in the portal: a backup uploaded and previewed, then the job's live progress.

The Backup & restore page (the backups room's) embeds both cards, so they are the room's public portal
part. Every change goes through the room's :mod:`.actions` as the portal's administrator and a refusal
is shown as ``/api`` words it (a wrong passphrase under its field). The upload card reads the file in
the browser's upload, shows the preview (new, changed with the changed fields, or identical models;
folders present or missing; manual steps; new keys; the preview's notes) and offers Restore. The
progress panel shows the job's state and phase, what was imported, and per model where it stands: a
bar for the download in flight, then started, left stopped or why not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from nicegui import events, ui

from mirbad_master.ui._marks import testid
from mirbad_master.ui._portal import Portal
from mirbad_master.ui._refusals import PORTAL_ACTOR, act, refusal_text, show_under_field
from mirbad_orchestration.exceptions import BackupNotEncryptedError, BackupPassphraseError, NoRestoreJobError
from mirbad_protocol.restore import (
    MAX_BACKUP_BYTES,
    ModelPreview,
    RestoreJobView,
    RestoreModelProgress,
    RestorePreview,
)

from . import actions
from ._upload import BackupUpload

__all__ = [
    "PANEL_REFRESH_S",
    "STEP_WORDS",
    "folders_text",
    "model_line",
    "preview_line",
    "render_restore_panel",
    "render_restore_upload",
]

PANEL_REFRESH_S: Final = 1.0
"""How often the panel reads the job again (a download's bytes move every second)."""

STEP_WORDS: Final = {
    "pending": "waiting",
    "downloading": "downloading",
    "present": "folders present",
    "starting": "starting",
    "started": "started",
    "left-stopped": "left stopped",
    "manual": "needs manual steps",
    "failed": "failed",
    "cancelled": "cancelled",
}
"""Each model step in words."""
_FORM_SLACK: Final = 64 * 1024  # an upload's multipart boundaries and headers


def model_line(progress: RestoreModelProgress) -> str:
    """One model's line: ``qwen on gpu-1: downloading qwen (40 of 100 bytes)``, with its message."""
    words = STEP_WORDS[progress.step]
    if progress.step == "downloading" and progress.folder:
        words += f" {progress.folder} ({progress.done_bytes} of {progress.total_bytes or '?'} bytes)"
    line = f"{progress.model_id} on {progress.node_id}: {words}"
    return f"{line}: {progress.message}" if progress.message else line


async def render_restore_panel(portal: Portal) -> Callable[[], Awaitable[None]]:
    """The restore panel, kept fresh; returns its refresh (for a page that has just started a restore)."""
    services = portal.services
    with testid(ui.card().classes("w-full gap-2"), "restore-panel"):
        ui.label("Restore").classes("text-h6")
        body = ui.column().classes("w-full gap-1")

    async def cancel() -> None:
        await act(actions.cancel_restore(services, PORTAL_ACTOR), done="Restore cancelled")
        await refresh()

    async def refresh() -> None:
        try:
            job: RestoreJobView | None = actions.restore_job(services)
        except NoRestoreJobError:
            job = None
        body.clear()
        with body:
            if job is None:
                ui.label("No restore has run since the master started.").classes("text-grey-7")
                return
            _job(job, cancel)

    await refresh()
    ui.timer(PANEL_REFRESH_S, refresh, immediate=False)
    return refresh


def _job(job: RestoreJobView, cancel: Callable[[], Awaitable[None]]) -> None:
    with ui.row().classes("w-full items-center gap-2"):
        testid(ui.label(f"{job.state}: {job.phase}"), "restore-state")
        if job.state == "running":
            testid(ui.button("Cancel", on_click=cancel).props("flat color=negative"), "restore-cancel")
    if job.error:
        ui.label(job.error).classes("text-caption text-negative")
    imported = (
        f"models: {len(job.models_added)} added, {len(job.models_changed)} changed, "
        f"{len(job.models_unchanged)} unchanged; API keys: {len(job.keys_added)} added"
    )
    ui.label(imported).classes("text-caption")
    for model_id, reason in job.models_refused.items():
        ui.label(f"{model_id} not restored: {reason}").classes("text-caption text-negative")
    for progress in job.models:
        testid(ui.label(model_line(progress)), f"restore-model-{progress.model_id}")
        if progress.step == "downloading" and progress.total_bytes:
            ui.linear_progress(progress.done_bytes / progress.total_bytes, show_value=False)


def folders_text(model: ModelPreview) -> str:
    """Whether a previewed model's folders are on its node, and what fetching them would download.

    The size is the hub's, read by the model's node; where no node could tell it, the text says it is
    unknown (the preview's notes say why).
    """
    if model.needs_manual_steps:
        return "folders missing, no source: needs manual steps"
    if model.folders_present is None:
        return "its node did not say whether its folders are there"
    if model.folders_present:
        return "folders present"
    if model.download_bytes is None:
        return "folders missing, download size unknown"
    return f"folders missing, {model.download_bytes:,} bytes to download"


def preview_line(model: ModelPreview) -> str:
    """One previewed model: ``qwen (Qwen3): new; folders missing, 117,737,304 bytes to download``."""
    change: str = model.change
    if model.change == "changed" and model.changed_fields:
        change += f" ({', '.join(model.changed_fields)})"
    return f"{model.id} ({model.served_name}): {change}; {folders_text(model)}"


async def render_restore_upload(portal: Portal, started: Callable[[], Awaitable[None]]) -> None:
    """The card that takes a backup file, previews restoring it and starts the restore.

    Args:
        portal: the portal.
        started: called once a restore has started (the page refreshes its progress panel).
    """
    services = portal.services
    chosen: dict[str, bytes] = {}
    # The portal's upload is held to the master's body cap, under the restore routes' own 64 MiB.
    cap = services.settings.max_api_body_bytes
    limit = min(MAX_BACKUP_BYTES, max(cap - _FORM_SLACK, cap // 2))

    def upload() -> BackupUpload:
        return BackupUpload(chosen["raw"], str(phrase.value or "") or None)

    def refused(exc: Exception) -> None:
        # A passphrase that does not open the backup is the passphrase field's fault, as a bad field is.
        if isinstance(exc, (BackupPassphraseError, BackupNotEncryptedError)):
            phrase.error = refusal_text(exc)
        else:
            show_under_field(exc, {"passphrase": phrase})

    async def preview() -> None:
        phrase.error = None
        box.clear()
        start.set_visibility(False)
        if "raw" not in chosen:
            return
        try:
            seen = await actions.preview_backup(services, upload())
        except Exception as exc:  # every refusal, shown as /api words it
            refused(exc)
            return
        with box:
            _preview(seen)
        start.set_visibility(True)

    async def received(event: events.UploadEventArguments) -> None:
        chosen["raw"] = await event.file.read()
        file_name.text = event.file.name
        uploader.reset()
        await preview()

    async def restore() -> None:
        try:
            await actions.restore_backup(services, upload(), PORTAL_ACTOR)
        except Exception as exc:  # every refusal, shown as /api words it
            refused(exc)
            return
        ui.notify("Restore started", type="positive")
        start.set_visibility(False)
        await started()

    with testid(ui.card().classes("w-full gap-2"), "restore-upload"):
        ui.label("Restore a backup").classes("text-h6")
        ui.label(
            "Upload a backup file to see what restoring it would do. Its API keys are read only with "
            "the passphrase it was written with."
        ).classes("text-grey-8")
        with ui.row().classes("w-full items-start gap-2"):
            phrase = testid(
                ui.input("Backup passphrase (for its API keys)", password=True).classes("grow"),
                "restore-passphrase",
            )
            testid(ui.button("Preview again", on_click=preview).props("flat"), "restore-preview-again")
        uploader = testid(
            ui.upload(
                label="Backup file (.json)",
                auto_upload=True,
                max_file_size=limit,
                on_upload=received,
                on_rejected=lambda: ui.notify(
                    f"The file is over {limit} bytes, the most the portal takes: restore it through "
                    "/api/restore (64 MiB at most)",
                    type="negative",
                    multi_line=True,
                ),
            ).props("accept=.json,application/json"),
            "restore-file",
        ).classes("w-full")
        file_name = testid(ui.label("").classes("font-mono"), "restore-file-name")
        box = testid(ui.column().classes("w-full gap-1"), "restore-preview")
        start = testid(ui.button("Restore", icon="restore", on_click=restore), "restore-start")
        start.set_visibility(False)


def _preview(preview: RestorePreview) -> None:
    written = preview.created_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    ui.label(
        f"Schema version {preview.schema_version} backup of {preview.host or 'an unnamed host'}, written "
        f"{written}: {len(preview.models)} models"
    ).classes("font-medium")
    for model in preview.models:
        line = testid(ui.label(preview_line(model)), f"preview-model-{model.id}")
        if model.needs_manual_steps:
            line.classes("text-negative")
    if preview.manual_models:
        ui.label(f"Manual steps needed for: {', '.join(preview.manual_models)}").classes("text-negative")
    if preview.api_keys_included:
        added = ", ".join(f"{key.name} ({key.prefix}…)" for key in preview.new_api_keys) or "none"
        testid(ui.label(f"New API keys: {added}"), "preview-keys")
        if preview.conflicting_api_keys:
            ui.label(f"Skipped (another key has their id or hash): {', '.join(preview.conflicting_api_keys)}")
    for note in preview.notes:
        ui.label(note).classes("text-caption text-grey-8")
