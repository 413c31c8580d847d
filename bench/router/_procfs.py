"""What the kernel says about a process: resident memory and CPU time, read from ``/proc`` (Linux)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "CpuSample",
    "available_cores",
    "cpu_seconds",
    "machine_description",
    "machine_ticks",
    "rss_bytes",
    "time_wait_sockets",
]

_TICKS_PER_S: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_TIME_WAIT: Final = "06"  # the kernel's TCP_TIME_WAIT state, as /proc/net/tcp writes it


def rss_bytes(pid: int) -> int | None:
    """The resident set (``VmRSS``) of ``pid`` in bytes, or None when the process is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024  # the kernel's "kB" are KiB
    return None


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time of ``pid`` (all its threads) in seconds, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses; the fields after its last ")" are fixed.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


def time_wait_sockets(port: int) -> int:
    """Loopback TCP connections to or from ``port`` in TIME-WAIT: recently closed ones (kept ~60 s)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            ports = {int(address.rsplit(":", 1)[1], 16) for address in fields[1:3]}
            count += fields[3] == _TIME_WAIT and port in ports
    return count


def machine_ticks() -> tuple[int, int]:
    """All cores together since boot, in clock ticks: (busy, total); busy is all but idle and iowait."""
    try:
        fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest time is inside user)
    return total - fields[3] - fields[4], total


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds of named processes, the machine's busy and total ticks, and closed connections."""

    seconds: dict[str, float]
    machine: tuple[int, int] = (0, 0)
    closed: int = 0

    @classmethod
    def take(cls, pids: dict[str, int], watch_port: int | None = None) -> CpuSample:
        """Sample every process of ``pids`` (name -> pid; a vanished one is left out), the machine and,
        when given, the closed connections of ``watch_port``."""
        found = {name: cpu_seconds(pid) for name, pid in pids.items()}
        closed = time_wait_sockets(watch_port) if watch_port is not None else 0
        return cls(
            {name: value for name, value in found.items() if value is not None}, machine_ticks(), closed
        )

    def machine_busy(self, earlier: CpuSample) -> float:
        """The share (0..1) of all cores that was busy, with anything, since ``earlier``."""
        busy, total = (now - then for now, then in zip(self.machine, earlier.machine, strict=True))
        return busy / total if total > 0 else float("nan")

    def delta(self, earlier: CpuSample) -> dict[str, float]:
        """CPU seconds each process used since ``earlier``."""
        return {
            name: value - earlier.seconds[name]
            for name, value in self.seconds.items()
            if name in earlier.seconds
        }


def machine_description() -> str:
    """One line about this machine: CPU model, cores, memory, kernel."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = "?"
    try:
        total_kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f"{total_kib / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return f"{model}, {available_cores()} cores available, {memory} memory, Linux {os.uname().release}"


def available_cores() -> int:
    """The CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
