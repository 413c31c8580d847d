"""A dev fleet: a master and N agents on this machine, each with its own state folder and ports.

    uv run python tools/dev_fleet.py --agents 3          # Ctrl-C stops everything it started

``mirbad up`` runs the master and its own agent (node ``local``); every further agent (``agent-2``,
``agent-3``, …) enrolls with a join token from the admin API, exactly as a node on another machine
does, and serves on a loopback port of its own with the real llama-server runtime. Everything lives
under one data folder (``--data-dir``, default ``~/.local/share/mirbad-dev-fleet``): ``master/`` (the
master's data directory, ``master/agent`` its agent), ``agent-N/`` (each further agent's state) and
``models/`` (the model root every agent shares, with the tiny demo GGUF written into it). Ports follow
from ``--port`` (P): the portal P, the enroll listener P+1, agent N on P+10+N, and its models on 20
ports from P+100+20·N, so a second run finds its nodes where the first enrolled them.

Ctrl-C (or SIGTERM) stops the models on the further agents through the admin API, then those agents,
then ``mirbad up`` (which stops the models of ``local`` and its agent): nothing is left running. The
children run in sessions of their own, so the terminal's Ctrl-C reaches this command alone and the
order holds. :class:`DevFleet` is the same fleet for code (tests use it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx

from mirbad_master.demo import TINY_MODEL_PATH, write_tiny_gguf

WAIT_S: Final = 90.0
"""The bound of every wait on a child (a start, a node becoming reachable, a stop)."""
_POLL_S: Final = 0.2
_PASSWORD_FILE: Final = "dev-fleet-password"  # noqa: S105 - a file name


@dataclass(frozen=True)
class FleetLayout:
    """Where each part of the fleet keeps its state and which ports it takes.

    Attributes:
        data_dir: the one folder everything lives under.
        port: the portal's port; every other port follows from it.
        agents: how many agents, the master's own included (at least 1).
        llama_server: the llama-server binary the agents catalogue (None: found as ``mirbad up`` finds it).
    """

    data_dir: Path
    port: int = 8080
    agents: int = 3
    llama_server: Path | None = None

    @property
    def master_dir(self) -> Path:
        """``mirbad up``'s data directory."""
        return self.data_dir / "master"

    @property
    def model_root(self) -> Path:
        """The model folder every agent reads."""
        return self.data_dir / "models"

    @property
    def enroll_port(self) -> int:
        """The master's enroll listener."""
        return self.port + 1

    @property
    def url(self) -> str:
        """The portal, ``/api`` and ``/v1``."""
        return f"http://127.0.0.1:{self.port}"

    def node_names(self) -> list[str]:
        """The nodes' names: ``local`` and ``agent-2`` … ``agent-N``."""
        return ["local", *(f"agent-{index}" for index in range(2, self.agents + 1))]

    def agent_dir(self, index: int) -> Path:
        """Agent ``index``'s state folder (index 2 and up; 1 is ``mirbad up``'s own)."""
        return self.data_dir / f"agent-{index}"

    def agent_port(self, index: int) -> int:
        """Agent ``index``'s port (the master's own agent takes a free one)."""
        return self.port + 10 + index

    def process_ports(self, index: int) -> tuple[int, int]:
        """The first and last port of agent ``index``'s models."""
        first = self.port + 100 + 20 * index
        return first, first + 19


@dataclass
class DevFleet:
    """The fleet of :class:`FleetLayout` as child processes: :meth:`start`, then :meth:`stop`.

    Args:
        layout: where and on which ports.
        env: the children's environment (default: this process's).
        say: where progress lines go.
        stopping: set to give up a start under way (Ctrl-C while the fleet comes up).
    """

    layout: FleetLayout
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    say: Any = print
    stopping: threading.Event = field(default_factory=threading.Event)
    master: subprocess.Popen[bytes] | None = None
    agents: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    password: str = ""
    commands: dict[str, list[str]] = field(default_factory=dict)

    def start(self) -> None:
        """Start ``mirbad up``, enroll and start every further agent, and wait until every node answers.

        Raises:
            RuntimeError: a child exited or did not become ready within :data:`WAIT_S` (its log named).
        """
        layout = self.layout
        layout.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not (layout.model_root / TINY_MODEL_PATH).is_file():
            write_tiny_gguf(layout.model_root / TINY_MODEL_PATH)
        self.password = self._password()
        self.master = self._spawn("master", self._up_command())
        self._until(self._master_answers, "the master did not answer", self.master, "master")
        with self._admin() as admin:
            for index in range(2, layout.agents + 1):
                self._start_agent(admin, index)
            self._until(lambda: self._all_reachable(admin), "not every node became reachable", None, "master")

    def stop(self) -> None:
        """Stop the further agents' models, those agents, then ``mirbad up``; nothing is left running."""
        if self.master is not None and self.master.poll() is None:
            with contextlib.suppress(httpx.HTTPError), self._admin() as admin:
                self._stop_remote_models(admin)
        for name, process in self.agents.items():
            _stop(process, signal.SIGTERM, name, self.say)
        if self.master is not None:
            _stop(self.master, signal.SIGINT, "master", self.say)
        self._kill_left_models()

    def send_signal(self, name: str, signum: int) -> None:
        """Send ``signum`` to one child (``master`` or an agent's name) alone, not to its session.

        The fault injection of the chaos suite: a SIGKILL leaves the models (and ``mirbad up``'s own
        agent) running as a crash would, a SIGSTOP freezes the child until SIGCONT.
        """
        process = self.master if name == "master" else self.agents[name]
        assert process is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signum)

    def respawn(self, name: str, wrap: Sequence[str] = ()) -> None:
        """Start a child that exited again with its last command, and wait until every node answers.

        Args:
            name: ``master`` or an agent's name.
            wrap: a command the child's runs under from now on (its later starts keep it).

        Raises:
            RuntimeError: it is still running, or the fleet did not come back within :data:`WAIT_S`.
        """
        process = self.master if name == "master" else self.agents[name]
        if process is not None and process.poll() is None:
            raise RuntimeError(f"dev fleet: {name} is still running")
        if process is not None:
            process.wait(WAIT_S)  # reaped, so no zombie is left behind
        child = self._spawn(name, [*wrap, *self.commands[name]])
        if name == "master":
            self.master = child
        else:
            self.agents[name] = child
        self._until(self._master_answers, "the master did not answer", child, name)
        with self._admin() as admin:
            self._until(lambda: self._all_reachable(admin), "not every node became reachable", None, name)

    def banner(self) -> str:
        """How to reach the fleet."""
        nodes = ", ".join(self.layout.node_names())
        password_file = self._password_file()
        return "\n".join(
            [
                f"Mirbad dev fleet: {self.layout.url} (portal, /api, /v1)",
                f"  nodes:    {nodes}",
                f"  password: in {password_file}",
                f"  models:   {self.layout.model_root} (the tiny demo model is {TINY_MODEL_PATH})",
                f"  logs:     {self.layout.data_dir}/*.log",
                "Ctrl-C stops the models, the agents and the master.",
            ]
        )

    # ------------------------------------------------------------------ start

    def _password(self) -> str:
        # The first run's password is in mirbad up's file; later runs (or one whose file was removed)
        # set a password of their own first, so the fleet can always use the admin API.
        first_run = self.layout.master_dir / "initial-admin-password"
        if first_run.is_file() and not self._password_file().is_file():
            return first_run.read_text().splitlines()[0]
        path = self._password_file()
        if not path.is_file():
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as file:
                file.write(secrets.token_urlsafe(18) + "\n")
            command = [*_mirbad(), "admin", "reset-password", "--data-dir", str(self.layout.master_dir)]
            subprocess.run([*command, "--password-file", str(path)], check=True, env=self.env, timeout=WAIT_S)
        return path.read_text().splitlines()[0]

    def _password_file(self) -> Path:
        path = self.layout.data_dir / _PASSWORD_FILE
        first_run = self.layout.master_dir / "initial-admin-password"
        return path if path.is_file() or not first_run.is_file() else first_run

    def _up_command(self) -> list[str]:
        layout = self.layout
        first, last = layout.process_ports(1)
        extra = layout.data_dir / "local-agent.json"
        extra.write_text(json.dumps(_agent_settings(first, last)))
        command = [*_mirbad(), "up", "--data-dir", str(layout.master_dir), "--port", str(layout.port)]
        command += ["--enroll-port", str(layout.enroll_port), "--agent-config", str(extra)]
        command += ["--model-root", str(layout.model_root)]
        if layout.llama_server is not None:
            command += ["--llama-server", str(layout.llama_server)]
        return command

    def _start_agent(self, admin: httpx.Client, index: int) -> None:
        layout = self.layout
        name, state_dir, port = f"agent-{index}", layout.agent_dir(index), layout.agent_port(index)
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not (state_dir / "agent.crt").is_file():
            self._enroll(admin, name, state_dir, port)
        first, last = layout.process_ports(index)
        settings = {
            **_agent_settings(first, last),
            "node_name": name,
            "state_dir": str(state_dir),
            "host": "127.0.0.1",
            "port": port,
            "model_roots": [str(layout.model_root)],
        }
        if layout.llama_server is not None:
            settings["llama_server"] = str(layout.llama_server)
        config = state_dir / "agent.json"
        config.write_text(json.dumps(settings, indent=2))
        self.agents[name] = self._spawn(name, [*_agent(), "serve", "--config", str(config)])

    def _enroll(self, admin: httpx.Client, name: str, state_dir: Path, port: int) -> None:
        known = any(node["name"] == name for node in _ok(admin.get("/api/nodes")))
        body = {
            "nodeName": name,
            "ttlSeconds": 600,
            "agentUrl": f"https://127.0.0.1:{port}",
            "reenroll": known,
        }
        issued = _ok(admin.post("/api/nodes/enrollment-tokens", json=body))
        # The exact command the master prints for a new node, run with this agent's state folder.
        command = shlex.split(issued["installCommand"])
        command = [*_agent(), *command[1:], "--state-dir", str(state_dir)]
        if "127.0.0.1" not in command:
            command += ["--san", "127.0.0.1"]  # the master dials it on loopback
        log = self.layout.data_dir / f"{name}.log"
        with log.open("ab") as output:
            subprocess.run(
                command, check=True, env=dict(self.env), stdout=output, stderr=output, timeout=WAIT_S
            )
        self.say(f"{name} enrolled")

    def _spawn(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        self.commands[name] = command
        log = self.layout.data_dir / f"{name}.log"
        with log.open("ab") as output:
            return subprocess.Popen(
                command,
                stdout=output,
                stderr=output,
                stdin=subprocess.DEVNULL,
                env=dict(self.env),
                start_new_session=True,  # Ctrl-C reaches the fleet command alone, which stops them in order
            )

    def _master_answers(self) -> bool:
        try:
            return httpx.get(f"{self.layout.url}/healthz", timeout=2, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    def _all_reachable(self, admin: httpx.Client) -> bool:
        nodes = _ok(admin.get("/api/nodes"))
        return len(nodes) >= self.layout.agents and all(node["reachable"] for node in nodes)

    def _until(self, check: Any, failure: str, process: subprocess.Popen[bytes] | None, log: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not check():
            if self.stopping.is_set():
                raise RuntimeError("dev fleet: stopped while starting")
            exited = [name for name, child in self._children() if child.poll() is not None]
            if exited or time.monotonic() > deadline:
                why = f"{', '.join(exited)} exited" if exited else failure
                raise RuntimeError(
                    f"dev fleet: {why}; see {self.layout.data_dir}/{exited[0] if exited else log}.log"
                )
            time.sleep(_POLL_S)

    def _children(self) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
        if self.master is not None:
            yield "master", self.master
        yield from self.agents.items()

    @contextlib.contextmanager
    def _admin(self) -> Iterator[httpx.Client]:
        headers = {"Authorization": f"Bearer {self.password}"}
        with httpx.Client(
            base_url=self.layout.url, headers=headers, timeout=WAIT_S, trust_env=False
        ) as admin:
            yield admin

    # ------------------------------------------------------------------ stop

    def _stop_remote_models(self, admin: httpx.Client) -> None:
        remote = {f"agent-{index}" for index in range(2, self.layout.agents + 1)}
        ids = {node["id"] for node in _ok(admin.get("/api/nodes")) if node["name"] in remote}
        running = [
            view["definition"]["id"]
            for view in _ok(admin.get("/api/models"))
            if view["status"]["nodeId"] in ids and view["status"]["state"] in ("Starting", "Ready")
        ]
        for model_id in running:
            self.say(f"stopping {model_id}")
            admin.post(f"/api/models/{model_id}/stop")

    def _kill_left_models(self) -> None:
        # A model the API could not stop (the master was gone) must not outlive the fleet.
        for index in range(2, self.layout.agents + 1):
            records = self.layout.agent_dir(index) / "processes.json"
            with contextlib.suppress(OSError, ValueError, KeyError):
                for record in json.loads(records.read_text())["processes"]:
                    group = record.get("group") or record["pid"]
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(group, signal.SIGKILL)
                        self.say(f"killed {record['modelId']} (pid {record['pid']}), left by its agent")


def _agent_settings(first_port: int, last_port: int) -> dict[str, Any]:
    return {
        "docker": {"enabled": False},
        "process": {"port_range_start": first_port, "port_range_end": last_port, "stop_timeout_s": 5},
        "graceful_shutdown_s": 2,
        "hostd_socket": None,
        "nvidia_smi": None,
    }


def _ok(response: httpx.Response) -> Any:
    if not response.is_success:
        raise RuntimeError(
            f"dev fleet: {response.request.method} {response.request.url.path}: {response.text}"
        )
    return response.json()


def _stop(process: subprocess.Popen[bytes], signum: int, name: str, say: Any) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signum)
    try:
        process.wait(WAIT_S)
    except subprocess.TimeoutExpired:
        say(f"{name} did not stop within {WAIT_S:g} s; killing it")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(WAIT_S)


def _mirbad() -> list[str]:
    script = Path(sys.executable).parent / "mirbad"
    return [str(script)] if script.exists() else [sys.executable, "-m", "mirbad_master.cli"]


def _agent() -> list[str]:
    script = Path(sys.executable).parent / "mirbad-agent"
    return [str(script)] if script.exists() else [sys.executable, "-m", "mirbad_agent"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dev_fleet", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--agents", type=int, default=3, help="agents, the master's own included (default 3)")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path.home() / ".local" / "share" / "mirbad-dev-fleet",
        help="where everything lives (default ~/.local/share/mirbad-dev-fleet)",
    )
    parser.add_argument(
        "--port", type=int, default=8080, help="the portal's port; the others follow (default 8080)"
    )
    parser.add_argument(
        "--llama-server", type=Path, help="the llama-server binary (default: as mirbad up finds it)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the fleet until Ctrl-C or SIGTERM; 0 once everything stopped, 1 when it could not start."""
    ns = _parser().parse_args(argv)
    if ns.agents < 1 or not 1024 <= ns.port <= 65535 - 100 - 20 * (ns.agents + 1):
        print("dev_fleet: error: --agents must be 1 or more, and --port leave room for every agent's ports")
        return 2
    fleet = DevFleet(FleetLayout(ns.data_dir.expanduser(), ns.port, ns.agents, ns.llama_server))
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: fleet.stopping.set())
    try:
        fleet.start()
        print(fleet.banner(), flush=True)
        fleet.stopping.wait()
        print("stopping the dev fleet", flush=True)
        return 0
    except (RuntimeError, subprocess.SubprocessError, httpx.HTTPError) as exc:
        print(f"dev_fleet: {exc}", file=sys.stderr)
        return 1
    finally:
        fleet.stop()
        print("dev fleet stopped", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
