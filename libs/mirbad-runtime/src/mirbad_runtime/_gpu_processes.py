"""The GPU's compute processes with the container each runs in: from hostd, else from nvidia-smi here.

hostd runs on the host as root, so it sees every process's cgroup even when the agent runs in a
container with a pid namespace of its own; the agent therefore asks hostd first. Where hostd is
missing, older (404) or failing, the agent runs nvidia-smi itself and reads ``/proc/<pid>/cgroup``,
which is right for an agent that runs on the host (a systemd service, a PC). A node without
nvidia-smi has no discrete GPU: a probe then reads nothing (None) rather than zero.
"""

from __future__ import annotations

import logging
import shutil
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import anyio

from mirbad_protocol import ComputeAppsFormatError
from mirbad_protocol.support import COMPUTE_APPS_QUERY_ARGS, cgroup_owner, read_compute_apps

from ._hostd_client import HostdClient
from ._memory_usage import PROC_ROOT
from .exceptions import GpuProbeError, MirbadRuntimeError

__all__ = [
    "GpuComputeProcess",
    "GpuProcessProbe",
    "GpuProcessReading",
    "GpuProcessSource",
    "HostdGpuProcessProbe",
    "NvidiaSmiProcessProbe",
    "PreferredGpuProcessProbe",
    "nvidia_gpu_present",
]

GpuProcessSource = Literal["hostd", "nvidia-smi"]
"""Who listed the GPU processes: the node's hostd, or the agent's own nvidia-smi run."""

logger = logging.getLogger(__name__)

_SHOWN_ERROR: Final = 500


@dataclass(frozen=True)
class GpuComputeProcess:
    """One process holding GPU memory.

    Attributes:
        pid: its process id in the host's pid namespace (as the driver reports it).
        used_mib: its GPU memory in MiB; None where the driver reports none (``[N/A]``).
        container_id: the Docker container it runs in, from its cgroup; None outside one (or unread).
        unit: outside a container, the innermost ``.service`` unit of its cgroup (a host service).
        display_name: that unit's display name in hostd's whitelist (hostd only).
    """

    pid: int
    used_mib: float | None
    container_id: str | None = None
    unit: str | None = None
    display_name: str | None = None


@dataclass(frozen=True)
class GpuProcessReading:
    """The GPU's compute processes at one moment, and who listed them."""

    source: GpuProcessSource
    processes: tuple[GpuComputeProcess, ...]


def nvidia_gpu_present(executable: str | None, *, proc_root: Path = PROC_ROOT) -> bool:
    """Whether this node has an NVIDIA GPU, whether or not its processes can be listed (blocking).

    The node has one when nvidia-smi is installed, or when NVIDIA's kernel driver lists a GPU in
    ``/proc/driver/nvidia/gpus`` (also inside a container given the GPUs, which may lack nvidia-smi).

    Args:
        executable: the agent's ``nvidia_smi`` setting; None says the node has no discrete GPU.
        proc_root: the process table (a test's stand-in).
    """
    if executable is None:
        return False
    if shutil.which(executable) is not None:
        return True
    try:
        return any((proc_root / "driver" / "nvidia" / "gpus").iterdir())
    except OSError:
        return False


class GpuProcessProbe(ABC):
    """Lists the node's GPU compute processes."""

    @abstractmethod
    async def read(self) -> GpuProcessReading | None:
        """The processes now; None where this probe sees no GPU (no nvidia-smi, no hostd).

        Raises:
            MirbadRuntimeError: the source is there but failed (a subclass says which).
        """


class NvidiaSmiProcessProbe(GpuProcessProbe):
    """Runs nvidia-smi here and reads each process's cgroup from ``proc_root``.

    Args:
        executable: the nvidia-smi command or path.
        proc_root: the process table (a test's stand-in).
        timeout_s: the bound of one nvidia-smi run.
    """

    def __init__(
        self, executable: str = "nvidia-smi", *, proc_root: Path = PROC_ROOT, timeout_s: float = 5.0
    ) -> None:
        self._executable = executable
        self._proc_root = proc_root
        self._timeout_s = timeout_s

    async def read(self) -> GpuProcessReading | None:
        """nvidia-smi's compute apps with their containers; None when nvidia-smi is not installed.

        Raises:
            GpuProbeError: nvidia-smi failed, hung or printed rows that are not compute apps.
        """
        found = shutil.which(self._executable)
        if found is None:
            return None
        try:
            with anyio.fail_after(self._timeout_s):
                result = await anyio.run_process([found, *COMPUTE_APPS_QUERY_ARGS], check=False)
        except TimeoutError:
            raise GpuProbeError(f"nvidia-smi did not answer within {self._timeout_s:g} s") from None
        except OSError as exc:
            raise GpuProbeError(f"nvidia-smi could not be run: {exc}") from None
        if result.returncode != 0:
            # nvidia-smi prints its own failures ("NVIDIA-SMI has failed ...") on stdout.
            output = (result.stderr or result.stdout).decode(errors="replace").strip()[:_SHOWN_ERROR]
            raise GpuProbeError(f"nvidia-smi exited with {result.returncode}: {output or 'no output'}")
        try:
            apps = read_compute_apps(result.stdout.decode(errors="replace"))
        except ComputeAppsFormatError as exc:
            raise GpuProbeError(str(exc)) from None
        pairs = [(app.pid, app.used_mib) for app in apps]
        processes = await anyio.to_thread.run_sync(self._with_containers, pairs)
        return GpuProcessReading("nvidia-smi", processes)

    def _with_containers(self, pairs: list[tuple[int, float | None]]) -> tuple[GpuComputeProcess, ...]:
        return tuple(self._owned(pid, used) for pid, used in pairs)

    def _owned(self, pid: int, used_mib: float | None) -> GpuComputeProcess:
        try:
            text = (self._proc_root / str(pid) / "cgroup").read_text(encoding="utf-8", errors="replace")
        except OSError:
            # Ended since nvidia-smi listed it, or in another pid namespace: nobody's.
            return GpuComputeProcess(pid, used_mib)
        owner = cgroup_owner(text)
        return GpuComputeProcess(pid, used_mib, owner.container_id, owner.unit)


class HostdGpuProcessProbe(GpuProcessProbe):
    """Asks hostd's ``GET /gpu-processes`` (hostd reads the host's cgroups as root).

    Args:
        client: the client on hostd's socket (the caller closes it).
        timeout_s: telemetry's bound on the call.
    """

    def __init__(self, client: HostdClient, *, timeout_s: float = 3.0) -> None:
        self._client = client
        self._timeout_s = timeout_s

    async def read(self) -> GpuProcessReading:
        """The processes as hostd lists them.

        Raises:
            HostdUnavailableError: no hostd, a silent one, or an answer outside the contract.
            HostdRefusedError: an older hostd (404) or a failed nvidia-smi on the host (503).
        """
        listed = await self._client.gpu_processes(timeout_s=self._timeout_s)
        processes = tuple(
            GpuComputeProcess(row.pid, row.used_mib, row.container_id, row.unit, row.display_name)
            for row in listed
        )
        return GpuProcessReading("hostd", processes)


class PreferredGpuProcessProbe(GpuProcessProbe):
    """The first of ``probes`` that reads something; a failing one is logged and the next one asked.

    Args:
        probes: in order of preference (hostd first, then nvidia-smi here).
    """

    def __init__(self, probes: Sequence[GpuProcessProbe]) -> None:
        self._probes = tuple(probes)

    async def read(self) -> GpuProcessReading | None:
        """The first reading; None when no probe sees a GPU or every one failed."""
        for probe in self._probes:
            try:
                reading = await probe.read()
            except MirbadRuntimeError as exc:
                # GPU memory is extra in telemetry and listings: a failure leaves it unknown.
                logger.debug("GPU processes not read by %s: %s", type(probe).__name__, exc)
                continue
            if reading is not None:
                return reading
        return None
