"""deploy/agent/install-linux.sh run for real, in a throwaway root, enrolling against a real master.

The installer writes every file under ``--root``; ``systemd-sysusers`` (real, with ``--root``) makes
the user there. Only systemctl is a stand-in, since systemd is not PID 1 here: it records its argv.
The happy path enrolls against ``mirbad up`` on loopback; the expired token needs the enroll
listener's clock, so that case runs against the master's enroll app (:func:`enroll_master`).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from tests._support.asgi_server import free_port
from tests._support.enroll_master import enroll_master
from tests._support.mirbad_up import WAIT_S, Admin, Up
from tests._support.polling import until

from mirbad_agent import load_settings
from mirbad_protocol.pki import JoinToken, TlsCredentials, certificate_identity, spki_pin

pytestmark = [
    pytest.mark.deploy,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a systemd installer"),
    pytest.mark.timeout(180),
]

INSTALLER = Path(__file__).parents[2] / "deploy" / "agent" / "install-linux.sh"
AGENT_BIN = Path(sys.executable).parent / "mirbad-agent"
RUN_TIMEOUT_S = 120
# Records its argv; fails while the file MIRBAD_TEST_SYSTEMCTL_FAILS names exists (a step after enrollment).
STAND_IN = (
    '#!/bin/sh\necho "$*" >>"$MIRBAD_TEST_SYSTEMCTL_LOG"\n'
    '[ ! -e "$MIRBAD_TEST_SYSTEMCTL_FAILS" ] || { echo "systemctl: injected failure" >&2; exit 1; }\n'
)
START = ["daemon-reload", "enable mirbad-agent.service", "restart mirbad-agent.service"]


@dataclass
class Host:
    """A throwaway root and the stand-in systemctl's record."""

    root: Path
    env: dict[str, str]
    log: Path

    def install(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = ["bash", str(INSTALLER), "--root", str(self.root), *args]
        return subprocess.run(
            command, env=self.env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
        )

    def systemctl_calls(self) -> list[str]:
        calls = self.log.read_text().splitlines() if self.log.exists() else []
        self.log.unlink(missing_ok=True)
        return calls

    def files(self) -> list[str]:
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if not p.is_dir())

    def ids(self) -> tuple[int, int]:
        for line in (self.root / "etc" / "passwd").read_text().splitlines():
            fields = line.split(":")
            if fields[0] == "mirbad-agent":
                return int(fields[2]), int(fields[3])
        raise AssertionError("no mirbad-agent in the root's /etc/passwd")


def make_host(folder: Path, *, docker_group: bool, empty: bool = False) -> Host:
    """A throwaway root with an ``etc/`` (``empty``: a bare folder, as a new staging root is)."""
    root = folder / "root"
    root.mkdir(parents=True)
    if not empty:
        (root / "etc").mkdir()
    if docker_group:
        (root / "etc" / "group").write_text("docker:x:111:\n")
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    systemctl = bin_dir / "systemctl"
    systemctl.write_text(STAND_IN)
    systemctl.chmod(0o755)
    log = folder / "systemctl.log"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "MIRBAD_TEST_SYSTEMCTL_LOG": str(log)}
    env["MIRBAD_TEST_SYSTEMCTL_FAILS"] = str(folder / "systemctl.fails")
    return Host(root, env, log)


@pytest.fixture
def master(tmp_path: Path) -> Iterator[tuple[Admin, Up]]:
    """``mirbad up`` on loopback (its local agent without Docker) and the admin API signed in."""
    config = tmp_path / "agent-extra.json"
    config.write_text('{"docker": {"enabled": false}}')
    env = {**os.environ, "MIRBAD_HEALTH_POLL_S": "0.5"}  # the node poll that finds the installed agent
    up = Up(tmp_path / "data", free_port(), free_port(), config, env)
    try:
        admin = Admin(up.base_url, up.first_run_password(up.start()))
        try:
            yield admin, up
        finally:
            admin.close()
    finally:
        up.kill_everything()


@contextlib.contextmanager
def serving_agent(host: Host, port: int, log: Path) -> Iterator[None]:
    """``mirbad-agent serve`` as the unit's ExecStart runs it, on a loopback port, until the block ends."""
    argv = [str(AGENT_BIN), "serve", "--config", str(host.root / "etc" / "mirbad" / "agent.toml")]
    argv += ["--state-dir", str(host.root / "var" / "lib" / "mirbad-agent")]
    argv += ["--model-root", str(host.root / "srv" / "models"), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--no-docker", "--no-process-host"]
    with log.open("w") as output:
        agent = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, env=host.env)
    try:
        yield
    finally:
        agent.terminate()
        try:
            agent.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait(WAIT_S)


def issue(admin: Admin, node: str, agent_url: str) -> tuple[str, str]:
    """A join token from the admin API: the ``--master`` and ``--token`` of its install command."""
    body = {"nodeName": node, "agentUrl": agent_url}
    issued = admin.ok("POST", "/api/nodes/enrollment-tokens", json=body)
    argv: Sequence[str] = shlex.split(issued["installCommand"])
    return argv[argv.index("--master") + 1], argv[argv.index("--token") + 1]


def test_the_installer_enrolls_installs_reruns_and_uninstalls(
    tmp_path: Path, master: tuple[Admin, Up]
) -> None:
    admin, _ = master
    host = make_host(tmp_path / "node", docker_group=True)
    agent_port = free_port()
    url, token = issue(admin, "gpu-7", f"https://127.0.0.1:{agent_port}")

    first = host.install(
        *("--master", url, "--token", token, "--agent-bin", str(AGENT_BIN), "--model-root", "/srv/models"),
        *("--san", "127.0.0.1"),
    )
    assert first.returncode == 0, first.stderr
    assert "enrolled as node gpu-7" in first.stdout
    assert host.systemctl_calls() == START

    state = host.root / "var" / "lib" / "mirbad-agent"
    uid, gid = host.ids()
    key = state / "agent.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert (key.stat().st_uid, key.stat().st_gid) == (uid, gid)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    identity = TlsCredentials.load(state, "agent")
    assert certificate_identity(identity.certificate).common_name == "gpu-7"
    assert spki_pin(identity.ca_certificates[0]) == JoinToken.parse(token).pin
    assert "docker:x:111:mirbad-agent" in (host.root / "etc" / "group").read_text()
    assert (host.root / "srv" / "models").stat().st_uid == uid

    # The settings file is one the real agent accepts, naming the enrolled node and its model root.
    settings = load_settings(host.root / "etc" / "mirbad" / "agent.toml")
    assert (settings.node_name, settings.model_roots) == ("gpu-7", [Path("/srv/models")])
    assert settings.state_dir == Path("/var/lib/mirbad-agent")
    unit = (host.root / "etc" / "systemd" / "system" / "mirbad-agent.service").read_text()
    assert f"ExecStart={AGENT_BIN} serve --config=/etc/mirbad/agent.toml" in unit
    assert "KillMode=process" in unit
    dropin = host.root / "etc" / "systemd" / "system" / "mirbad-agent.service.d" / "model-roots.conf"
    assert dropin.read_text() == "[Service]\nReadWritePaths=-/srv/models\n"
    # The unit as installed, with its drop-in beside it (verify reads that folder's drop-ins too).
    verify = subprocess.run(
        ["systemd-analyze", "verify", str(dropin.parent.parent / "mirbad-agent.service")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (verify.returncode, verify.stdout + verify.stderr) == (0, "")

    # Idempotent: a rerun needs no token, keeps the identity and the settings, restarts the agent.
    files = host.files()
    key_bytes = key.read_bytes()
    again = host.install("--agent-bin", str(AGENT_BIN))
    assert again.returncode == 0, again.stderr
    assert "keeping" in again.stdout
    assert host.files() == files
    assert key.read_bytes() == key_bytes
    assert host.systemctl_calls() == START

    # The agent serves with what the installer wrote, and the master, which registered the node at
    # enrollment, reaches it over mutual TLS (only the paths under the throwaway root are moved).
    with serving_agent(host, agent_port, tmp_path / "agent.log"):
        until(
            lambda: admin.ok("GET", "/api/nodes/gpu-7")["reachable"],
            lambda: f"the master never reached the installed agent:\n{(tmp_path / 'agent.log').read_text()}",
            timeout_s=WAIT_S,
        )

    # The token was spent: on another machine it exits 2 with the master's message, installing nothing.
    other = make_host(tmp_path / "other", docker_group=True)
    reused = other.install("--master", url, "--token", token, "--agent-bin", str(AGENT_BIN))
    assert reused.returncode == 2
    assert "already used" in reused.stderr
    assert "nothing was installed" in reused.stderr
    assert other.files() == ["etc/group"]
    assert other.systemctl_calls() == []

    # Uninstall keeps the identity (a reinstall needs no token); --purge removes it.
    kept = host.install("--uninstall")
    assert kept.returncode == 0, kept.stderr
    assert host.systemctl_calls() == ["disable --now mirbad-agent.service", "daemon-reload"]
    assert not (host.root / "etc" / "systemd" / "system" / "mirbad-agent.service").exists()
    assert not dropin.parent.exists()
    assert key.exists()
    purged = host.install("--uninstall", "--purge")
    assert purged.returncode == 0, purged.stderr
    assert not state.exists()
    assert not (host.root / "etc" / "mirbad" / "agent.toml").exists()


@pytest.mark.anyio
async def test_an_expired_token_exits_2_with_the_masters_message_and_installs_nothing(
    tmp_path: Path,
) -> None:
    host = make_host(tmp_path / "node", docker_group=False)
    async with enroll_master(tmp_path) as listener:
        token = await listener.tokens.issue_join_token("gpu-8", ttl=timedelta(minutes=1))
        await listener.clock.advance(timedelta(minutes=2))
        run = partial(host.install, "--master", listener.url, "--token", token, "--agent-bin", str(AGENT_BIN))
        with anyio.fail_after(RUN_TIMEOUT_S):
            result = await anyio.to_thread.run_sync(run)

    assert result.returncode == 2
    assert "expired" in result.stderr
    assert "nothing was installed" in result.stderr
    assert host.files() == []
    assert host.systemctl_calls() == []


@pytest.mark.anyio
async def test_without_docker_the_user_joins_no_group_and_the_default_root_needs_no_dropin(
    tmp_path: Path,
) -> None:
    host = make_host(tmp_path / "node", docker_group=False)
    async with enroll_master(tmp_path) as listener:
        token = await listener.tokens.issue_join_token("cpu-1")
        run = partial(host.install, "--master", listener.url, "--token", token, "--agent-bin", str(AGENT_BIN))
        with anyio.fail_after(RUN_TIMEOUT_S):
            result = await anyio.to_thread.run_sync(run)

    assert result.returncode == 0, result.stderr
    assert "no docker group" in result.stdout
    sysusers = (host.root / "usr" / "lib" / "sysusers.d" / "mirbad-agent.conf").read_text()
    assert "docker" not in sysusers
    settings = load_settings(host.root / "etc" / "mirbad" / "agent.toml")
    assert settings.model_roots == [Path("/var/lib/mirbad-agent/models")]
    dropins = host.root / "etc" / "systemd" / "system" / "mirbad-agent.service.d"
    assert not (dropins / "model-roots.conf").exists()
    assert host.systemctl_calls() == START


@pytest.mark.anyio
async def test_a_failure_after_enrollment_keeps_the_identity_and_a_rerun_finishes(tmp_path: Path) -> None:
    # An empty --root (no etc/: systemd-sysusers needs one) and a systemctl that fails once.
    host = make_host(tmp_path / "node", docker_group=False, empty=True)
    fails = anyio.Path(host.env["MIRBAD_TEST_SYSTEMCTL_FAILS"])
    await fails.touch()
    async with enroll_master(tmp_path) as listener:
        token = await listener.tokens.issue_join_token("cpu-2")
        run = partial(host.install, "--master", listener.url, "--token", token, "--agent-bin", str(AGENT_BIN))
        with anyio.fail_after(RUN_TIMEOUT_S):
            failed = await anyio.to_thread.run_sync(run)

        assert failed.returncode != 0
        assert "enrolled as node cpu-2" in failed.stdout
        assert "rerun without --token" in failed.stderr
        state = host.root / "var" / "lib" / "mirbad-agent"
        identity = TlsCredentials.load(state, "agent")
        assert certificate_identity(identity.certificate).common_name == "cpu-2"
        assert stat.S_IMODE((state / "agent.key").stat().st_mode) == 0o600
        assert host.systemctl_calls() == ["daemon-reload"]

        # The token is spent; the rerun needs none and finishes with the identity it kept.
        await fails.unlink()
        rerun = partial(host.install, "--agent-bin", str(AGENT_BIN))
        with anyio.fail_after(RUN_TIMEOUT_S):
            finished = await anyio.to_thread.run_sync(rerun)

    assert finished.returncode == 0, finished.stderr
    assert host.systemctl_calls() == START
    assert TlsCredentials.load(state, "agent").certificate == identity.certificate
    settings = load_settings(host.root / "etc" / "mirbad" / "agent.toml")
    assert settings.node_name == "cpu-2"
    uid, gid = host.ids()
    assert ((state / "agent.key").stat().st_uid, (state / "agent.key").stat().st_gid) == (uid, gid)


def test_the_installer_is_shellcheck_clean() -> None:
    result = subprocess.run(
        ["shellcheck", str(INSTALLER)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout


def test_a_missing_token_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    host = make_host(tmp_path / "node", docker_group=True)
    result = host.install("--master", "https://127.0.0.1:1", "--agent-bin", str(AGENT_BIN))
    assert result.returncode == 2
    assert "--master and --token are required" in result.stderr
    assert host.files() == ["etc/group"]
