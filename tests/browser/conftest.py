"""The browser tier: ``mirbad up`` as a subprocess, and Debian's chromium driven by Playwright.

One master serves the whole session (starting it enrolls its agent, which takes a few seconds); each
test gets a fresh page in one browser context whose cookies are cleared, so every test signs in. The
master's data directory holds the tiny GGUF model under its model root, and its administrator
password is made before it starts (``mirbad up`` then shows none).

A real hostd (tests/_support/hostd.py: a real process on a real unix socket, the stand-in systemctl
behind it) runs for the session too, and ``mirbad up`` points its local agent at that socket the way
an operator points it at another one: ``hostd_socket`` in the agent settings file it is given
(``MIRBAD_AGENT_CONFIG``). The Services page thus shows the units of :data:`HOSTD_UNITS`. Backups go
to a folder of the session's own (``MIRBAD_BACKUP_DIR``), :attr:`RunningMaster.backup_dir`.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import httpx
import pytest
from tests._support.asgi_server import free_port
from tests._support.hostd import HostdLayout, hostd_layout, running_hostd, unit
from tests._support.processes import stop_gently
from tests._support.real_parts import CHROMIUM, CHROMIUM_ARGS, llama_server_path
from tests._support.tiny_gguf import TINY_MODEL_PATH, write_tiny_gguf

from mirbad_master._admin_auth import AdminAuth

if TYPE_CHECKING:
    # Imported lazily below: without Playwright this tier is skipped (or failed) by its marker.
    from playwright.sync_api import BrowserContext, Page

STARTUP_TIMEOUT_S: Final = 60.0
STOP_TIMEOUT_S: Final = 30.0
PAGE_TIMEOUT_MS: Final = 15_000
READY_TIMEOUT_MS: Final = 60_000


BENCHMARK_SIZES: Final = (
    '{"levels": [1, 2], "runs": 2, "maxTokens": 8, "prefillTokens": 96, "questionTokens": 4}'
)
"""The classic suite's sizes in this tier (``MIRBAD_BENCHMARK_SIZES``)."""
PRESET_SIZES: Final = (
    '{"levels": [1], "maxSeqsCap": 1, "repetitions": 1, "shortOutputTokens": [8],'
    ' "coldPromptTokens": [1000000], "sharedPrefixTokens": 32, "sharedPrefixQuestions": 2,'
    ' "questionTokens": 4, "toolCallTokens": 8}'
)
"""The workload presets' sizes in this tier (``MIRBAD_PRESET_SIZES``)."""


HOSTD_UNITS: Final[list[dict[str, Any]]] = [
    unit("smartd.service", description="S.M.A.R.T. disk monitor", memory=6 * 1024**2),
    unit("nginx.service", description="A web server", file_state="disabled", memory=48 * 1024**2),
    unit("ssh.service", description="OpenBSD Secure Shell server", memory=9 * 1024**2),
    unit("cups.service", description="CUPS scheduler", memory=900 * 1024**2),
    unit("backup-agent.service", description="Nightly backups", active="inactive", sub="dead"),
]
"""The units the stand-in systemctl has: two whitelisted (smartd protected), ssh denied, two to add."""
HOSTD_SEED: Final[list[dict[str, Any]]] = [
    {
        "name": "smartd",
        "unit": "smartd.service",
        "displayName": "SMART disks",
        "protected": True,
        "risks": ["Disk failures go unnoticed while it is stopped."],
    },
    {"name": "nginx", "unit": "nginx.service", "displayName": "nginx"},
]


@dataclass(frozen=True)
class RunningMaster:
    """A ``mirbad up`` serving the portal, its local agent talking to the session's hostd."""

    url: str
    password: str
    data_dir: Path
    log: Path
    hostd: HostdLayout | None = None
    """The session's hostd (None for a module's own master without one)."""
    backup_dir: Path | None = None
    """Where its backups are written (None: backups off)."""

    def api(self) -> httpx.Client:
        """A client of ``/api`` signed in with the administrator password."""
        return httpx.Client(
            base_url=f"{self.url}/api", headers={"Authorization": f"Bearer {self.password}"}, timeout=30
        )


def _mirbad() -> list[str]:
    beside = Path(sys.executable).parent / "mirbad"
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "mirbad_master.cli"]


def _wait_until_serving(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"mirbad up exited with {process.returncode}:\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    pytest.fail(f"mirbad up did not serve within {STARTUP_TIMEOUT_S} s:\n{log.read_text()[-4000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    # SIGTERM: the master stops its models, then its agent; nothing is left running.
    stop_gently(process, grace_s=STOP_TIMEOUT_S, kill_wait_s=STOP_TIMEOUT_S)


@contextlib.contextmanager
def _session_hostd(root: Path) -> Iterator[HostdLayout]:
    """hostd over the stand-in systemctl with :data:`HOSTD_UNITS`, seeded with :data:`HOSTD_SEED`."""
    with hostd_layout(root / "hostd") as layout:
        layout.root.mkdir(parents=True, exist_ok=True)
        layout.units = {"system": [dict(u) for u in HOSTD_UNITS]}
        layout.write_seed(HOSTD_SEED)
        layout.write_fixtures()
        with running_hostd(layout):
            yield layout


@pytest.fixture(scope="session")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningMaster]:
    root = tmp_path_factory.mktemp("portal")
    data_dir = root / "data"
    data_dir.mkdir(mode=0o700)
    password = AdminAuth(data_dir).reset_password()
    write_tiny_gguf(data_dir / "models" / TINY_MODEL_PATH)
    with _session_hostd(root) as hostd:
        yield from _serving_master(root, data_dir, password, hostd)


def _serving_master(root: Path, data_dir: Path, password: str, hostd: HostdLayout) -> Iterator[RunningMaster]:
    # The local agent's settings file, laid over what mirbad up writes: only where hostd listens.
    agent_config = root / "agent-extra.json"
    agent_config.write_text(json.dumps({"hostd_socket": str(hostd.socket)}))
    backups = root / "backups"  # the Backup & restore page's folder (it is never created for us)
    backups.mkdir()
    port = free_port()
    env = {
        **os.environ,
        "MIRBAD_DATA_DIR": str(data_dir),
        "MIRBAD_AGENT_CONFIG": str(agent_config),
        "MIRBAD_PORT": str(port),
        "MIRBAD_ENROLL_PORT": str(free_port()),
        "MIRBAD_HEALTH_POLL_S": "0.5",
        "MIRBAD_TELEMETRY_INTERVAL_S": "1",
        "MIRBAD_STARTUP_TIMEOUT_S": "60",
        # Benchmarks at small sizes on the tiny model (test_benchmarks.py); the product runs the spec's.
        "MIRBAD_BENCHMARK_SIZES": BENCHMARK_SIZES,
        "MIRBAD_PRESET_SIZES": PRESET_SIZES,
        "MIRBAD_TUNING_REPETITIONS": "1,2",  # test_tuning.py: one search, two confirmation repetitions
        "MIRBAD_BACKUP_DIR": str(backups),
    }
    server = llama_server_path()
    if server is not None:
        env["MIRBAD_LLAMA_SERVER"] = str(server)
    # NiceGUI changes its behaviour when it believes it runs under pytest; the master is no test.
    env.pop("PYTEST_CURRENT_TEST", None)
    log = root / "mirbad-up.log"
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as output:
        process = subprocess.Popen([*_mirbad(), "up"], env=env, stdout=output, stderr=subprocess.STDOUT)
    try:
        _wait_until_serving(process, url, log)
        yield RunningMaster(url, password, data_dir, log, hostd, backups)
    finally:
        _stop(process)


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    # Module scope, not session: Playwright's sync API marks the thread as running an event loop
    # until it stops, and the anyio tests that share this xdist worker afterwards cannot start one.
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            args=list(CHROMIUM_ARGS),
            headless=True,
            viewport={"width": 1280, "height": 800},
        )
        context.set_default_timeout(PAGE_TIMEOUT_MS)
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(browser_context: BrowserContext) -> Iterator[Page]:
    browser_context.clear_cookies()
    page = browser_context.new_page()
    try:
        yield page
    finally:
        page.close()
