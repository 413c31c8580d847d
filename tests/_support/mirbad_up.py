"""``mirbad up`` as a child process, for the tests that run the real command end to end.

:class:`Up` starts it and reads its banner; :func:`mirbad_up` prepares a data directory (the tiny GGUF
under its model root, the agent's extra settings beside it) and kills everything it started when the
test ends, models included.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests._support.asgi_server import free_port
from tests._support.polling import until
from tests._support.processes import kill_recorded_processes
from tests._support.tiny_gguf import TINY_MODEL_PATH, write_tiny_gguf

WAIT_S = 60.0
"""The bound of every wait on ``mirbad up`` and its children."""


@dataclass
class Up:
    """``mirbad up`` as a child process, its banner read line by line."""

    data_dir: Path
    port: int
    enroll_port: int
    agent_config: Path
    env: dict[str, str]
    process: subprocess.Popen[str] | None = None
    reader: threading.Thread | None = None
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    seen: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, parent: list[str] | None = None, args: list[str] | None = None) -> list[str]:
        """Run ``mirbad up`` (under ``parent``, a command that runs the rest, when given); return its banner.

        ``args`` are more flags for ``mirbad up`` (``--agent-port``, say).

        It runs in a process group of its own, as a terminal's foreground job does, so
        :meth:`interrupt_group` can do what Ctrl-C does.
        """
        command = [
            *(parent or []),
            *_mirbad(),
            "up",
            "--data-dir",
            str(self.data_dir),
            "--port",
            str(self.port),
            "--enroll-port",
            str(self.enroll_port),
            "--agent-config",
            str(self.agent_config),
            *(args or []),
        ]
        with (self.data_dir.parent / "master.log").open("a") as log:
            self.process = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                text=True,
                env=self.env,
                start_new_session=True,
            )
        self.lines = queue.Queue()
        self.reader = threading.Thread(target=self._read, args=(self.process, self.lines), daemon=True)
        self.reader.start()
        banner = [self.next_line()]
        while "Ctrl-C" not in banner[-1]:
            banner.append(self.next_line())
        return banner

    def first_run_password(self, banner: list[str]) -> str:
        """The first run's password: stdout is a pipe, so it is in the owner-only file the banner names."""
        password_file = self.data_dir / "initial-admin-password"
        assert any(f"Admin password:       in {password_file}" in line for line in banner)
        assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
        password = password_file.read_text().strip()
        assert password not in "".join(banner)
        return password

    def next_line(self, timeout_s: float = 90.0) -> str:
        try:
            line = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            pytest.fail(f"mirbad up printed nothing more; its log:\n{self.log()}")
        if line == "":
            pytest.fail(f"mirbad up ended early (exit {self.process and self.process.poll()}):\n{self.log()}")
        self.seen.append(line)
        return line

    def interrupt(self) -> int:
        """Ctrl-C, as a terminal sends it; returns the exit status."""
        assert self.process is not None
        self.process.send_signal(signal.SIGINT)
        try:
            status = self.process.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"mirbad up did not stop after SIGINT:\n{self.log()}")
        self._close()
        return status

    def interrupt_group(self) -> int:
        """Ctrl-C exactly as a terminal sends it: SIGINT to the whole foreground process group."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            status = self.process.wait(WAIT_S * 2)
        except subprocess.TimeoutExpired:
            pytest.fail(f"mirbad up did not stop after Ctrl-C to its group:\n{self.log()}")
        self._close()
        return status

    def log(self) -> str:
        return (self.data_dir.parent / "master.log").read_text(errors="replace")[-6000:]

    def kill_everything(self) -> None:
        """Kill ``mirbad up``, its agent and every model process the agent recorded (test teardown)."""
        self.kill()
        _kill_agent(self.data_dir)
        kill_recorded_processes(self.data_dir / "agent" / "processes.json")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            # The whole group: a forwarding parent and mirbad up under it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(WAIT_S)
        self._close()

    def _close(self) -> None:
        # The reader ends at the pipe's end of file; only then is the pipe closed.
        if self.reader is not None:
            self.reader.join(WAIT_S)
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()

    @staticmethod
    def _read(process: subprocess.Popen[str], lines: queue.Queue[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put("")


def _mirbad() -> list[str]:
    script = Path(sys.executable).parent / "mirbad"
    return [str(script)] if script.exists() else [sys.executable, "-m", "mirbad_master.cli"]


def _kill_agent(data_dir: Path) -> None:
    with contextlib.suppress(OSError, ValueError):
        pid = int((data_dir / "agent" / "agent.pid").read_text())
        if str(data_dir).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.killpg(pid, signal.SIGKILL)


def port_block() -> int:
    """The first of 40 loopback ports from one the OS just handed out (the drivers skip busy ones)."""
    return min(free_port(), 65_000)


@contextlib.contextmanager
def mirbad_up(
    tmp_path: Path,
    agent_config: Mapping[str, Any],
    *,
    llama_server: Path,
    env: Mapping[str, str] | None = None,
) -> Iterator[Up]:
    """An :class:`Up` over ``tmp_path / "data"``, not started yet; everything it started dies at the end.

    Args:
        tmp_path: the test's folder; the data directory, the agent's settings and the log go there.
        agent_config: the agent's extra settings (``--agent-config``).
        llama_server: the llama-server ``mirbad up`` catalogues (``MIRBAD_LLAMA_SERVER``).
        env: more environment for ``mirbad up``, over the fast health and telemetry cadences set here.
    """
    data_dir = tmp_path / "data"
    write_tiny_gguf(data_dir / "models" / TINY_MODEL_PATH)
    config_path = tmp_path / "agent-extra.json"
    config_path.write_text(json.dumps(agent_config))
    full_env = {
        **os.environ,
        "MIRBAD_HEALTH_POLL_S": "0.3",
        "MIRBAD_TELEMETRY_INTERVAL_S": "1",
        "MIRBAD_LLAMA_SERVER": str(llama_server),
        **(env or {}),
    }
    started = Up(data_dir, free_port(), free_port(), config_path, full_env)
    try:
        yield started
    finally:
        started.kill_everything()


class Admin:
    """The admin API with the administrator password."""

    def __init__(self, base_url: str, password: str) -> None:
        self.http = httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {password}"},
            timeout=WAIT_S,
            trust_env=False,
        )

    def close(self) -> None:
        self.http.close()

    def ok(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.http.request(method, path, **kwargs)
        assert response.is_success, f"{method} {path}: {response.status_code} {response.text}"
        return response.json() if response.content else None

    def view(self, model_id: str) -> dict[str, Any]:
        view: dict[str, Any] = self.ok("GET", f"/api/models/{model_id}")
        return view

    def wait_ready(self, model_id: str, *, after: str | None = None) -> dict[str, Any]:
        """Wait until the model is Ready (in an instance started after ``after``, when given)."""
        seen: list[dict[str, Any]] = []

        def ready() -> bool:
            seen.append(self.view(model_id)["status"])
            status = seen[-1]
            return status["state"] == "Ready" and (after is None or status["startedAt"] != after)

        until(
            ready,
            lambda: f"{model_id} never became Ready: last {seen[-1] if seen else None}",
            timeout_s=WAIT_S,
        )
        return seen[-1]
