"""The node's memory: ``/proc/meminfo`` on Linux, a configured stand-in elsewhere, plus its discrete GPUs."""

from __future__ import annotations

import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from mirbad_protocol import GpuMemory, MemorySnapshot

from .exceptions import MeminfoFormatError

__all__ = ["DEFAULT_FAKE_TOTAL_GIB", "MEMINFO_PATH", "MemoryProbe", "parse_meminfo"]

MEMINFO_PATH: Final = Path("/proc/meminfo")
"""Where Linux publishes the system's memory counters."""

DEFAULT_FAKE_TOTAL_GIB: Final = 121.0
"""The memory a non-Linux development box pretends to have (a DGX Spark's usable unified memory)."""

_KIB_PER_GIB: Final = 1024 * 1024
_LINE = re.compile(r"^(?P<key>[A-Za-z0-9_()]+):[ \t]*(?P<value>[0-9]{1,20})(?:[ \t]+(?P<unit>\S+))?[ \t]*$")
_WANTED: Final = ("MemTotal", "MemAvailable")


def parse_meminfo(text: str) -> tuple[float, float]:
    """Read ``(total_gib, available_gib)`` from the text of ``/proc/meminfo``.

    Only ``MemTotal`` and ``MemAvailable`` are used; every other line, and any line that is not a
    ``Key: number kB`` entry, is ignored. The first occurrence of a key wins.

    Args:
        text: the whole file.

    Returns:
        The total and available memory in GiB.

    Raises:
        MeminfoFormatError: a wanted key is missing or is given in a unit other than kB.
    """
    found: dict[str, int] = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is None or match["key"] not in _WANTED or match["key"] in found:
            continue
        unit = match["unit"]
        if unit is not None and unit != "kB":
            raise MeminfoFormatError(f"{match['key']} is given in {unit!r}, expected kB")
        found[match["key"]] = int(match["value"])
    missing = [key for key in _WANTED if key not in found]
    if missing:
        raise MeminfoFormatError(f"no {' or '.join(missing)} line")
    return found["MemTotal"] / _KIB_PER_GIB, found["MemAvailable"] / _KIB_PER_GIB


def _utc_now() -> datetime:
    return datetime.now(UTC)


class MemoryProbe:
    """Takes :class:`~mirbad_protocol.MemorySnapshot` readings of this node.

    On Linux the system memory comes from ``meminfo_path``; elsewhere (a Windows or macOS development
    box, where admission must still run) the probe reports ``fake_total_gib`` as both total and
    available. The snapshot is unified (one pool shared by CPU and GPU, as on a DGX Spark or a Mac)
    exactly when no discrete GPU was found.

    Args:
        reserve_gib: memory admission always keeps free, copied into every snapshot.
        gpu_probe: an async source of the discrete GPUs (for example ``NvidiaSmiProbe().query``);
            without one the node is treated as having none.
        meminfo_path: the meminfo file to parse (tests point it at a fixture).
        fake_total_gib: the stand-in total where there is no meminfo.
        linux: whether to read meminfo at all; defaults to whether this is Linux.
        clock: the time stamped on snapshots.
    """

    def __init__(
        self,
        *,
        reserve_gib: float = 0.0,
        gpu_probe: Callable[[], Awaitable[Sequence[GpuMemory]]] | None = None,
        meminfo_path: str | Path = MEMINFO_PATH,
        fake_total_gib: float = DEFAULT_FAKE_TOTAL_GIB,
        linux: bool | None = None,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        if reserve_gib < 0 or fake_total_gib < 0:
            raise ValueError("reserve_gib and fake_total_gib cannot be negative")
        self.reserve_gib = reserve_gib
        self.meminfo_path = Path(meminfo_path)
        self.fake_total_gib = fake_total_gib
        self.linux = sys.platform.startswith("linux") if linux is None else linux
        self._gpu_probe = gpu_probe
        self._clock = clock

    def read(self, gpus: Sequence[GpuMemory] = ()) -> MemorySnapshot:
        """A snapshot of the system memory now, carrying ``gpus`` as the node's discrete GPUs.

        This reads a procfs file (no disk behind it), so it is called directly from async code.

        Raises:
            MeminfoFormatError: the meminfo file lacks MemTotal or MemAvailable.
            OSError: the meminfo file cannot be read.
        """
        if self.linux:
            total, available = parse_meminfo(self.meminfo_path.read_text(encoding="utf-8", errors="replace"))
        else:
            total = available = self.fake_total_gib
        return MemorySnapshot(
            total_gib=total,
            available_gib=available,
            reserve_gib=self.reserve_gib,
            unified=not gpus,
            gpus=list(gpus),
            taken_at=self._clock(),
        )

    async def snapshot(self) -> MemorySnapshot:
        """Ask the GPU probe (when there is one) for the discrete GPUs, then read the system memory.

        Raises:
            MeminfoFormatError: the meminfo file lacks MemTotal or MemAvailable.
            GpuProbeError: the GPU probe failed (see :class:`NvidiaSmiProbe`).
        """
        gpus = await self._gpu_probe() if self._gpu_probe is not None else ()
        return self.read(gpus)
