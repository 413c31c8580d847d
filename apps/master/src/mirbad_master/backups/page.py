"""The Backup & restore page: the backups, restoring one, and where backups are written.

It gathers the portal parts of three rooms, each built over its own room's actions: this room's
backups card (the list with size, date and encryption, Back up now, downloads through one-time links,
the schedule and the last failure), the restore room's upload card (a backup file and its passphrase,
the preview, Restore) and its live progress panel, and the backup destination room's share form (Test,
Apply, Disconnect, and its status). Starting a restore refreshes the progress panel at once, rather
than on its next tick.
"""

from __future__ import annotations

from nicegui import ui

from mirbad_master.backup_share.panels import render_backup_destination
from mirbad_master.restore.panels import render_restore_panel, render_restore_upload
from mirbad_master.ui._portal import Portal

from .panels import render_backups_panel

__all__ = ["render_backups_page"]


async def render_backups_page(portal: Portal) -> None:
    """The page's cards: backups, restore (upload, preview, progress), then the destination."""
    ui.label("Backup & restore").classes("text-h5")
    await render_backups_panel(portal)
    with ui.row().classes("w-full gap-4 items-start no-wrap max-lg:flex-wrap"):
        with ui.column().classes("grow basis-1/2 gap-4"):
            # The panel is built first so the upload card can hand it a started restore.
            upload_slot = ui.column().classes("w-full")
            refresh = await render_restore_panel(portal)
        with upload_slot:
            await render_restore_upload(portal, refresh)
        with ui.column().classes("grow basis-1/2"):
            render_backup_destination(portal.services)
