"""The hard deny list: what it matches, and a property that nothing a caller sends can shrink it."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mirbad_hostd import (
    BUILT_IN_DENY_PATTERNS,
    DenyList,
    GpuProcesses,
    HostServices,
    Manager,
    Seed,
    Systemctl,
    WhitelistStore,
    create_app,
    template_of,
)
from mirbad_hostd.exceptions import UnitDeniedError
from mirbad_protocol.hostd import HOSTD_ACTIONS

DENIED_EXAMPLES = [
    "ssh",
    "sshd.service",
    "SSH.SERVICE",
    "systemd-logind",
    "dbus-broker.service",
    "docker.service",
    "containerd",
    "networkmanager.service",
    "networkd-dispatcher",
    "systemd-resolved",
    "wpa_supplicant",
    "polkit",
    "getty@tty1.service",
    "serial-getty@ttyS0",
    "nvidia-persistenced",
    "nvidia-fabricmanager",
    "nvidia-kernel-driver-x",
    "udev",
    "cron",
    "rsyslog",
    "snapd.socket-x",
    "apparmor",
    "ufw",
    "chronyd",
    "auditd",
    "user@1000.service",
    "mirbad-hostd",
    "gdm3",
    "display-manager",
    "accounts-daemon",
    "unattended-upgrades",
    "multipathd",
    "lvm2-monitor",
    # issue 31 item 13: remote access, console and rescue shells, modules and power, firewalls.
    "dropbear",
    "telnetd",
    "openbsd-inetd",
    "rsh.socket-x",
    "rlogin",
    "xrdp-sesman",
    "x11vnc",
    "cockpit",
    "webmin",
    "teamviewerd",
    "anydesk",
    "rustdesk",
    "tailscaled",
    "zerotier-one",
    "openvpn@client",
    "wg-quick@wg0",
    "cloudflared",
    "ngrok-agent",
    "autossh-tunnel",
    "debug-shell.service",
    "emergency",
    "rescue.service",
    "container-getty@1",
    "autovt@tty2",
    "modprobe@anything.service",
    "kmod-static-nodes",
    "kexec",
    "halt",
    "poweroff.service",
    "reboot",
    "nftables.service",
    "iptables",
    "ip6tables",
    "netfilter-persistent",
    "firewalld",
    "networking.service",
    "mirbad-agent.service",
    "mirbad-master",
]


def test_every_built_in_pattern_has_a_denied_example() -> None:
    deny = DenyList()
    matched = {deny.match(name) for name in DENIED_EXAMPLES}
    assert set(BUILT_IN_DENY_PATTERNS) - matched <= {
        "sshd*",
        "systemd-resolved*",
    }  # shadowed by ssh*, systemd-*
    assert None not in matched


@pytest.mark.parametrize(
    ("unit", "template"),
    [
        ("worker@1.service", "worker@.service"),
        ("worker@a.b.service", "worker@.service"),
        ("worker@1", "worker@.service"),
        ("worker@.service", None),
        ("worker.service", None),
    ],
)
def test_template_of_names_the_template_an_instance_comes_from(unit: str, template: str | None) -> None:
    assert template_of(unit) == template


@pytest.mark.parametrize(
    "name", ["smartd", "nginx.service", "ollama", "syncthing", "mysshtool", "my-docker-ui"]
)
def test_ordinary_services_are_not_denied(name: str) -> None:
    assert DenyList().match(name) is None


def test_matching_ignores_case_and_tries_a_bare_name_with_service() -> None:
    deny = DenyList(["exact.service"])
    assert deny.match("EXACT") == "exact.service"
    assert deny.match("Exact.Service") == "exact.service"
    assert DenyList().match("NetworkManager-wait-online.service") == "NetworkManager*"


def test_the_deny_file_can_only_add() -> None:
    deny = DenyList(["nginx*", "ssh*"])
    assert deny.patterns == (*BUILT_IN_DENY_PATTERNS, "nginx*")


# ---------------------------------------------------------------- the property


class RecordingSystemctl(Systemctl):
    """systemctl as a hand-written fake below the deny check: every unit is loaded; argv is recorded."""

    def __init__(self, deny: DenyList) -> None:
        super().__init__("systemctl", deny, query_timeout_s=5, action_timeout_s=5)
        self.calls: list[list[str]] = []

    async def _run(self, argv: list[str], timeout_s: float) -> str:
        self.calls.append(argv)
        if "show" in argv:
            units = argv[argv.index("--") + 1 :]
            return "\n\n".join(
                f"Id={u}\nLoadState=loaded\nActiveState=active\nFragmentPath=/lib/{u}" for u in units
            )
        if "list-units" in argv or "list-unit-files" in argv:
            return "[]"
        return ""


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
    max_leaves=8,
)
_names = st.sampled_from(DENIED_EXAMPLES) | st.text(max_size=40)
_keys = st.sampled_from(
    [
        "unit",
        "scope",
        "user",
        "displayName",
        "protected",
        "confirm",
        "patterns",
        "denyPatterns",
        "deny",
        "name",
    ]
)
_bodies = st.dictionaries(_keys, _names | _json, max_size=6) | _json
_requests = st.lists(
    st.tuples(
        st.sampled_from(["add", "patch", "delete", "act"]), _names, _bodies, st.sampled_from(HOSTD_ACTIONS)
    ),
    min_size=1,
    max_size=6,
)


async def _send(client: httpx.AsyncClient, kind: str, name: str, body: Any, action: str) -> httpx.Response:
    segment = quote(name, safe="")
    if kind == "add":
        return await client.post("/whitelist", content=json.dumps(body))
    if kind == "patch":
        return await client.patch(f"/whitelist/{segment}", content=json.dumps(body))
    if kind == "delete":
        return await client.delete(f"/whitelist/{segment}")
    return await client.post(f"/services/{segment}/{action}", params={"confirm": name})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_requests)
def test_nothing_a_caller_sends_shrinks_the_deny_list(requests: list[tuple[str, str, Any, str]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        anyio.run(_check_requests, Path(folder), requests)


async def _check_requests(folder: Path, requests: list[tuple[str, str, Any, str]]) -> None:
    deny = DenyList()
    store = WhitelistStore.open(folder / "state" / "whitelist.json", Seed(), deny, require_root_owner=False)
    systemctl = RecordingSystemctl(deny)
    gpus = GpuProcesses("/nonexistent/nvidia-smi", folder, timeout_s=1)
    services = HostServices(store, deny, systemctl, gpus, ["alice"], show_batch=10)
    transport = httpx.ASGITransport(app=create_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="http://hostd") as client:
        for kind, name, body, action in requests:
            response = await _send(client, kind, name, body, action)
            assert response.status_code < 500, response.text
            if kind == "act" and deny.match(name) is not None:
                assert response.status_code == 403
                assert response.json()["error"]["code"] == "denied"
    assert deny.patterns[: len(BUILT_IN_DENY_PATTERNS)] == BUILT_IN_DENY_PATTERNS
    assert deny.patterns == BUILT_IN_DENY_PATTERNS
    assert all(deny.match(entry.unit) is None and deny.match(entry.name) is None for entry in store.entries())
    stored = json.loads((folder / "state" / "whitelist.json").read_text())
    assert all(deny.match(entry["unit"]) is None for entry in stored["services"])
    acted = [argv[-1] for argv in systemctl.calls if "--no-block" in argv]
    assert all(deny.match(unit) is None for unit in acted)


def test_systemctl_checks_the_deny_list_below_the_api() -> None:
    deny = DenyList()
    systemctl = RecordingSystemctl(deny)

    async def act() -> None:
        await systemctl.act(Manager(), "sshd.service", "stop")

    with pytest.raises(UnitDeniedError, match="ssh"):
        anyio.run(act)
    assert systemctl.calls == []
