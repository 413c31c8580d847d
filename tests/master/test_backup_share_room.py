"""The backup share room: the destination through ``/api`` and through the portal's path, read alike.

A master whose ``local`` node is the real agent app over a real hostd process (tests/_support/hostd.py)
with the stand-in mount, umount and systemctl; the probe's write as the backup account is real, so the
tests run as root. Each scenario runs once over HTTP and once through the room's actions with the
portal's actor; the audit lines and the refusals must match, and the password must appear nowhere
but in the sealed record (and there only encrypted).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from nicegui import ui
from tests._support.hostd import HostdLayout, hostd_layout, running_hostd
from tests.master._rooms import api_refusal, audit_lines, ok, portal_refusal
from tests.master._stack import Master, running_master
from tests.master.test_api_services import _RealAgent
from tests.master.test_ui_pages import portal_user

from mirbad_agent import AgentServices, HostServicesGateway, NodeRuntimes, create_app
from mirbad_master.backup_share import actions
from mirbad_master.backup_share.panels import render_backup_destination
from mirbad_master.ui._refusals import PORTAL_ACTOR
from mirbad_orchestration.backups import open_secrets, parse_backup
from mirbad_orchestration.fleet import AgentTimeouts
from mirbad_protocol.hostd import BackupShare
from mirbad_runtime import MemoryProbe

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(os.geteuid() != 0, reason="hostd's probe writes as another account: needs root"),
]

DESTINATION = "/api/backup/destination"
PASSWORD = "Tr0ub4dor, =%'\"&3 sealed"
CIFS: dict[str, Any] = {
    "kind": "cifs",
    "server": "nas.local",
    "share": "backups",
    "username": "backup",
    "password": PASSWORD,
    "version": "3.1.1",
}
ROOT = "21 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"


@asynccontextmanager
async def share_master(
    root: Path, *, hostd: bool = True, **settings: Any
) -> AsyncIterator[tuple[Master, HostdLayout]]:
    """A master whose local node's hostd mounts backup shares (with ``hostd`` false: it stopped)."""
    with hostd_layout(root / "hostd") as layout:
        layout.root.mkdir(parents=True, exist_ok=True)
        layout.write_seed([])
        layout.write_fixtures()
        layout.write_mount_fixture()
        gateway = HostServicesGateway(layout.socket)
        agent_services = AgentServices(
            runtimes=NodeRuntimes([]),
            memory=MemoryProbe(linux=False, fake_total_gib=16.0),
            node_name="local",
            version="0.0.test",
            host_services=gateway,
        )
        agent: Any = _RealAgent(create_app(agent_services, background=False))
        timeouts = AgentTimeouts(connect_s=5, read_s=10, start_s=10, stop_s=30)
        mountinfo = root / "master-mountinfo"
        mountinfo.write_text(ROOT)
        with running_hostd(layout):
            assert await gateway.probe()
            async with (
                agent_services,
                running_master(
                    root / "master",
                    agent=lambda node_id: agent,
                    timeouts=timeouts,
                    mountinfo_file=mountinfo,
                    **settings,
                ) as master,
            ):
                yield master, layout


def _share_lines(
    lines: list[tuple[str, str, str, str | None, str]],
) -> list[tuple[str, str, str, str | None, str]]:
    return [line for line in lines if line[1].startswith("backup.destination.")]


def _no_password_in(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes(), path


async def test_test_apply_and_disconnect_leave_the_same_audit_lines(tmp_path: Path) -> None:
    async with share_master(tmp_path / "api") as (master, _):
        api = master.admin
        before = await ok(api.get(DESTINATION))
        probe = await ok(api.post(f"{DESTINATION}/test", json=CIFS))
        applied = await ok(api.put(DESTINATION, json=CIFS))
        status = await ok(api.get(DESTINATION))
        kept = await actions.share_password_for_backup(master.services)
        removed = await ok(api.delete(DESTINATION))
        after = await ok(api.get(DESTINATION))
        through_the_api = _share_lines(await audit_lines(master))
        _no_password_in(master.services.settings.data_dir / "audit")
    assert before["available"] is True
    assert before["mount"].get("configured", False) is False
    assert probe["source"] == "//nas.local/backups"
    assert applied["configured"] is True
    assert applied["mounted"] is True
    assert status["mount"]["share"] == {k: v for k, v in CIFS.items() if k != "password"}
    assert status["remembered"] == status["mount"]["share"]
    assert status["passwordKept"] is True
    assert PASSWORD not in json.dumps([before, probe, applied, status, removed, after])
    assert kept == PASSWORD
    assert removed["unit"].endswith(".mount")
    assert after.get("remembered") is None
    assert after.get("passwordKept", False) is False

    async with share_master(tmp_path / "portal") as (master, _):
        services = master.services
        share = BackupShare.from_user_input(CIFS)
        await actions.test_destination(services, share, PORTAL_ACTOR)
        await actions.apply_destination(services, share, PORTAL_ACTOR)
        await actions.disconnect_destination(services, PORTAL_ACTOR)
        through_the_portal = _share_lines(await audit_lines(master))

    assert through_the_portal == through_the_api
    assert [(line[1], line[2], line[4]) for line in through_the_api] == [
        ("backup.destination.test", "//nas.local/backups", "ok"),
        ("backup.destination.apply", "//nas.local/backups", "ok"),
        ("backup.destination.disconnect", "//nas.local/backups", "ok"),
    ]
    assert {line[0] for line in through_the_api} == {PORTAL_ACTOR}


async def test_the_same_refusals_come_back_and_never_echo_the_password(tmp_path: Path) -> None:
    bad_server = CIFS | {"server": "nas,uid=0"}
    bad_password = CIFS | {"password": "two\nlines"}
    no_account = {k: v for k, v in CIFS.items() if k != "username"}

    async def conflicting(layout: HostdLayout) -> None:
        text = layout.mountinfo.read_text()
        layout.mountinfo.write_text(text + f"70 21 0:70 / {layout.backup_target} rw - ext4 /dev/sdz1 rw\n")

    async with share_master(tmp_path / "api") as (master, layout):
        api = master.admin
        by_api = [
            api_refusal(await api.put(DESTINATION, json=bad_server)),
            api_refusal(await api.post(f"{DESTINATION}/test", json=bad_password)),
            api_refusal(await api.put(DESTINATION, json=no_account)),
            api_refusal(await api.put(DESTINATION, content=b"not json")),
            api_refusal(await api.delete(DESTINATION)),
        ]
        await conflicting(layout)
        by_api.append(api_refusal(await api.put(DESTINATION, json=CIFS)))
        api_lines = _share_lines(await audit_lines(master))
        _no_password_in(master.services.settings.data_dir)

    async with share_master(tmp_path / "portal") as (master, layout):
        services = master.services

        def share(body: dict[str, Any]) -> BackupShare:
            return actions.checked_share(body)  # as the portal's form reads its fields

        by_portal = [
            await portal_refusal(
                lambda: actions.apply_destination(services, share(bad_server), PORTAL_ACTOR)
            ),
            await portal_refusal(
                lambda: actions.test_destination(services, share(bad_password), PORTAL_ACTOR)
            ),
            await portal_refusal(
                lambda: actions.apply_destination(services, share(no_account), PORTAL_ACTOR)
            ),
            await portal_refusal(lambda: actions.disconnect_destination(services, PORTAL_ACTOR)),
        ]
        await conflicting(layout)
        by_portal.append(
            await portal_refusal(lambda: actions.apply_destination(services, share(CIFS), PORTAL_ACTOR))
        )
        portal_lines = _share_lines(await audit_lines(master))

    codes = [(r.status, r.code, r.field) for r in by_api]
    assert codes == [
        (422, "invalid_request", "server"),
        (422, "invalid_request", "password"),
        (422, "invalid_request", "username"),
        (422, "invalid_request", "(document)"),
        (404, "share_not_configured", None),
        (409, "mount_conflict", None),
    ]
    # The portal's forms build the share before calling (the same 422s), so it never sends a non-JSON body.
    # Each master has a folder of its own: the messages name it.
    by_portal = [r._replace(message=r.message.replace("/portal/", "/api/")) for r in by_portal]
    assert by_portal == [by_api[0], by_api[1], by_api[2], by_api[4], by_api[5]]
    assert all(PASSWORD not in r.message and "lines" not in r.message for r in by_api)
    assert portal_lines == api_lines
    assert [(line[1], line[4]) for line in api_lines] == [
        ("backup.destination.disconnect", "refused"),
        ("backup.destination.apply", "refused"),
    ]


async def test_apply_and_disconnect_need_the_signed_in_administrator(tmp_path: Path) -> None:
    async with share_master(tmp_path) as (master, layout):
        share = BackupShare.from_user_input(CIFS)
        refused = [
            await portal_refusal(lambda: actions.apply_destination(master.services, share, "")),
            await portal_refusal(lambda: actions.disconnect_destination(master.services, "")),
        ]
        assert (await master.anonymous.put(DESTINATION, json=CIFS)).status_code == 401
        assert (await master.anonymous.post(f"{DESTINATION}/test", json=CIFS)).status_code == 401
        assert not layout.backup_state.exists()
    assert [(r.status, r.code) for r in refused] == [(401, "unauthorized"), (401, "unauthorized")]


async def test_the_password_is_sealed_at_rest_and_a_tampered_record_is_refused(tmp_path: Path) -> None:
    async with share_master(tmp_path) as (master, _):
        await ok(master.admin.put(DESTINATION, json=CIFS))
        data = master.services.settings.data_dir
        record, key = data / "backup-share.json", data / "backup-share.key"
        assert stat.S_IMODE(record.stat().st_mode) == 0o600
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        assert len(key.read_bytes()) == 32
        _no_password_in(data)
        assert await actions.share_password_for_backup(master.services) == PASSWORD
        document = json.loads(record.read_text())
        sealed = document["sealed"]["ciphertext"]
        document["sealed"]["ciphertext"] = ("A" if sealed[0] != "A" else "B") + sealed[1:]
        record.write_text(json.dumps(document))
        refusal = await portal_refusal(lambda: actions.share_password_for_backup(master.services))
    assert (refusal.status, refusal.code) == (500, "storage_error")
    assert PASSWORD not in refusal.message


async def test_a_scheduled_backup_is_skipped_while_the_share_is_not_mounted(tmp_path: Path) -> None:
    async with share_master(tmp_path) as (master, layout):
        services = master.services
        folder = tmp_path / "backups"
        folder.mkdir()
        mountinfo = services.settings.mountinfo_file
        assert (await actions.destination_ready(services, folder)).ready  # no share: the local folder
        await ok(master.admin.put(DESTINATION, json=CIFS))
        skipped = await actions.destination_ready(services, folder)
        mountinfo.write_text(ROOT + f"80 21 0:80 / {folder} rw - cifs //nas.local/backups rw\n")
        mounted = await actions.destination_ready(services, folder / "inside")
        mountinfo.write_text(ROOT)
        layout.socket.unlink()  # the agent can no longer reach hostd: what the master learned stands
        stale = await actions.destination_ready(services, folder)
    assert not skipped.ready
    assert "not on the share" in skipped.reason
    assert (mounted.ready, mounted.fs_type) == (True, "cifs")
    assert not stale.ready


async def test_the_masters_backups_ask_the_destination_and_carry_the_share_password(tmp_path: Path) -> None:
    folder = tmp_path / "backups"
    folder.mkdir()
    async with share_master(tmp_path, backup_dir=folder) as (master, _layout):
        services = master.services
        await ok(master.admin.put(DESTINATION, json=CIFS))
        # The master wrote the day's backup when it started, before there was a share: without it the
        # day's backup is due again. The share is configured but the folder is on the local disk: it waits.
        for early in folder.iterdir():
            early.unlink()
        assert await services.backups.run_scheduled() is None
        skipped = services.backups.state.last_failure
        services.settings.mountinfo_file.write_text(
            ROOT + f"80 21 0:80 / {folder} rw - cifs //nas.local/backups rw\n"
        )
        written = await services.backups.run_scheduled()
        encrypted = await services.backups.back_up_now("a long enough passphrase")
    assert skipped is not None
    assert "skipped" in skipped.reason
    assert "not on the share" in skipped.reason
    assert written is not None
    backup = parse_backup((folder / written.name).read_bytes())
    assert backup.document.secrets is None
    opened = open_secrets(parse_backup((folder / encrypted.name).read_bytes()), "a long enough passphrase")
    assert opened.share_password == PASSWORD


async def test_the_status_says_why_when_the_node_has_no_backup_share(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        status = await ok(master.admin.get(DESTINATION))
        ready = await actions.destination_ready(master.services, tmp_path)
    assert status.get("available", False) is False
    assert "host.backup-mount" in status["reason"]
    assert ready.ready  # no share was ever configured


async def test_the_destination_card_applies_and_disconnects_through_the_rooms_actions(tmp_path: Path) -> None:
    async with share_master(tmp_path) as (master, layout), portal_user(master) as user:

        @ui.page("/destination-card")
        def card() -> None:
            render_backup_destination(master.services)

        await user.open("/destination-card")
        await user.should_see("No backup share", retries=100)
        user.find(marker="share-server").type("nas,uid=0")
        user.find(marker="share-share").type("backups")
        user.find(marker="share-username").type("backup")
        user.find(marker="share-password").type(PASSWORD)
        user.find(marker="share-apply").click()
        await user.should_see("server: must be a host name", retries=100)
        assert not layout.backup_state.exists()
        user.find(marker="share-server").clear().type("nas.local")
        user.find(marker="share-apply").click()
        await user.should_see("Applied", retries=200)
        assert layout.backup_state.exists()
        assert await actions.share_password_for_backup(master.services) == PASSWORD
        user.find(marker="share-disconnect").click()
        await user.should_see("Disconnected", retries=200)
        lines = _share_lines(await audit_lines(master))
    assert not layout.backup_state.exists()
    assert [(line[0], line[1], line[4]) for line in lines] == [
        (PORTAL_ACTOR, "backup.destination.apply", "ok"),
        (PORTAL_ACTOR, "backup.destination.disconnect", "ok"),
    ]
