"""Whose GPU memory is it: compute processes summed per container and per model.

A container model owns every process in its container (the cgroup names the container). A native
process model owns its own process and every process below it: a GPU process's ancestors are walked
through ``/proc/<pid>/stat`` until a model's pid (or the top) is reached. What no model owns and runs
in a systemd service belongs to that host service (summed per unit, named by hostd's whitelist where
it has a display name), so a native model under the agent's own unit is counted once, as the model.
Processes whose memory the driver does not report (``[N/A]``) count as unknown, not as zero.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from mirbad_protocol.agent import ServiceGpuMemory

from ._gpu_processes import GpuComputeProcess
from ._memory_usage import PROC_ROOT

__all__ = ["GpuOwner", "container_gpu_bytes", "model_gpu_bytes", "parent_pid", "service_gpu_memory"]

_MIB: Final = 1024 * 1024
_MAX_DEPTH: Final = 64  # a process tree deeper than this is not a model's; it also bounds a pid cycle


@dataclass(frozen=True)
class GpuOwner:
    """What a running model's GPU processes are found by.

    Attributes:
        container_id: the full id of its container (container runtimes).
        pid: its server's process id (native runtimes); its descendants count too.
    """

    container_id: str | None = None
    pid: int | None = None


def parent_pid(pid: int, *, proc: Path = PROC_ROOT) -> int | None:
    """The parent of ``pid`` from ``/proc/<pid>/stat``; None when it is gone or unreadable (blocking)."""
    try:
        text = (proc / str(pid) / "stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ')': split after the last one.
    fields = text.rpartition(")")[2].split()
    if len(fields) < 2 or not fields[1].isdigit():
        return None
    return int(fields[1])


def container_gpu_bytes(processes: Iterable[GpuComputeProcess]) -> dict[str, int | None]:
    """The GPU memory of each container that has a compute process, in bytes, by container id.

    A container whose every process has an unreported memory maps to None (unknown).
    """
    found: dict[str, int | None] = {}
    for process in processes:
        if process.container_id is not None:
            found[process.container_id] = _plus(found.get(process.container_id), process.used_mib)
    return found


def model_gpu_bytes(
    processes: Iterable[GpuComputeProcess],
    owners: Mapping[str, GpuOwner],
    parent_of: Callable[[int], int | None],
) -> dict[str, int | None]:
    """The GPU memory of each model in ``owners``, in bytes: 0 when none of its processes is on the GPU.

    Args:
        processes: the GPU's compute processes.
        owners: each running model's container or pid.
        parent_of: a process's parent (:func:`parent_pid`; a test's fake tree).

    Returns:
        Every model of ``owners``; None for one whose processes all have an unreported memory.
    """
    owned = _ModelsOf(owners, parent_of)
    totals: dict[str, int | None] = dict.fromkeys(owners, 0)
    seen: set[str] = set()
    for process in processes:
        model = owned.model_of(process)
        if model is None:
            continue
        totals[model] = _plus(totals[model] if model in seen else None, process.used_mib)
        seen.add(model)
    return totals


def service_gpu_memory(
    processes: Iterable[GpuComputeProcess],
    owners: Mapping[str, GpuOwner],
    parent_of: Callable[[int], int | None],
) -> list[ServiceGpuMemory]:
    """The GPU memory of each host service, by unit: the processes no model in ``owners`` owns.

    Args:
        processes: the GPU's compute processes.
        owners: each running model's container or pid (their processes are the models', not a unit's).
        parent_of: a process's parent (:func:`parent_pid`; a test's fake tree).

    Returns:
        One entry per unit with a compute process, in unit order; the size None where the driver
        reports none for every one of its processes.
    """
    owned = _ModelsOf(owners, parent_of)
    totals: dict[str, int | None] = {}
    names: dict[str, str] = {}
    for process in processes:
        if process.unit is None or process.container_id is not None or owned.model_of(process):
            continue
        totals[process.unit] = _plus(totals.get(process.unit), process.used_mib)
        names[process.unit] = process.display_name or names.get(process.unit) or process.unit
    return [
        ServiceGpuMemory(unit=unit, name=names[unit], gpu_memory_bytes=totals[unit])
        for unit in sorted(totals)
    ]


class _ModelsOf:
    # Which model owns a process: its container's, else the model whose server is an ancestor.
    def __init__(self, owners: Mapping[str, GpuOwner], parent_of: Callable[[int], int | None]) -> None:
        self._by_container = {owner.container_id: m for m, owner in owners.items() if owner.container_id}
        self._by_pid = {owner.pid: m for m, owner in owners.items() if owner.pid is not None}
        self._parent_of = parent_of

    def model_of(self, process: GpuComputeProcess) -> str | None:
        if process.container_id is not None:
            return self._by_container.get(process.container_id)
        if not self._by_pid:
            return None
        return _ancestor_model(process.pid, self._by_pid, self._parent_of)


def _ancestor_model(
    pid: int, by_pid: Mapping[int, str], parent_of: Callable[[int], int | None]
) -> str | None:
    current: int | None = pid
    for _ in range(_MAX_DEPTH):
        if current is None or current <= 1:
            return None
        if current in by_pid:
            return by_pid[current]
        current = parent_of(current)
    return None


def _plus(total: int | None, used_mib: float | None) -> int | None:
    if used_mib is None:
        return total
    return (total or 0) + round(used_mib * _MIB)
