"""A real hostd process on a real unix socket, with every path under a temporary folder.

systemctl and nvidia-smi are the stand-ins beside this module (fake_systemctl.py, fake_nvidia_smi.py),
fed from JSON fixtures the test writes; their argv logs show what hostd ran. The file-mode and
ownership checks are real: the tests run as root, so a file chowned to ``nobody`` or made
group-writable is refused exactly as on a node.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
from tests._support.polling import until
from tests._support.processes import stop_gently

SUPPORT = Path(__file__).parent
FAKE_SYSTEMCTL = SUPPORT / "fake_systemctl.py"
FAKE_NVIDIA_SMI = SUPPORT / "fake_nvidia_smi.py"
FAKE_MOUNT = SUPPORT / "fake_mount.py"
FAKE_UMOUNT = SUPPORT / "fake_umount.py"
BACKUP_UID = 1654
"""The backup account the tests give hostd (the issue's number; hostd's default is the image's 10001)."""
CONTAINER_ID = "4f" * 32
ROOT_MOUNT = "21 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"


# issue 31 item 13: each of these was whitelisted and started, enabled or stopped before.
ROOT_LEVEL_UNITS: Final = [
    "debug-shell",
    "emergency",
    "rescue",
    "getty@tty1",
    "serial-getty@ttyS0",
    "console-getty",
    "container-getty@0",
    "autovt@tty2",
    "modprobe@dummy",
    "modprobe@.service",
    "kexec",
    "halt",
    "poweroff",
    "reboot",
    "nftables",
    "iptables",
    "ip6tables",
    "netfilter-persistent",
    "firewalld",
    "networking",
    "mirbad-agent",
    "mirbad-hostd",
    "mirbad-master",
    "ssh",
    "sshd",
    "dropbear",
    "xrdp",
    "x11vnc",
    "tailscaled",
    "cockpit",
    "openvpn@client",
    "wg-quick@wg0",
]


def unit(name: str, **values: Any) -> dict[str, Any]:
    """A stand-in unit: loaded, active, enabled, with a unit file, unless ``values`` say otherwise."""
    base: dict[str, Any] = {
        "unit": name,
        "load": "loaded",
        "active": "active",
        "sub": "running",
        "description": f"{name.removesuffix('.service')} daemon",
        "file_state": "enabled",
        "preset": "enabled",
        "fragment": f"/lib/systemd/system/{name}",
        "memory": 10 * 1024 * 1024,
        "cgroup": f"/system.slice/{name}",
        "active_enter": 1764500000,
    }
    return base | values


@dataclass
class HostdLayout:
    """Every file of one hostd: settings, seed, deny file, state, socket, stand-in fixtures and logs."""

    root: Path
    socket_dir: Path
    units: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    gpu_apps: list[dict[str, Any]] = field(default_factory=list)

    @property
    def socket(self) -> Path:
        return self.socket_dir / "run" / "hostd.sock"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def whitelist(self) -> Path:
        return self.state_dir / "whitelist.json"

    @property
    def seed(self) -> Path:
        return self.root / "etc" / "hostd.json"

    @property
    def deny_file(self) -> Path:
        return self.root / "etc" / "hostd-deny.json"

    @property
    def proc_root(self) -> Path:
        return self.root / "proc"

    @property
    def systemctl_state(self) -> Path:
        return self.root / "systemctl-state.json"

    @property
    def systemctl_log(self) -> Path:
        return self.root / "systemctl-argv.jsonl"

    @property
    def gpu_state(self) -> Path:
        return self.root / "nvidia-smi-state.json"

    @property
    def gpu_log(self) -> Path:
        return self.root / "nvidia-smi-argv.jsonl"

    @property
    def unit_dir(self) -> Path:
        return self.root / "etc" / "systemd" / "system"

    @property
    def backup_target(self) -> Path:
        return self.root / "srv" / "backups"

    @property
    def probe_root(self) -> Path:
        # Below /tmp and traversable: the probe writes as the backup account, which cannot enter
        # pytest's 0700 folders.
        return self.socket_dir / "probe"

    @property
    def mountinfo(self) -> Path:
        return self.proc_root / "self" / "mountinfo"

    @property
    def mount_state(self) -> Path:
        return self.root / "mount-state.json"

    @property
    def mount_log(self) -> Path:
        return self.root / "mount-argv.jsonl"

    @property
    def backup_state(self) -> Path:
        return self.state_dir / "backup-mount.json"

    @property
    def backup_credentials(self) -> Path:
        return self.state_dir / "backup-share.credentials"

    @property
    def settings_file(self) -> Path:
        return self.root / "hostd-settings.json"

    @property
    def group(self) -> str:
        return grp.getgrgid(os.getegid()).gr_name

    def write_seed(self, services: list[dict[str, Any]], discover_users: list[str] | None = None) -> None:
        document: dict[str, Any] = {"services": services}
        if discover_users is not None:
            document["discoverUsers"] = discover_users
        self.seed.parent.mkdir(parents=True, exist_ok=True)
        self.seed.write_text(json.dumps(document))

    def write_fixtures(
        self,
        *,
        failing: tuple[str, ...] = (),
        hanging: tuple[str, ...] = (),
        gpu_exit: int = 0,
        settings: dict[str, Any] | None = None,
    ) -> None:
        fixture = {"managers": self.units, "failing": list(failing), "hanging": list(hanging)}
        self.systemctl_state.write_text(json.dumps(fixture))
        self.gpu_state.write_text(json.dumps({"apps": self.gpu_apps, "exit": gpu_exit}))
        values = {
            "socket_path": str(self.socket),
            "socket_group": self.group,
            "state_dir": str(self.state_dir),
            "config_file": str(self.seed),
            "deny_file": str(self.deny_file),
            "systemctl": str(FAKE_SYSTEMCTL),
            "nvidia_smi": str(FAKE_NVIDIA_SMI),
            "proc_root": str(self.proc_root),
            "show_batch": 2,  # small, so batching is exercised with a handful of units
            "require_root_owner": os.geteuid() == 0,
            "backup_target": str(self.backup_target),
            "unit_dir": str(self.unit_dir),
            "mount": str(FAKE_MOUNT),
            "umount": str(FAKE_UMOUNT),
            "probe_root": str(self.probe_root),
            "backup_uid": BACKUP_UID,
            "backup_gid": BACKUP_UID,
        } | (settings or {})
        for folder in (self.unit_dir, self.backup_target, self.mountinfo.parent):
            folder.mkdir(parents=True, exist_ok=True)
        self.probe_root.mkdir(exist_ok=True)
        os.chmod(self.socket_dir, 0o711)
        os.chmod(self.probe_root, 0o711)
        if not self.mountinfo.exists():
            self.mountinfo.write_text(ROOT_MOUNT)
        self.settings_file.write_text(json.dumps(values))

    def write_cgroup(self, pid: int, text: str) -> None:
        folder = self.proc_root / str(pid)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cgroup").write_text(text)

    def write_mount_fixture(
        self, mount: dict[str, Any] | None = None, umount: dict[str, Any] | None = None
    ) -> None:
        self.mount_state.write_text(json.dumps({"mount": mount or {}, "umount": umount or {}}))

    def mount_calls(self) -> list[list[str]]:
        if not self.mount_log.exists():
            return []
        return [json.loads(line) for line in self.mount_log.read_text().splitlines()]

    def systemctl_calls(self) -> list[list[str]]:
        if not self.systemctl_log.exists():
            return []
        return [json.loads(line) for line in self.systemctl_log.read_text().splitlines()]

    def actions_run(self) -> list[list[str]]:
        """The argv of every systemctl action (not the listings and shows)."""
        verbs = {"start", "stop", "restart", "enable", "disable"}
        return [argv for argv in self.systemctl_calls() if verbs & set(argv)]

    def environment(self) -> dict[str, str]:
        return os.environ | {
            "MIRBAD_FAKE_SYSTEMCTL_STATE": str(self.systemctl_state),
            "MIRBAD_FAKE_SYSTEMCTL_LOG": str(self.systemctl_log),
            "MIRBAD_FAKE_NVIDIA_SMI_STATE": str(self.gpu_state),
            "MIRBAD_FAKE_NVIDIA_SMI_LOG": str(self.gpu_log),
            "MIRBAD_FAKE_UNIT_DIR": str(self.unit_dir),
            "MIRBAD_FAKE_MOUNTINFO": str(self.mountinfo),
            "MIRBAD_FAKE_MOUNT_STATE": str(self.mount_state),
            "MIRBAD_FAKE_MOUNT_LOG": str(self.mount_log),
        }

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "mirbad_hostd",
            "--config",
            str(self.settings_file),
            "--log-level",
            "debug",
        ]


@contextlib.contextmanager
def hostd_layout(tmp_path: Path) -> Iterator[HostdLayout]:
    """A layout under ``tmp_path``; the socket in a short folder of its own (sun_path holds 108 bytes)."""
    socket_dir = Path(tempfile.mkdtemp(prefix="hostd-", dir="/tmp"))
    try:
        yield HostdLayout(root=tmp_path, socket_dir=socket_dir)
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)


@dataclass
class RunningHostd:
    """A hostd process and a client on its socket."""

    process: subprocess.Popen[str]
    client: httpx.Client
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextlib.contextmanager
def running_hostd(layout: HostdLayout) -> Iterator[RunningHostd]:
    """Start hostd on ``layout`` and wait until its socket answers; stop it (SIGTERM) afterwards."""
    log_path = layout.root / "hostd.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            layout.command(), env=layout.environment(), stdout=log, stderr=subprocess.STDOUT, text=True
        )
    client = httpx.Client(
        transport=httpx.HTTPTransport(uds=str(layout.socket)), base_url="http://hostd", timeout=30
    )
    try:
        until(
            lambda: process.poll() is not None or _answers(layout.socket),
            lambda: f"hostd did not come up:\n{log_path.read_text()}",
            timeout_s=30,
        )
        assert process.poll() is None, f"hostd exited with {process.returncode}:\n{log_path.read_text()}"
        yield RunningHostd(process, client, log_path)
    finally:
        client.close()
        stop_gently(process, grace_s=15, kill_wait_s=5)


def refused_start(layout: HostdLayout) -> tuple[int, str]:
    """Run hostd expecting it to refuse to start: its exit status and what it printed."""
    result = subprocess.run(
        layout.command(), env=layout.environment(), capture_output=True, text=True, timeout=60, check=False
    )
    return result.returncode, result.stdout + result.stderr


def _answers(path: Path) -> bool:
    # A raw connect, closed every time: httpx's transport leaks the socket of a refused connect.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(2)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True
