"""hostd's backup share as a real process: the routes over stand-in mount, umount and systemctl.

The kernels here have no cifs or nfs, so mount and umount are stand-ins that record their argv and
make the real probe folder look as the share's root would (tests/_support/fake_mount.py); the probe's
write, read and delete as the backup account happen for real on that folder (the tests run as root).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from tests._support.hostd import BACKUP_UID, ROOT_MOUNT, HostdLayout, running_hostd, unit

from mirbad_hostd import MANAGED_MARKER, mount_unit_name, render_mount_unit
from mirbad_protocol.hostd import BackupShare

PASSWORD = "Tr0ub4dor, =%'\"&3 ünï"
CIFS: dict[str, Any] = {
    "kind": "cifs",
    "server": "nas.local",
    "share": "backups",
    "username": "backup",
    "password": PASSWORD,
    "version": "3.1.1",
}
NFS: dict[str, Any] = {"kind": "nfs", "server": "10.0.0.5", "share": "/export/backups"}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the probe writes as another account: needs root")


def _unit_name(layout: HostdLayout) -> str:
    return mount_unit_name(PurePosixPath(layout.backup_target))


def _unit_file(layout: HostdLayout) -> Path:
    return layout.unit_dir / _unit_name(layout)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _mount_commands(layout: HostdLayout) -> list[list[str]]:
    """systemctl's calls that change something (not the ``show`` of the conflict check)."""
    return [argv for argv in layout.systemctl_calls() if "show" not in argv and "list-units" not in argv]


def _nothing_written(layout: HostdLayout) -> None:
    assert not _unit_file(layout).exists()
    assert not layout.backup_credentials.exists()
    assert not layout.backup_state.exists()
    assert _mount_commands(layout) == []
    assert list(layout.probe_root.iterdir()) == []


def test_apply_probes_writes_the_files_and_mounts_the_unit(layout: HostdLayout) -> None:
    layout.write_mount_fixture()
    unit_name = _unit_name(layout)
    with running_hostd(layout) as hostd:
        before = hostd.client.get("/backup-mount")
        applied = hostd.client.put("/backup-mount", json=CIFS)
        after = hostd.client.get("/backup-mount")
        log = hostd.log()
    assert before.status_code == 200
    assert "configured" not in before.json()  # false: a default, omitted on the wire
    assert "mounted" not in before.json()
    assert applied.status_code == 200, applied.text
    assert applied.json() == after.json()
    status = after.json()
    assert status["target"] == str(layout.backup_target)
    assert status["unit"] == unit_name
    assert status["configured"] is True
    assert status["share"] == {k: v for k, v in CIFS.items() if k != "password"}
    assert (status["mounted"], status["fsType"], status["source"], status["network"]) == (
        True,
        "cifs",
        "//nas.local/backups",
        True,
    )
    assert status["freeBytes"] > 0
    assert status["totalBytes"] >= status["freeBytes"]

    # The probe: mounted into a fresh private folder, then unmounted; the folder is gone.
    (mount, umount) = layout.mount_calls()
    folder = mount[-1]
    assert Path(folder).parent == layout.probe_root
    assert mount[:5] == ["mount", "-n", "-t", "cifs", "-o"]
    assert mount[6:8] == ["--", "//nas.local/backups"]
    options = mount[5].split(",")
    assert f"uid={BACKUP_UID}" in options
    assert f"gid={BACKUP_UID}" in options
    assert any(option.startswith("credentials=") and option.endswith(".credentials") for option in options)
    assert umount == ["umount", "-n", "--", folder]
    assert list(layout.probe_root.iterdir()) == []

    # The files: the unit (0644, the marker first), the credentials (0600), the state without the secret.
    share = BackupShare.model_validate(CIFS)
    expected = render_mount_unit(
        share,
        target=PurePosixPath(layout.backup_target),
        credentials=PurePosixPath(layout.backup_credentials),
        uid=BACKUP_UID,
        gid=BACKUP_UID,
    )
    assert _unit_file(layout).read_text() == expected
    assert _unit_file(layout).read_text().splitlines()[0] == MANAGED_MARKER
    assert _mode(_unit_file(layout)) == 0o644
    assert _mode(layout.backup_credentials) == 0o600
    assert f"password={PASSWORD}\n" in layout.backup_credentials.read_text()
    assert json.loads(layout.backup_state.read_text()) == status["share"]
    assert _mount_commands(layout) == [
        ["--system", "daemon-reload"],
        ["--system", "enable", "--", unit_name],
        ["--system", "restart", "--", unit_name],
    ]
    # The password is nowhere but the credentials file.
    for text in (applied.text, after.text, log, layout.backup_state.read_text(), expected):
        assert PASSWORD not in text
    assert "backup-mount apply source=//nas.local/backups kind=cifs result=ok" in log


def test_an_nfs_share_needs_no_credentials_and_replaces_a_cifs_one(layout: HostdLayout) -> None:
    layout.write_mount_fixture(mount={"owner": [BACKUP_UID, BACKUP_UID], "mode": "0770"})
    with running_hostd(layout) as hostd:
        assert hostd.client.put("/backup-mount", json=CIFS).status_code == 200
        applied = hostd.client.put("/backup-mount", json=NFS)
    assert applied.status_code == 200, applied.text
    assert (applied.json()["fsType"], applied.json()["source"]) == ("nfs", "10.0.0.5:/export/backups")
    assert not layout.backup_credentials.exists()
    assert "Type=nfs" in _unit_file(layout).read_text()
    assert "credentials" not in _unit_file(layout).read_text()
    assert layout.mount_calls()[2][:4] == ["mount", "-n", "-t", "nfs"]


def test_test_probes_the_share_and_writes_nothing(layout: HostdLayout) -> None:
    layout.write_mount_fixture()
    with running_hostd(layout) as hostd:
        response = hostd.client.post("/backup-mount/test", json=CIFS)
    assert response.status_code == 200, response.text
    assert response.json() == {
        "source": "//nas.local/backups",
        "fsType": "cifs",
        "uid": BACKUP_UID,
        "gid": BACKUP_UID,
    }
    assert [call[0] for call in layout.mount_calls()] == ["mount", "umount"]
    _nothing_written(layout)


@pytest.mark.parametrize(
    ("fixture", "reason"),
    [
        # An export whose root the account may not write: root could, the probe (as the account) cannot.
        ({"owner": [0, 0], "mode": "0755"}, f"could not write a file as {BACKUP_UID}:{BACKUP_UID}"),
        ({"owner": [BACKUP_UID, BACKUP_UID], "readonly": True}, "Permission denied"),
        ({"exit": 32, "stderr": "mount.nfs: access denied by server"}, "access denied by server"),
    ],
)
def test_a_share_that_fails_the_probe_is_422_and_nothing_is_written(
    layout: HostdLayout, fixture: dict[str, Any], reason: str
) -> None:
    layout.write_mount_fixture(mount=fixture)
    with running_hostd(layout) as hostd:
        tested = hostd.client.post("/backup-mount/test", json=NFS)
        applied = hostd.client.put("/backup-mount", json=NFS)
        log = hostd.log()
    for refused in (tested, applied):
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["code"] == "mount_failed"
        assert reason in refused.json()["error"]["message"]
    assert "backup-mount probe source=10.0.0.5:/export/backups result=failed" in log
    _nothing_written(layout)


def test_a_mount_error_never_echoes_the_password(layout: HostdLayout) -> None:
    layout.write_mount_fixture(mount={"exit": 32, "stderr": f"mount error(13): bad password {PASSWORD}"})
    with running_hostd(layout) as hostd:
        response = hostd.client.put("/backup-mount", json=CIFS)
        log = hostd.log()
    assert response.status_code == 422
    assert "mount error(13)" in response.json()["error"]["message"]
    assert PASSWORD not in response.text
    assert PASSWORD not in log
    _nothing_written(layout)


def test_a_busy_probe_mount_is_detached_lazily(layout: HostdLayout) -> None:
    layout.write_mount_fixture(umount={"busy": True})
    with running_hostd(layout) as hostd:
        response = hostd.client.post("/backup-mount/test", json=CIFS)
        log = hostd.log()
    assert response.status_code == 200, response.text
    folder = layout.mount_calls()[0][-1]
    assert layout.mount_calls()[1:] == [["umount", "-n", "--", folder], ["umount", "-n", "-l", "--", folder]]
    assert "detaching it lazily" in log
    assert list(layout.probe_root.iterdir()) == []


@pytest.mark.parametrize("conflict", ["unit", "automount", "fstab", "automount-unit", "mount"])
def test_a_foreign_unit_automount_or_mount_at_the_target_is_409(layout: HostdLayout, conflict: str) -> None:
    name = _unit_name(layout)
    automount = name.removesuffix(".mount") + ".automount"
    if conflict == "unit":
        _unit_file(layout).write_text("[Mount]\nWhat=//other/share\n")
    elif conflict == "automount":
        (layout.unit_dir / automount).write_text("[Automount]\n")
    elif conflict == "fstab":
        layout.units["system"].append(unit(name, fragment=f"/run/systemd/generator/{name}"))
    elif conflict == "automount-unit":
        layout.units["system"].append(unit(automount, fragment=f"/lib/systemd/system/{automount}"))
    else:
        layout.mountinfo.write_text(
            f"{ROOT_MOUNT}77 21 0:60 / {layout.backup_target} rw - nfs4 other:/export rw\n"
        )
    layout.write_fixtures()
    layout.write_mount_fixture()
    foreign = _unit_file(layout).read_text() if conflict == "unit" else None
    with running_hostd(layout) as hostd:
        response = hostd.client.put("/backup-mount", json=CIFS)
        removed = hostd.client.delete("/backup-mount")
    assert response.status_code == 409, response.text
    assert response.json()["error"]["code"] == "mount_conflict"
    assert layout.mount_calls() == []
    assert removed.status_code == (409 if conflict == "unit" else 404)
    assert not layout.backup_state.exists()
    if foreign is not None:
        assert _unit_file(layout).read_text() == foreign  # never replaced, never removed
    assert _mount_commands(layout) == []


def test_a_failed_restart_puts_the_previous_share_back(layout: HostdLayout) -> None:
    layout.write_mount_fixture()
    name = _unit_name(layout)
    with running_hostd(layout) as hostd:
        assert hostd.client.put("/backup-mount", json=CIFS).status_code == 200
        unit_before = _unit_file(layout).read_bytes()
        credentials_before = layout.backup_credentials.read_bytes()
        state_before = layout.backup_state.read_bytes()
        state = json.loads(layout.systemctl_state.read_text())
        state["failing_actions"] = [f"restart:{name}"]
        layout.systemctl_state.write_text(json.dumps(state))
        calls_before = len(layout.systemctl_calls())
        response = hostd.client.put(
            "/backup-mount", json=CIFS | {"server": "other-nas", "password": "new-pass"}
        )
        log = hostd.log()
    assert response.status_code == 502, response.text
    assert response.json()["error"]["code"] == "action_failed"
    assert "the previous configuration is back" in response.json()["error"]["message"]
    assert _unit_file(layout).read_bytes() == unit_before
    assert layout.backup_credentials.read_bytes() == credentials_before
    assert layout.backup_state.read_bytes() == state_before
    assert _mode(layout.backup_credentials) == 0o600
    calls = [c for c in layout.systemctl_calls()[calls_before:] if "show" not in c]
    assert calls[-2:] == [["--system", "daemon-reload"], ["--system", "restart", "--", name]]
    assert "new-pass" not in response.text + log


def test_a_failed_first_apply_leaves_nothing_behind(layout: HostdLayout) -> None:
    name = _unit_name(layout)
    layout.write_mount_fixture()
    state = json.loads(layout.systemctl_state.read_text())
    state["failing_actions"] = [f"restart:{name}"]
    layout.systemctl_state.write_text(json.dumps(state))
    with running_hostd(layout) as hostd:
        response = hostd.client.put("/backup-mount", json=CIFS)
    assert response.status_code == 502, response.text
    assert not _unit_file(layout).exists()
    assert not layout.backup_credentials.exists()
    assert not layout.backup_state.exists()
    assert ["--system", "disable", "--", name] in layout.systemctl_calls()


def test_delete_unmounts_and_removes_everything_and_warns_about_the_owner(layout: HostdLayout) -> None:
    layout.write_mount_fixture()
    name = _unit_name(layout)
    with running_hostd(layout) as hostd:
        assert hostd.client.put("/backup-mount", json=CIFS).status_code == 200
        calls_before = len(layout.systemctl_calls())
        removed = hostd.client.delete("/backup-mount")
        status = hostd.client.get("/backup-mount").json()
        again = hostd.client.delete("/backup-mount")
        os.chown(layout.backup_target, BACKUP_UID, BACKUP_UID)
        assert hostd.client.put("/backup-mount", json=CIFS).status_code == 200
        quiet = hostd.client.delete("/backup-mount")
        log = hostd.log()
    assert removed.status_code == 200, removed.text
    warning = f"{layout.backup_target} is owned by 0:0, not {BACKUP_UID}:{BACKUP_UID}"
    assert removed.json()["unit"] == name
    assert warning in removed.json()["warnings"][0]
    assert warning in log
    assert [c for c in layout.systemctl_calls()[calls_before:] if "show" not in c][:3] == [
        ["--system", "disable", "--now", "--", name],
        ["--system", "daemon-reload"],
        ["--system", "reset-failed", "--", name],
    ]
    assert (status.get("configured"), status.get("mounted")) == (None, None)  # defaults are omitted
    assert again.status_code == 404
    assert again.json()["error"]["code"] == "not_found"
    assert quiet.status_code == 200
    assert "warnings" not in quiet.json()
    assert not _unit_file(layout).exists()
    assert not layout.backup_credentials.exists()
    assert not layout.backup_state.exists()


def test_delete_of_a_busy_share_is_422_and_removes_nothing(layout: HostdLayout) -> None:
    layout.write_mount_fixture()
    name = _unit_name(layout)
    with running_hostd(layout) as hostd:
        assert hostd.client.put("/backup-mount", json=CIFS).status_code == 200
        state = json.loads(layout.systemctl_state.read_text())
        state["busy"] = [name]
        layout.systemctl_state.write_text(json.dumps(state))
        calls_before = len(layout.systemctl_calls())
        response = hostd.client.delete("/backup-mount")
        status = hostd.client.get("/backup-mount").json()
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "mount_busy"
    assert "nothing was removed" in response.json()["error"]["message"]
    assert _unit_file(layout).exists()
    assert layout.backup_credentials.exists()
    assert layout.backup_state.exists()
    assert (status["configured"], status["mounted"]) == (True, True)
    calls = [c for c in layout.systemctl_calls()[calls_before:] if "show" not in c]
    # The refused stop had already disabled the unit: it is enabled again, as it was.
    assert calls == [["--system", "disable", "--now", "--", name], ["--system", "enable", "--", name]]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (CIFS | {"server": "nas,uid=0"}, "server"),
        (CIFS | {"share": "backups/../../etc"}, "share"),
        (CIFS | {"username": "a=b"}, "username"),
        (CIFS | {"password": "two\nlines"}, "password"),
        (CIFS | {"domain": "%i"}, "domain"),
        (CIFS | {"target": "/etc"}, "target"),
        (NFS | {"share": '/export"x'}, "share"),
    ],
)
def test_bad_share_fields_are_422_naming_the_field(
    layout: HostdLayout, body: dict[str, Any], field: str
) -> None:
    layout.write_mount_fixture()
    with running_hostd(layout) as hostd:
        tested = hostd.client.post("/backup-mount/test", json=body)
        applied = hostd.client.put("/backup-mount", json=body)
    for refused in (tested, applied):
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["code"] == "invalid_request"
        assert refused.json()["error"]["field"] == field
    assert layout.mount_calls() == []
    _nothing_written(layout)
