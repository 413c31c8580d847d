"""The stack under test: ``mirbad up`` (a real master, its real agent) running the benchmark upstream.

Nothing is faked between the client and the upstream. ``mirbad up`` runs as its own process on a fresh
data directory; it enrolls and starts ``mirbad-agent serve`` as a child, exactly as a fleet of one
does. The upstream is catalogued in the agent's settings as the executable ``bench-upstream 1`` and
registered through ``/api`` as a ``llamacpp`` model, so the agent's process driver launches it with a
per-instance key and its proxy presents that key. Three paths then reach the same upstream process:

* ``direct``: the upstream's loopback port, with the instance key (read from the agent's key file);
* ``agent``: ``https://127.0.0.1:{agent}/agent/v1/proxy/bench/...`` over mutual TLS with the master's
  own client certificate (read from the data directory), as the master sends it;
* ``master+agent``: the master's ``/v1`` (no API key: none is required on a fresh install).

The agent's container driver is switched off: the benchmark must not touch Docker, and the model is
a native process anyway.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx

from mirbad_protocol.pki import TlsCredentials

from ._load import Target

__all__ = ["MODEL_ID", "Stack", "running_stack"]

MODEL_ID: Final = "bench"
"""The upstream's model id and served name."""
_EXECUTABLE: Final = {"name": "bench-upstream", "version": "1"}
_REPO_ROOT: Final = Path(__file__).resolve().parents[2]
_START_TIMEOUT_S: Final = 120.0
_STOP_TIMEOUT_S: Final = 60.0
_POLL_S: Final = 0.2
_ATTEMPTS: Final = 3
_PORT_TAKEN: Final = "address already in use"


@dataclass(frozen=True)
class Stack:
    """A running fleet of one serving the benchmark upstream.

    Attributes:
        startup_s: from launching ``mirbad up`` until its agent was registered and answering.
        pids: ``master``, ``agent`` and ``upstream`` process ids.
        agent_port: the agent's port (connections to it are counted).
        targets: the three paths to the upstream, baseline first.
    """

    data_dir: Path
    startup_s: float
    pids: dict[str, int]
    agent_port: int
    targets: list[Target]
    upstream_port: int
    upstream_key: str


@contextlib.contextmanager
def running_stack(work_dir: Path) -> Iterator[Stack]:
    """Start ``mirbad up`` in ``work_dir`` with the upstream model Ready; stop it all on exit.

    The ports come from the OS but are free again before ``mirbad up`` binds them; if another process
    took one meanwhile (seen once in CI: "address already in use"), the stack is started again on new
    ports and a fresh data directory, up to :data:`_ATTEMPTS` times.

    Raises:
        RuntimeError: a part did not come up in time (the message carries the master's log tail).
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    data_dir = work_dir / "data"
    for attempt in range(1, _ATTEMPTS + 1):
        master, port, startup_s, admin, failure = _launch(work_dir, data_dir)
        try:
            with admin:
                _until(
                    lambda: _agent_answers(admin),  # noqa: B023 (called before the loop moves on)
                    failure,
                    lambda: "the local agent was not registered and reachable",
                )
                startup_s = time.monotonic() - startup_s
                upstream_port = _start_upstream(admin, failure)
                break
        except RuntimeError as error:
            _stop(master, data_dir)
            if _PORT_TAKEN not in str(error).lower() or attempt == _ATTEMPTS:
                raise
            print(f"bench: a port was taken before mirbad bound it; starting again ({error})", flush=True)
            shutil.rmtree(data_dir, ignore_errors=True)
        except BaseException:
            _stop(master, data_dir)
            raise
    try:
        key = (data_dir / "agent" / "keys" / f"{MODEL_ID}.key").read_text().strip()
        yield Stack(
            data_dir=data_dir,
            startup_s=startup_s,
            pids=_pids(master.pid, data_dir),
            agent_port=_agent_port(data_dir),
            targets=_targets(data_dir, port, upstream_port),
            upstream_port=upstream_port,
            upstream_key=key,
        )
    finally:
        _stop(master, data_dir)


def _launch(
    work_dir: Path, data_dir: Path
) -> tuple[subprocess.Popen[bytes], int, float, httpx.Client, _Failure]:
    """Start ``mirbad up`` on fresh ports; the admin client and failure check come with it."""
    (data_dir / "models").mkdir(parents=True, exist_ok=True)
    (data_dir / "models" / "bench.gguf").write_bytes(b"GGUF (not read: the bench upstream ignores it)")
    agent_config = _write_agent_config(work_dir, _write_launcher(work_dir))
    password = _admin_password(data_dir)
    port = _free_port()
    log_path = work_dir / "master.log"
    started = time.monotonic()
    with log_path.open("ab") as log:
        command = [*_mirbad(), "up", "--data-dir", str(data_dir), "--port", str(port)]
        command += ["--enroll-port", str(_free_port()), "--agent-config", str(agent_config)]
        master = subprocess.Popen(
            [*command, "--log-level", "warning"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    admin = httpx.Client(
        base_url=f"http://127.0.0.1:{port}",
        headers={"Authorization": f"Bearer {password}"},
        timeout=30,
        trust_env=False,
    )
    return master, port, started, admin, _Failure(master, log_path)


class _Failure:
    """Raises with the master's log tail; also when the master has exited."""

    def __init__(self, master: subprocess.Popen[bytes], log_path: Path) -> None:
        self._master = master
        self._log_path = log_path

    def check(self) -> None:
        if self._master.poll() is not None:
            self.fail(f"mirbad up exited with status {self._master.returncode}")

    def fail(self, reason: str) -> None:
        tail = self._log_path.read_text(errors="replace").splitlines()[-30:]
        raise RuntimeError(reason + "; the end of its log:\n" + "\n".join(tail))


def _until(check: Callable[[], bool], failure: _Failure, reason: Callable[[], str]) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while not check():
        failure.check()
        if time.monotonic() > deadline:
            failure.fail(f"{reason()} within {_START_TIMEOUT_S:g} s")
        time.sleep(_POLL_S)


def _mirbad() -> list[str]:
    script = Path(sys.executable).parent / "mirbad"
    return [str(script)] if script.exists() else [sys.executable, "-m", "mirbad_master.cli"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _write_launcher(work_dir: Path) -> Path:
    """The upstream as a catalogued executable: a Python script (this interpreter) running our server.

    A script the kernel runs through its ``#!`` line, not a shell wrapper: the driver records the
    process's image at the spawn and later checks it, and a shell that ``exec``s Python changes it.
    """
    path = work_dir / "bench-upstream"
    path.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"sys.path.insert(0, {str(_REPO_ROOT)!r})\n"
        "from bench.router._upstream import main\n"
        "main()\n"
    )
    path.chmod(0o755)
    return path


def _write_agent_config(work_dir: Path, launcher: Path) -> Path:
    digest = hashlib.sha256(launcher.read_bytes()).hexdigest()
    settings = {
        "docker": {"enabled": False},
        "executables": [{**_EXECUTABLE, "path": str(launcher), "sha256": digest}],
    }
    path = work_dir / "agent-extra.json"
    path.write_text(json.dumps(settings, indent=2))
    return path


def _admin_password(data_dir: Path) -> str:
    """A fresh administrator password, made with ``mirbad admin reset-password`` before the start."""
    result = subprocess.run(
        [*_mirbad(), "admin", "reset-password", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=_START_TIMEOUT_S,
        check=True,
    )
    for line in result.stdout.splitlines():
        if line.startswith("new administrator password:"):
            return line.split(":", 1)[1].strip()
    raise RuntimeError(f"mirbad admin reset-password printed no password: {result.stdout!r}")


def _agent_answers(admin: httpx.Client) -> bool:
    try:
        response = admin.get("/api/nodes")
    except httpx.TransportError:
        return False
    return response.status_code == 200 and any(node.get("reachable") for node in response.json())


def _start_upstream(admin: httpx.Client, failure: _Failure) -> int:
    definition = {
        "id": MODEL_ID,
        "servedName": MODEL_ID,
        "runtime": "llamacpp",
        "executable": _EXECUTABLE,
        "modelPath": "bench.gguf",
        "maxModelLen": 256,
        "memoryBudgetGiB": 0.1,
    }
    for method, path, body in (
        ("POST", "/api/models", definition),
        ("POST", f"/api/models/{MODEL_ID}/start", None),
    ):
        response = admin.request(method, path, json=body)
        if not response.is_success:
            failure.fail(f"{method} {path} answered {response.status_code}: {response.text}")
    seen: list[dict[str, Any]] = []

    def ready() -> bool:
        seen.append(admin.get(f"/api/models/{MODEL_ID}").json()["status"])
        return seen[-1].get("state") == "Ready" and seen[-1].get("port") is not None

    _until(ready, failure, lambda: f"the upstream model never became Ready (last status {seen[-1:]})")
    return int(seen[-1]["port"])


def _pids(master: int, data_dir: Path) -> dict[str, int]:
    agent_dir = data_dir / "agent"
    records = json.loads((agent_dir / "processes.json").read_text())["processes"]
    [upstream] = [int(record["pid"]) for record in records if record["modelId"] == MODEL_ID]
    return {"master": master, "agent": int((agent_dir / "agent.pid").read_text()), "upstream": upstream}


def _agent_port(data_dir: Path) -> int:
    return int(json.loads((data_dir / "agent" / "agent.json").read_text())["port"])


def _targets(data_dir: Path, master_port: int, upstream_port: int) -> list[Target]:
    agent_dir = data_dir / "agent"
    key = (agent_dir / "keys" / f"{MODEL_ID}.key").read_text().strip()
    agent_port = _agent_port(data_dir)
    master_tls = TlsCredentials.load(data_dir / "pki", "master").client_context()
    chat = "v1/chat/completions"
    return [
        Target("direct", f"http://127.0.0.1:{upstream_port}/{chat}", {"Authorization": f"Bearer {key}"}),
        Target("agent", f"https://127.0.0.1:{agent_port}/agent/v1/proxy/{MODEL_ID}/{chat}", {}, master_tls),
        Target("master+agent", f"http://127.0.0.1:{master_port}/{chat}"),
    ]


def _stop(master: subprocess.Popen[bytes], data_dir: Path) -> None:
    """Ctrl-C, as an operator stops it (models, then the agent); then kill whatever is left."""
    if master.poll() is None:
        master.send_signal(signal.SIGINT)
        try:
            master.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            master.kill()
            master.wait(_STOP_TIMEOUT_S)
    for pid in _leftovers(data_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _leftovers(data_dir: Path) -> list[int]:
    """The agent and model processes of this data directory that are still running."""
    pids: list[int] = []
    with contextlib.suppress(OSError, ValueError):
        pids.append(int((data_dir / "agent" / "agent.pid").read_text()))
    with contextlib.suppress(OSError, ValueError, KeyError):
        records = json.loads((data_dir / "agent" / "processes.json").read_text())["processes"]
        pids += [int(record["pid"]) for record in records]
    return [pid for pid in pids if _belongs(pid, data_dir)]


def _belongs(pid: int, data_dir: Path) -> bool:
    # Only a process whose command line or working folder names this data directory: pids get reused.
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return str(data_dir).encode() in cmdline or cwd.startswith(str(data_dir))
