"""The restore job in the portal: a panel with its live progress and a Cancel button.

The Backup & restore page (built after this room) embeds it; so it is the room's public portal part.
Every change goes through the room's :mod:`.actions` as the portal's administrator and a refusal is
shown as ``/api`` words it. The panel shows the job's state and phase, what was imported, and per
model where it stands: a bar for the download in flight, then started, left stopped or why not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from nicegui import ui

from mirbad_master.ui._marks import testid
from mirbad_master.ui._portal import Portal
from mirbad_master.ui._refusals import PORTAL_ACTOR, act
from mirbad_orchestration.exceptions import NoRestoreJobError
from mirbad_protocol.restore import ModelPreview, RestoreJobView, RestoreModelProgress

from . import actions

__all__ = ["PANEL_REFRESH_S", "STEP_WORDS", "model_line", "preview_line", "render_restore_panel"]

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


def model_line(progress: RestoreModelProgress) -> str:
    """One model's line: ``qwen on gpu-1: downloading qwen (40 of 100 bytes)``, with its message."""
    words = STEP_WORDS[progress.step]
    if progress.step == "downloading" and progress.folder:
        words += f" {progress.folder} ({progress.done_bytes} of {progress.total_bytes or '?'} bytes)"
    line = f"{progress.model_id} on {progress.node_id}: {words}"
    return f"{line}: {progress.message}" if progress.message else line


def preview_line(model: ModelPreview) -> str:
    """One model of a preview: ``qwen (new): folders missing, 117,737,304 bytes to download``.

    The size is the hub's, read by the model's node; where no node could tell it, the line says it is
    unknown (the preview's notes say why).
    """
    line = f"{model.id} ({model.change})"
    if model.needs_manual_steps:
        return f"{line}: folders missing, no source: needs manual steps"
    if model.folders_present is None:
        return f"{line}: its node did not say whether its folders are there"
    if model.folders_present:
        return f"{line}: folders present"
    if model.download_bytes is None:
        return f"{line}: folders missing, download size unknown"
    return f"{line}: folders missing, {model.download_bytes:,} bytes to download"


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
