"""The backups card in the user simulation: the list, Back up now with and without a passphrase, a
short passphrase refused under its field, and the last failure.

The Backup & restore page embeds the card (tests/browser/test_backup_page.py drives it there); here the
card is served alone on a page of the test's own, with the portal's guard.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from nicegui import core, ui
from nicegui.testing.general import nicegui_reset_globals, prepare_simulation
from nicegui.testing.user import User
from starlette.requests import Request
from tests.master._stack import Master, running_master

from mirbad_master._admin_auth import SESSION_COOKIE
from mirbad_master.backups.panels import backup_row, download_url, render_backups_panel
from mirbad_master.ui import Portal
from mirbad_master.ui._guarded_page import guarded_page
from mirbad_protocol.admin import BackupInfo

pytestmark = pytest.mark.anyio

PASSPHRASE = "correct horse battery"


@asynccontextmanager
async def card_user(master: Master) -> AsyncIterator[User]:
    """A signed-in visitor of a page holding only the backups card."""
    with nicegui_reset_globals():
        os.environ["NICEGUI_USER_SIMULATION"] = "true"
        try:
            prepare_simulation()
            portal = Portal(master.services, master.auth)

            @guarded_page(portal, "/backups-card", section="/backups-card")
            async def card(request: Request) -> None:
                await render_backups_panel(portal)

            ui.run(storage_secret="simulation")
            async with (
                core.app.router.lifespan_context(core.app),
                httpx.AsyncClient(
                    transport=httpx.ASGITransport(core.app), base_url="http://portal"
                ) as client,
            ):
                client.cookies.set(SESSION_COOKIE, await master.auth.sign_in(master.password, "sim"))
                yield User(client)
        finally:
            os.environ.pop("NICEGUI_USER_SIMULATION", None)


async def test_back_up_now_lists_the_backup_and_a_short_passphrase_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "backups"
    directory.mkdir()
    async with running_master(tmp_path / "master", backup_dir=directory) as master, card_user(master) as user:
        await user.open("/backups-card")
        await user.should_see(marker="backups-panel")
        await user.should_see(f"One backup a day into {directory}, the newest 7 kept.")
        user.find(marker="backup-passphrase").type("too short")
        user.find(marker="backup-now").click()
        # Under the field it names, not as a notification.
        await user.should_see(marker="backup-passphrase", content="must have at least 12 characters")
        user.find(marker="backup-passphrase").clear().type(PASSPHRASE)
        user.find(marker="backup-now").click()
        await user.should_see("encrypted: yes")
        written = master.services.backups.state.last_backup
        assert written is not None
        assert written.encrypted
        await user.should_see(written.name)
        lines = await master.services.audit.read(written.created_at.date())

    assert [(line.action, line.target) for line in lines if line.action.startswith("backup.")] == [
        ("backup.create", written.name)
    ]


async def test_a_failure_is_shown_and_the_directory_never_made(tmp_path: Path) -> None:
    missing = tmp_path / "not-there"
    async with running_master(tmp_path / "master", backup_dir=missing) as master, card_user(master) as user:
        await user.open("/backups-card")
        user.find(marker="backup-now").click()
        await user.should_see(marker="backup-failure")
        await user.should_see("does not exist")

    assert not missing.exists()


def test_a_row_and_a_link() -> None:
    backup = BackupInfo(
        name="mirbad-backup-lab-20261206T051730Z.json",
        host="lab",
        created_at=datetime(2026, 12, 6, 5, 17, 30, tzinfo=UTC),
        size_bytes=2228,
        encrypted=None,
    )
    assert backup_row(backup) == {
        "name": backup.name,
        "date": "2026-12-06 05:17:30 UTC",
        "size": "2.2 kB",
        "encrypted": "unreadable",
    }
    assert download_url("abc") == "/api/backup/download/abc"
