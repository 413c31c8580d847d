"""The backups room: back up now, download tokens and downloads through ``/api`` and through the portal's
path (the room's actions with the portal's actor) leave the same audit lines and the same refusals.

A backup's name carries the second it was written, so the names are masked before the lines are compared.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.master._rooms import AuditLine, api_refusal, audit_lines, ok, portal_refusal
from tests.master._stack import Master, running_master

from mirbad_master.backups import actions
from mirbad_master.ui._refusals import PORTAL_ACTOR
from mirbad_orchestration.backups import parse_backup_file_name

pytestmark = pytest.mark.anyio

PASSPHRASE = "correct horse battery"


async def backup_lines(master: Master) -> list[AuditLine]:
    """The day's ``backup.*`` lines, each backup's name masked (it carries the time)."""
    lines = await audit_lines(master)
    return [
        (actor, action, "<backup>" if parse_backup_file_name(target) else target, node, outcome)
        for actor, action, target, node, outcome in lines
        if action.startswith("backup.")
    ]


def backup_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "backups"
    folder.mkdir(parents=True)
    return folder


async def test_the_same_changes_leave_the_same_audit_lines(tmp_path: Path) -> None:
    async with running_master(tmp_path / "api", backup_dir=backup_dir(tmp_path / "api")) as master:
        api = master.admin
        plain = await ok(api.post("/api/backup"))
        secret = await ok(api.post("/api/backup", json={"passphrase": PASSPHRASE}))
        issued = await ok(api.post("/api/backup/download-tokens", json={"name": secret["name"]}))
        by_token = await master.anonymous.get(f"/api/backup/download/{issued['token']}")
        by_name = await api.get(f"/api/backup/files/{plain['name']}")
        listed = await ok(api.get("/api/backup"))
        through_the_api = await backup_lines(master)

    async with running_master(tmp_path / "portal", backup_dir=backup_dir(tmp_path / "portal")) as master:
        services = master.services
        portal_plain = await actions.back_up_now(services, None, PORTAL_ACTOR)
        portal_secret = await actions.back_up_now(services, PASSPHRASE, PORTAL_ACTOR)
        token = await actions.issue_download_token(services, portal_secret.name, PORTAL_ACTOR)
        _, portal_by_token = await actions.download_by_token(services, token.token)
        portal_by_name = await actions.read_backup_file(services, portal_plain.name, PORTAL_ACTOR)
        portal_listed = await actions.backup_list(services)
        through_the_portal = await backup_lines(master)

    assert through_the_portal == through_the_api
    assert [line[1] for line in through_the_api] == [
        "backup.create",
        "backup.create",
        "backup.token",
        "backup.download",
        "backup.download",
    ]
    assert {line[0] for line in through_the_api} == {PORTAL_ACTOR}
    assert (plain["encrypted"], secret["encrypted"]) == (False, True)
    assert (portal_plain.encrypted, portal_secret.encrypted) == (False, True)
    assert by_token.status_code == by_name.status_code == 200
    assert b'"ciphertext"' in by_token.content
    assert b'"ciphertext"' in portal_by_token
    assert b'"ciphertext"' not in by_name.content
    assert b'"ciphertext"' not in portal_by_name
    # Newest first; the day's scheduled backup may come before them (or be skipped as not due).
    assert [backup["encrypted"] for backup in listed["backups"]][:2] == [True, False]
    assert [backup.encrypted for backup in portal_listed.backups][:2] == [True, False]


async def test_the_same_bad_input_is_refused_alike(tmp_path: Path) -> None:
    traversal = "../../data/admin.json"
    async with running_master(tmp_path / "api", backup_dir=backup_dir(tmp_path / "api")) as master:
        api = master.admin
        by_api = [
            api_refusal(await api.post("/api/backup", json={"passphrase": "too short"})),
            api_refusal(await api.post("/api/backup/download-tokens", json={"name": traversal})),
            api_refusal(
                await api.post(
                    "/api/backup/download-tokens", json={"name": "mirbad-backup-x-20260101T000000Z.json"}
                )
            ),
            api_refusal(await master.anonymous.get("/api/backup/download/not-a-token")),
        ]
        audit_api = await backup_lines(master)

    async with running_master(tmp_path / "portal", backup_dir=backup_dir(tmp_path / "portal")) as master:
        services = master.services
        by_portal = [
            await portal_refusal(lambda: actions.back_up_now(services, "too short", PORTAL_ACTOR)),
            await portal_refusal(lambda: actions.issue_download_token(services, traversal, PORTAL_ACTOR)),
            await portal_refusal(
                lambda: actions.issue_download_token(
                    services, "mirbad-backup-x-20260101T000000Z.json", PORTAL_ACTOR
                )
            ),
            await portal_refusal(lambda: actions.download_by_token(services, "not-a-token")),
        ]
        audit_portal = await backup_lines(master)

    assert by_portal == by_api
    assert [(refusal.status, refusal.code, refusal.field) for refusal in by_api] == [
        (422, "passphrase_too_short", "passphrase"),
        (404, "backup_not_found", None),
        (404, "backup_not_found", None),
        (404, "backup_not_found", None),
    ]
    assert audit_api == audit_portal == []


async def test_a_backup_that_cannot_be_written_is_refused_recorded_and_audited_alike(tmp_path: Path) -> None:
    missing = tmp_path / "not-there"
    async with running_master(tmp_path / "api", backup_dir=missing) as master:
        by_api = api_refusal(await master.admin.post("/api/backup"))
        listed = await ok(master.admin.get("/api/backup"))
        audit_api = await backup_lines(master)

    async with running_master(tmp_path / "portal", backup_dir=missing) as master:
        by_portal = await portal_refusal(lambda: actions.back_up_now(master.services, None, PORTAL_ACTOR))
        audit_portal = await backup_lines(master)

    assert by_portal == by_api
    assert (by_api.status, by_api.code) == (409, "backup_failed")
    assert "does not exist" in by_api.message
    assert not missing.exists()  # never created
    # The day's scheduled run may have failed after it (it lists the directory first).
    assert listed["lastFailure"]["reason"] in (by_api.message, listed["listingError"])
    assert "cannot list" in listed["listingError"]
    assert audit_api == audit_portal == [(PORTAL_ACTOR, "backup.create", "-", None, "failed")]
