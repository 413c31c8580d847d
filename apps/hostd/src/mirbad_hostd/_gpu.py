"""GPU processes: nvidia-smi's compute apps, each with its owner read from ``/proc/<pid>/cgroup``.

A process in a Docker container has ``docker-<64 hex>.scope`` (systemd cgroup driver) or
``/docker/<64 hex>`` (cgroupfs driver) in its cgroup path; any other process belongs to the innermost
``.service`` unit of its path. The ``/proc`` root is a setting so tests give a fake tree.
"""

from __future__ import annotations

import math
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import anyio

from .exceptions import GpuQueryError

__all__ = [
    "GPU_QUERY_ARGS",
    "CgroupOwner",
    "GpuProcessRow",
    "GpuProcesses",
    "cgroup_owner",
    "parse_compute_apps",
]

GPU_QUERY_ARGS: Final = (
    "--query-compute-apps=pid,process_name,used_memory",
    "--format=csv,noheader,nounits",
)
"""The arguments of hostd's one nvidia-smi query: a CSV row per compute process, memory in MiB."""

_CONTAINER: Final = re.compile(r"(?:docker-([0-9a-f]{64})\.scope|/docker/([0-9a-f]{64}))(?:/|$)")
_SHOWN_ERROR: Final = 500


@dataclass(frozen=True)
class CgroupOwner:
    """Who a process belongs to, from its cgroup file.

    Attributes:
        path: its cgroup path (the unified hierarchy's, else systemd's named one).
        container_id: the Docker container it runs in.
        unit: the innermost ``.service`` of its path when it is in no container.
    """

    path: str | None = None
    container_id: str | None = None
    unit: str | None = None


@dataclass(frozen=True)
class GpuProcessRow:
    """One compute process with its owner."""

    pid: int
    name: str
    used_mib: float
    owner: CgroupOwner


def parse_compute_apps(text: str) -> list[tuple[int, str, float]]:
    """Parse nvidia-smi run with :data:`GPU_QUERY_ARGS`: ``(pid, process name, used MiB)`` per row.

    The name sits between the pid and the memory, so a comma inside it does not shift the columns;
    an unreadable memory value (``[N/A]`` under some drivers) reads as 0.

    Raises:
        GpuQueryError: a row without three columns or with a bad pid.
    """
    rows: list[tuple[int, str, float]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        raw = line.split(",")
        cells = [cell.strip() for cell in raw]
        if len(cells) < 3 or not cells[0].isascii() or not cells[0].isdigit():
            raise GpuQueryError(f"unreadable nvidia-smi row {line!r}")
        try:
            used = max(float(cells[-1]), 0.0)
        except ValueError:
            used = 0.0
        rows.append((int(cells[0]), ",".join(raw[1:-1]).strip(), used if math.isfinite(used) else 0.0))
    return rows


def cgroup_owner(text: str) -> CgroupOwner:
    """Read a ``/proc/<pid>/cgroup`` file's owner (see the module docstring)."""
    paths = [line.split(":", 2)[2] for line in text.splitlines() if line.count(":") >= 2]
    for candidate in paths:
        found = _CONTAINER.search(candidate)
        if found:
            return CgroupOwner(path=candidate, container_id=found.group(1) or found.group(2))
    unified = next((line[3:] for line in text.splitlines() if line.startswith("0::")), None)
    named = next((line.split(":", 2)[2] for line in text.splitlines() if ":name=systemd:" in line), None)
    path = unified or named
    if not path:
        return CgroupOwner()
    services = [part for part in path.split("/") if part.endswith(".service")]
    return CgroupOwner(path=path, unit=services[-1] if services else None)


class GpuProcesses:
    """Runs nvidia-smi and reads each process's cgroup.

    Args:
        executable: the nvidia-smi command or path.
        proc_root: the ``/proc`` tree.
        timeout_s: the bound of one nvidia-smi run.
    """

    def __init__(self, executable: str, proc_root: Path, *, timeout_s: float) -> None:
        self._executable = executable
        self._proc_root = proc_root
        self._timeout_s = timeout_s

    async def query(self) -> list[GpuProcessRow]:
        """The compute processes with their owners.

        Raises:
            GpuQueryError: nvidia-smi is missing, failed, hung or printed unreadable rows.
        """
        found = shutil.which(self._executable)
        if found is None:
            raise GpuQueryError(f"{self._executable} is not installed")
        try:
            with anyio.fail_after(self._timeout_s):
                result = await anyio.run_process([found, *GPU_QUERY_ARGS], check=False)
        except TimeoutError:
            raise GpuQueryError(f"nvidia-smi did not answer within {self._timeout_s:g} s") from None
        except OSError as exc:
            raise GpuQueryError(f"nvidia-smi could not be run: {exc}") from None
        if result.returncode != 0:
            # nvidia-smi prints its own failures ("NVIDIA-SMI has failed ...") on stdout.
            output = (result.stderr or result.stdout).decode(errors="replace").strip()[:_SHOWN_ERROR]
            raise GpuQueryError(f"nvidia-smi exited with {result.returncode}: {output or 'no output'}")
        rows = parse_compute_apps(result.stdout.decode(errors="replace"))
        return await anyio.to_thread.run_sync(self._with_owners, rows)

    def _with_owners(self, rows: list[tuple[int, str, float]]) -> list[GpuProcessRow]:
        return [GpuProcessRow(pid, name, used, self._owner(pid)) for pid, name, used in rows]

    def _owner(self, pid: int) -> CgroupOwner:
        try:
            text = (self._proc_root / str(pid) / "cgroup").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return CgroupOwner()  # the process ended between nvidia-smi and here
        return cgroup_owner(text)
