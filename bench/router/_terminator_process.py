"""Starting and stopping :mod:`bench.router._terminator` as a process of its own."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["RunningTerminator", "running_terminator"]

_REPO_ROOT: Final = Path(__file__).resolve().parents[2]
_STOP_TIMEOUT_S: Final = 10.0


@dataclass(frozen=True)
class RunningTerminator:
    """The terminator's pid and the loopback port wrk connects to."""

    pid: int
    port: int


@contextlib.contextmanager
def running_terminator(data_dir: Path, agent_port: int) -> Iterator[RunningTerminator]:
    """Relay plain connections to the agent's mutual TLS with the master's certificate until exit.

    Raises:
        RuntimeError: it exited before saying its port.
    """
    command = [sys.executable, "-m", "bench.router._terminator", "--pki", str(data_dir / "pki")]
    process = subprocess.Popen(
        [*command, "--target-port", str(agent_port)],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        cwd=_REPO_ROOT,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # it prints its port as soon as it listens, or exits
        if not line.startswith("port "):
            raise RuntimeError(f"the TLS terminator exited with {process.wait(_STOP_TIMEOUT_S)}: {line!r}")
        yield RunningTerminator(process.pid, int(line.split()[1]))
    finally:
        process.terminate()
        try:
            process.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(_STOP_TIMEOUT_S)
