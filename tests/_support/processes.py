"""Cleanup for tests that start model processes: nothing they start may outlive them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from mirbad_runtime import ProcessRecord
from mirbad_runtime._process_host_posix import _reap, linux_identity


def kill_recorded_processes(records_path: Path) -> None:
    """SIGKILL the process group of every still-running process listed in a ``processes.json``."""
    with contextlib.suppress(FileNotFoundError):
        for entry in json.loads(records_path.read_text())["processes"]:
            record = ProcessRecord.model_validate(entry)
            live = linux_identity(record.pid)
            # Not ==: a wrapper script that exec'd the server runs another image under the same identity.
            if live is not None and record.identity.same_process(live):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(record.pid, signal.SIGKILL)
            # Collect the exit of a model this test process spawned itself, or it lingers as a zombie
            # (and its Popen warns when the worker exits).
            _reap(record.pid, grace_s=5)


def stop_gently(process: subprocess.Popen[Any], *, grace_s: float = 30, kill_wait_s: float = 30) -> None:
    """SIGTERM a child a test started, give it ``grace_s`` to exit, then SIGKILL it; always reap it.

    A child that already exited is only reaped, so the test never signals a recycled pid.
    """
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=kill_wait_s)


def write_exec_wrapper(path: Path, target: str | Path) -> Path:
    """Write an executable ``#!/bin/sh`` script at ``path`` that ``exec``s ``target`` with its arguments.

    The way people point a catalogue at a binary that needs its environment set first: the process
    started from the script becomes ``target`` itself.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\nexec "{target}" "$@"\n')
    path.chmod(0o755)
    return path


def llama_servers_on(port: int) -> list[int]:
    """Pids of every live llama-server whose command line listens on ``port`` (read from ``/proc``)."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if argv[0].endswith(b"llama-server") and b"--port" in argv and str(port).encode() in argv:
                # Only a live one of ours counts: one exiting this instant, or a zombie, has no identity.
                identity = linux_identity(int(entry.name))
                if identity is not None:
                    found.append(identity.pid)
    return found
