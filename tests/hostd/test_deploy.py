"""deploy/hostd/: the unit's hardening, verified by systemd-analyze where the machine has it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import cast

import pytest
from starlette.routing import Route

from mirbad_hostd import BackupMount, HostServices, create_app

DEPLOY = Path(__file__).parents[2] / "deploy" / "hostd"
UNIT = DEPLOY / "mirbad-hostd.service"

HARDENING = [
    "User=root",
    "Group=docker",
    "UMask=0117",
    "RuntimeDirectory=mirbad-hostd",
    "RuntimeDirectoryMode=0750",
    "RuntimeDirectoryPreserve=yes",
    "StateDirectory=mirbad-hostd",
    "StateDirectoryMode=0700",
    "NoNewPrivileges=yes",
    "ProtectSystem=strict",
    "ProtectHome=read-only",
    "PrivateTmp=yes",
    "RestrictAddressFamilies=AF_UNIX AF_NETLINK AF_INET AF_INET6",
    "ReadWritePaths=/etc/systemd/system",
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectKernelLogs=yes",
    "ProtectControlGroups=yes",
    "ProtectClock=yes",
    "MemoryMax=256M",
]


@pytest.mark.parametrize("line", HARDENING)
def test_the_unit_carries_the_hardening_of_the_spec(line: str) -> None:
    assert line in UNIT.read_text().splitlines()


def test_the_unit_grants_what_the_backup_mount_needs_only_with_its_routes() -> None:
    # issue 31 item 18 kept the inet families and the unit folder's write path out until hostd mounted
    # the backup share; issue 25 item 7 adds the routes that do, and with them exactly those grants.
    app = create_app(cast("HostServices", object()), cast("BackupMount", object()))
    routes = {route.path for route in app.routes if isinstance(route, Route)}
    assert {"/backup-mount", "/backup-mount/test"} <= routes
    lines = UNIT.read_text().splitlines()
    families = next(line for line in lines if line.startswith("RestrictAddressFamilies="))
    assert families.split("=", 1)[1].split() == ["AF_UNIX", "AF_NETLINK", "AF_INET", "AF_INET6"]
    assert [line for line in lines if line.startswith("ReadWritePaths=")] == [
        "ReadWritePaths=/etc/systemd/system"
    ]


def test_tmpfiles_creates_the_socket_folder_at_boot() -> None:
    lines = [
        line for line in (DEPLOY / "mirbad-hostd.tmpfiles.conf").read_text().splitlines() if line[:1] == "d"
    ]
    assert lines == ["d /run/mirbad-hostd 0750 root docker -"]


@pytest.mark.deploy
def test_systemd_analyze_verifies_the_unit_without_a_warning(tmp_path: Path) -> None:
    # verify checks that ExecStart's binary exists: point it at one that does, as the installer does.
    text = UNIT.read_text().replace("ExecStart=/usr/local/bin/mirbad-hostd", "ExecStart=/bin/true")
    unit = tmp_path / "mirbad-hostd.service"
    unit.write_text(text)
    result = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    # An unknown or misspelt directive is only a warning (status 0): refuse any output at all.
    assert result.stderr.strip() == ""
    assert result.stdout.strip() == ""


def test_the_installer_is_valid_shell() -> None:
    result = subprocess.run(
        ["sh", "-n", str(DEPLOY / "install-hostd.sh")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.deploy
def test_the_installer_is_shellcheck_clean() -> None:
    result = subprocess.run(
        ["shellcheck", str(DEPLOY / "install-hostd.sh")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout
