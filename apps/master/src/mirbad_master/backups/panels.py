"""The backups in the portal: the card the Backup & restore page (:mod:`.page`) shows first.

It lists the backups in the backup directory (name, size, date, encrypted or not), the schedule and
the last failure, offers "Back up now" with an optional passphrase, and a Download button per backup,
which asks the room's actions for a one-time link and hands it to the browser (no bearer header needed).
Every change goes through :mod:`.actions` as the portal's administrator, the API's own path and audit
line; a refusal is shown as ``/api`` words it, a passphrase under 12 characters under its field.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from nicegui import ui

from mirbad_master.ui._marks import testid
from mirbad_master.ui._portal import Portal
from mirbad_master.ui._refusals import PORTAL_ACTOR, REFUSED, act, show_under_field
from mirbad_protocol.admin import BackupInfo, BackupList

from . import actions

__all__ = ["backup_row", "download_url", "render_backups_panel"]


def download_url(token: str) -> str:
    """Where a browser downloads a backup with a one-time token."""
    return f"/api/backup/download/{token}"


def backup_row(backup: BackupInfo) -> dict[str, str]:
    """One backup as the table shows it."""
    size = f"{backup.size_bytes / 1000:.1f} kB" if backup.size_bytes >= 1000 else f"{backup.size_bytes} B"
    encrypted = {True: "yes", False: "no", None: "unreadable"}[backup.encrypted]
    return {
        "name": backup.name,
        "date": backup.created_at.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "size": size,
        "encrypted": encrypted,
    }


def _schedule_text(listing: BackupList) -> str:
    schedule = listing.schedule
    if not schedule.enabled:
        return "Scheduled backups are off: no backup directory is set (MIRBAD_BACKUP_DIR)."
    return f"One backup a day into {schedule.directory}, the newest {schedule.keep} kept."


async def render_backups_panel(portal: Portal) -> None:
    """The backups card: the list, the schedule, the last failure, Back up now and downloads."""
    services = portal.services

    async def listing() -> None:
        state = await actions.backup_list(services)
        box.clear()
        with box:
            _render_listing(state, download)

    async def download(name: str) -> None:
        issued = await act(actions.issue_download_token(services, name, PORTAL_ACTOR))
        if issued is not REFUSED:
            ui.download(download_url(issued.token), name)

    async def back_up() -> None:
        phrase.error = None
        try:
            await actions.back_up_now(services, phrase.value or None, PORTAL_ACTOR)
        except Exception as exc:  # a short passphrase under its field, any other refusal notified
            show_under_field(exc, {"passphrase": phrase})
        else:
            ui.notify("Backup written", type="positive")
            phrase.value = ""
        await listing()  # a failure shows as the last failure too

    with testid(ui.card().classes("w-full gap-2"), "backups-panel"):
        ui.label("Backups").classes("text-h6")
        with ui.row().classes("w-full items-end gap-2"):
            phrase = testid(
                ui.input("Passphrase (optional, 12 characters at least)", password=True).classes("grow"),
                "backup-passphrase",
            )
            testid(ui.button("Back up now", on_click=back_up), "backup-now")
        box = ui.column().classes("w-full gap-1")
        await listing()


def _render_listing(state: BackupList, download: Callable[[str], Awaitable[None]]) -> None:
    ui.label(_schedule_text(state)).classes("text-grey-8")
    if state.last_failure is not None:
        failure = state.last_failure
        when = failure.at.strftime("%Y-%m-%d %H:%M:%S UTC")
        testid(
            ui.label(f"Last failure ({when}): {failure.reason}").classes("text-negative"),
            "backup-failure",
        )
    if state.listing_error is not None:
        ui.label(state.listing_error).classes("text-negative")
    if not state.backups:
        ui.label("No backups yet.").classes("text-grey-7")
        return
    for backup in state.backups:
        row = backup_row(backup)
        with testid(ui.row().classes("w-full items-center gap-4"), "backup-row"):
            ui.label(row["name"]).classes("font-mono grow")
            ui.label(row["date"])
            ui.label(row["size"])
            ui.label(f"encrypted: {row['encrypted']}")
            ui.button("Download", on_click=lambda name=backup.name: download(name)).props("flat")
