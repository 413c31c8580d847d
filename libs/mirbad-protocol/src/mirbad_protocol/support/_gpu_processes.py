"""GPU compute processes and their owners: nvidia-smi's compute-apps rows and ``/proc/<pid>/cgroup``.

hostd and the node agent read the same two formats: nvidia-smi run with
:data:`COMPUTE_APPS_QUERY_ARGS` prints ``pid, process name, used MiB`` per compute process, and a
process's cgroup file says whose it is. A process in a Docker container has ``docker-<64 hex>.scope``
(systemd cgroup driver, cgroup v2 and v1 alike) or ``/docker/<64 hex>`` (cgroupfs driver) in its path;
any other process belongs to the innermost ``.service`` unit of its path. Both readers are pure: the
callers run nvidia-smi and read the files.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Final

from mirbad_protocol.exceptions import ComputeAppsFormatError

__all__ = [
    "COMPUTE_APPS_QUERY_ARGS",
    "CgroupOwner",
    "ComputeApp",
    "cgroup_owner",
    "read_compute_apps",
]

COMPUTE_APPS_QUERY_ARGS: Final = (
    "--query-compute-apps=pid,process_name,used_memory",
    "--format=csv,noheader,nounits",
)
"""nvidia-smi's arguments for one CSV row per compute process, memory in MiB."""

_CONTAINER: Final = re.compile(r"(?:docker-([0-9a-f]{64})\.scope|/docker/([0-9a-f]{64}))(?:/|$)")


@dataclass(frozen=True)
class ComputeApp:
    """One row of nvidia-smi's compute apps.

    Attributes:
        pid: the process id (the host's pid namespace: the driver reports it so).
        name: the process name as nvidia-smi printed it (commas kept).
        used_mib: its GPU memory in MiB; None where the driver reports none (``[N/A]``).
    """

    pid: int
    name: str
    used_mib: float | None


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


def read_compute_apps(text: str) -> list[ComputeApp]:
    """Parse nvidia-smi's output for :data:`COMPUTE_APPS_QUERY_ARGS`; blank lines are ignored.

    The name sits between the pid and the memory, so a comma inside it does not shift the columns.

    Raises:
        ComputeAppsFormatError: a row without three columns or with a bad pid.
    """
    rows: list[ComputeApp] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        raw = line.split(",")
        cells = [cell.strip() for cell in raw]
        if len(cells) < 3 or not cells[0].isascii() or not cells[0].isdigit():
            raise ComputeAppsFormatError(f"unreadable nvidia-smi row {line!r}")
        rows.append(ComputeApp(int(cells[0]), ",".join(raw[1:-1]).strip(), _mib(cells[-1])))
    return rows


def _mib(cell: str) -> float | None:
    try:
        value = float(cell)
    except ValueError:
        return None  # [N/A], [Not Supported]: the driver does not say
    return max(value, 0.0) if math.isfinite(value) else None


def cgroup_owner(text: str) -> CgroupOwner:
    """Read a ``/proc/<pid>/cgroup`` file's owner (see the module docstring); an empty owner if none."""
    lines = text.splitlines()
    paths = [line.split(":", 2)[2] for line in lines if line.count(":") >= 2]
    for candidate in paths:
        found = _CONTAINER.search(candidate)
        if found:
            return CgroupOwner(path=candidate, container_id=found.group(1) or found.group(2))
    unified = next((line[3:] for line in lines if line.startswith("0::")), None)
    named = next((line.split(":", 2)[2] for line in lines if ":name=systemd:" in line), None)
    path = unified or named
    if not path:
        return CgroupOwner()
    services = [part for part in path.split("/") if part.endswith(".service")]
    return CgroupOwner(path=path, unit=services[-1] if services else None)
