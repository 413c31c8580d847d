"""The backup share's pure parts: the rendered unit and credentials, the unit name, the probe."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path, PurePosixPath

import pytest
from syrupy.assertion import SnapshotAssertion
from tests._support.hostd import BACKUP_UID

from mirbad_hostd import (
    MANAGED_MARKER,
    load_settings,
    mount_options,
    mount_source,
    mount_unit_name,
    probe_write_as,
    render_credentials,
    render_mount_unit,
)
from mirbad_hostd.exceptions import HostdStartupError, MountProbeError
from mirbad_protocol.hostd import BackupShare

TARGET = PurePosixPath("/srv/mirbad/backups")
CREDENTIALS = PurePosixPath("/var/lib/mirbad-hostd/backup-share.credentials")
CIFS = BackupShare(
    kind="cifs",
    server="nas.local",
    share="backups/mirbad",
    username="backup",
    password="pa,ss=w%rd 'x'",
    domain="WORKGROUP",
    version="3.1.1",
)
NFS = BackupShare(kind="nfs", server="10.0.0.5", share="/export/backups", version="4.2")


def test_the_cifs_unit_and_credentials(snapshot: SnapshotAssertion) -> None:
    unit = render_mount_unit(CIFS, target=TARGET, credentials=CREDENTIALS, uid=10001, gid=10001)
    assert unit.splitlines()[0] == MANAGED_MARKER
    assert CIFS.password is not None
    assert CIFS.password not in unit
    assert {"unit": unit, "credentials": render_credentials(CIFS)} == snapshot


def test_the_nfs_unit(snapshot: SnapshotAssertion) -> None:
    unit = render_mount_unit(NFS, target=TARGET, credentials=None, uid=10001, gid=10001)
    assert unit.splitlines()[0] == MANAGED_MARKER
    assert "credentials" not in unit
    assert unit == snapshot


def test_source_and_options() -> None:
    assert mount_source(CIFS) == "//nas.local/backups/mirbad"
    assert mount_source(NFS) == "10.0.0.5:/export/backups"
    assert mount_options(CIFS, credentials=CREDENTIALS, uid=1654, gid=1654) == (
        f"rw,nosuid,nodev,noexec,credentials={CREDENTIALS},uid=1654,gid=1654,file_mode=0660,dir_mode=0770,"
        "vers=3.1.1"
    )
    nfs_options = mount_options(NFS, credentials=None, uid=1654, gid=1654)
    assert nfs_options == "rw,nosuid,nodev,noexec,hard,nfsvers=4.2"
    with pytest.raises(ValueError, match="credentials"):
        mount_options(CIFS, credentials=None, uid=1, gid=1)
    with pytest.raises(ValueError, match="cifs"):
        render_credentials(NFS)


@pytest.mark.parametrize(
    ("target", "unit"),
    [
        ("/srv/mirbad/backups", "srv-mirbad-backups.mount"),
        ("/srv/mirbadllm/backups/", "srv-mirbadllm-backups.mount"),
        ("/mnt/nas-backups", "mnt-nas\\x2dbackups.mount"),
        ("/mnt/.hidden/a b", "mnt-\\x2ehidden-a\\x20b.mount"),
    ],
)
def test_the_unit_name_is_systemds_escaped_path(target: str, unit: str) -> None:
    assert mount_unit_name(PurePosixPath(target)) == unit


@pytest.mark.parametrize("target", ["/", "relative/path"])
def test_a_target_must_be_an_absolute_folder(target: str) -> None:
    with pytest.raises(ValueError, match="absolute"):
        mount_unit_name(PurePosixPath(target))


@pytest.fixture
def probe_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.geteuid() != 0:
        pytest.skip("the probe changes its file-system uid, which needs root")
    # Below /tmp and traversable by the account: pytest's own folders are 0700.
    folder = Path(subprocess.run(["mktemp", "-d"], capture_output=True, text=True, check=True).stdout.strip())
    os.chmod(folder, 0o711)
    return folder


def test_the_probe_writes_as_the_account_and_leaves_nothing(probe_folder: Path) -> None:
    share = probe_folder / "share"
    share.mkdir(mode=0o700)
    os.chown(share, BACKUP_UID, BACKUP_UID)
    probe_write_as(share, BACKUP_UID, BACKUP_UID, timeout_s=10)
    assert list(share.iterdir()) == []


def test_root_powers_do_not_mask_a_folder_the_account_cannot_write(probe_folder: Path) -> None:
    share = probe_folder / "share"
    share.mkdir(mode=0o755)  # root's: root could write, the account cannot
    with pytest.raises(MountProbeError, match=f"could not write a file as {BACKUP_UID}:{BACKUP_UID}"):
        probe_write_as(share, BACKUP_UID, BACKUP_UID, timeout_s=10)
    # The caller's thread is still root: it can write where the account could not.
    (share / "root-can").write_text("yes")
    assert threading.current_thread() is threading.main_thread()


def test_a_read_only_share_fails_the_probe(probe_folder: Path) -> None:
    share = probe_folder / "share"
    share.mkdir(mode=0o555)
    os.chown(share, BACKUP_UID, BACKUP_UID)
    with pytest.raises(MountProbeError, match="Permission denied"):
        probe_write_as(share, BACKUP_UID, BACKUP_UID, timeout_s=10)


@pytest.mark.parametrize("target", ["relative/backups", "/"])
def test_the_target_setting_must_be_an_absolute_folder_below_root(target: str) -> None:
    with pytest.raises(HostdStartupError, match="backup_target"):
        load_settings(None, {"backup_target": target})
    assert load_settings(None, {}).backup_target == Path("/srv/mirbad/backups")
