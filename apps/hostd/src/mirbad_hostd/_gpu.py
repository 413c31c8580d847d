"""GPU processes: nvidia-smi's compute apps, each with its owner read from ``/proc/<pid>/cgroup``.

Both formats are read by :mod:`mirbad_protocol` (the node agent reads them too, where it runs on the
host without hostd); this module runs nvidia-smi and reads the files. The ``/proc`` root is a setting
so tests give a fake tree.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import anyio

from mirbad_protocol import ComputeAppsFormatError
from mirbad_protocol.support import COMPUTE_APPS_QUERY_ARGS, CgroupOwner, cgroup_owner, read_compute_apps

from .exceptions import GpuQueryError

__all__ = [
    "GPU_CACHE_S",
    "GPU_QUERY_ARGS",
    "CgroupOwner",
    "GpuProcessRow",
    "GpuProcesses",
    "cgroup_owner",
    "parse_compute_apps",
]

GPU_QUERY_ARGS: Final = COMPUTE_APPS_QUERY_ARGS
"""The arguments of hostd's one nvidia-smi query: a CSV row per compute process, memory in MiB."""

GPU_CACHE_S: Final = 2.0
"""How long one nvidia-smi answer (or failure) serves every caller: the Services page, its refresh in
every open browser and the agent's telemetry pass all ask, and each run takes nvidia-smi a driver query
(a hung one up to its whole timeout)."""

_SHOWN_ERROR: Final = 500


@dataclass(frozen=True)
class GpuProcessRow:
    """One compute process with its owner."""

    pid: int
    name: str
    used_mib: float
    owner: CgroupOwner


def parse_compute_apps(text: str) -> list[tuple[int, str, float]]:
    """Parse nvidia-smi run with :data:`GPU_QUERY_ARGS`: ``(pid, process name, used MiB)`` per row.

    An unreadable memory value (``[N/A]`` under some drivers) reads as 0: hostd's contract has a number.

    Raises:
        GpuQueryError: a row without three columns or with a bad pid.
    """
    try:
        apps = read_compute_apps(text)
    except ComputeAppsFormatError as exc:
        raise GpuQueryError(str(exc)) from None
    return [(app.pid, app.name, app.used_mib or 0.0) for app in apps]


class GpuProcesses:
    """Runs nvidia-smi and reads each process's cgroup.

    One run's answer, rows or failure, is kept for ``cache_s``: callers within it (and those that
    waited for the run in flight) share it instead of running nvidia-smi again.

    Args:
        executable: the nvidia-smi command or path.
        proc_root: the ``/proc`` tree.
        timeout_s: the bound of one nvidia-smi run.
        cache_s: how long one answer is kept (0: never).
        clock: seconds on a monotonic clock (a test's stand-in).
    """

    def __init__(
        self,
        executable: str,
        proc_root: Path,
        *,
        timeout_s: float,
        cache_s: float = GPU_CACHE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._executable = executable
        self._proc_root = proc_root
        self._timeout_s = timeout_s
        self._cache_s = cache_s
        self._clock = clock
        self._lock = anyio.Lock()
        self._answer: tuple[float, list[GpuProcessRow] | GpuQueryError] | None = None

    async def query(self) -> list[GpuProcessRow]:
        """The compute processes with their owners (as nvidia-smi answered at most ``cache_s`` ago).

        Raises:
            GpuQueryError: nvidia-smi is missing, failed, hung or printed unreadable rows.
        """
        async with self._lock:
            if self._answer is None or self._clock() - self._answer[0] >= self._cache_s:
                started = self._clock()
                try:
                    self._answer = (started, await self._run())
                except GpuQueryError as exc:
                    self._answer = (started, exc)
            answer = self._answer[1]
        if isinstance(answer, GpuQueryError):
            raise GpuQueryError(str(answer))  # a new one each time: a raised exception carries its traceback
        return list(answer)

    async def _run(self) -> list[GpuProcessRow]:
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
