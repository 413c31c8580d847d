"""The rule before a scheduled backup: a configured share but a backup folder on no network file system."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from mirbad_master.backup_share._destination import backup_folder_readiness
from mirbad_master.backup_share.actions import DestinationStatus
from mirbad_master.backup_share.panels import destination_text, share_form_body
from mirbad_protocol.hostd import BackupMountStatus
from mirbad_protocol.support import NETWORK_FS_TYPES, escape_mountinfo

ROOT = "21 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"


def _mountinfo(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mountinfo"
    path.write_text(text)
    return path


def test_without_a_share_the_local_folder_is_the_destination(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-mountinfo"
    assert backup_folder_readiness(tmp_path, share_configured=False, mountinfo=missing).ready


def test_with_a_share_the_folder_must_be_on_it(tmp_path: Path) -> None:
    folder = tmp_path / "backups"
    folder.mkdir()
    local = backup_folder_readiness(folder, share_configured=True, mountinfo=_mountinfo(tmp_path, ROOT))
    assert not local.ready
    assert local.fs_type == "ext4"
    assert str(folder) in local.reason
    share = f"50 21 0:50 / {escape_mountinfo(str(folder))} rw - nfs4 nas:/export rw\n"
    mounted = backup_folder_readiness(
        folder, share_configured=True, mountinfo=_mountinfo(tmp_path, ROOT + share)
    )
    assert (mounted.ready, mounted.fs_type) == (True, "nfs4")


def test_an_unreadable_mountinfo_skips_rather_than_guesses(tmp_path: Path) -> None:
    verdict = backup_folder_readiness(tmp_path, share_configured=True, mountinfo=tmp_path / "gone")
    assert not verdict.ready
    assert "cannot read" in verdict.reason


def test_a_symbolic_link_is_judged_by_where_it_leads(tmp_path: Path) -> None:
    real = tmp_path / "share"
    real.mkdir()
    link = tmp_path / "backups"
    link.symlink_to(real)
    share = f"50 21 0:50 / {escape_mountinfo(str(real))} rw - cifs //nas/b rw\n"
    assert backup_folder_readiness(
        link, share_configured=True, mountinfo=_mountinfo(tmp_path, ROOT + share)
    ).ready


@given(fs_type=st.sampled_from(sorted(NETWORK_FS_TYPES | {"ext4", "xfs", "tmpfs", "overlay", "fuse.sshfs"})))
def test_only_a_network_file_system_is_ready(fs_type: str) -> None:
    with tempfile.TemporaryDirectory() as raw:
        folder = Path(raw)
        text = ROOT + f"50 21 0:50 / {escape_mountinfo(str(folder))} rw - {fs_type} src rw\n"
        verdict = backup_folder_readiness(folder, share_configured=True, mountinfo=_mountinfo(folder, text))
    assert verdict.ready is (fs_type in NETWORK_FS_TYPES)


def test_the_status_line_and_the_forms_body() -> None:
    target = "/srv/mirbad/backups"
    away = DestinationStatus(node_id="local", reason="no hostd")
    assert destination_text(away) == "Backup share unavailable: no hostd"
    none = DestinationStatus(
        node_id="local", available=True, mount=BackupMountStatus(target=target, unit="u")
    )
    assert "No backup share" in destination_text(none)
    mounted = BackupMountStatus(
        target=target,
        unit="u",
        configured=True,
        mounted=True,
        network=True,
        fs_type="cifs",
        source="//nas/b",
        free_bytes=2 * 1024**3,
    )
    line = destination_text(DestinationStatus(node_id="local", available=True, mount=mounted))
    assert line == "Backups go to //nas/b (cifs) at /srv/mirbad/backups, 2.0 GiB free"
    form = {
        "kind": "nfs",
        "server": " nas ",
        "share": "/export",
        "username": "x",
        "password": "y",
        "domain": "",
    }
    assert share_form_body(form) == {"kind": "nfs", "server": "nas", "share": "/export"}
    cifs = form | {"kind": "cifs", "share": "b", "password": " keep spaces "}
    assert share_form_body(cifs)["password"] == " keep spaces "
