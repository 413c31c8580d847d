"""The discrete GPUs of a node, read from ``nvidia-smi``."""

from __future__ import annotations

import logging
import math
import shutil
import subprocess
from pathlib import Path
from typing import Final

import anyio

from mirbad_protocol import GpuMemory

from .exceptions import GpuProbeError

__all__ = ["NVIDIA_SMI_ARGS", "NvidiaSmiProbe", "parse_gpu_rows"]

NVIDIA_SMI_ARGS: Final = (
    "--query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu",
    "--format=csv,noheader,nounits",
)
"""The arguments of the one nvidia-smi query the probe runs: a CSV row per GPU, memory in MiB and the
GPU's utilization in percent (one run for both, so a reading's memory and utilization are of one moment)."""

_log = logging.getLogger(__name__)
_STDERR_SHOWN: Final = 500
_COLUMNS: Final = 6
_FIXED_AFTER_NAME: Final = 3  # memory.total, memory.used, utilization.gpu


def parse_gpu_rows(text: str) -> list[GpuMemory]:
    """Parse the output of ``nvidia-smi`` run with :data:`NVIDIA_SMI_ARGS`.

    The name sits between two fixed columns before it and three after it, so a comma inside it does not
    shift the others. A GPU whose ``memory.total`` is not a number (``[N/A]``, ``[Not Supported]``) has
    no memory of its own: it shares the system's (a DGX Spark's GB10, a Jetson), so it is left out and
    the node counts as unified memory. An unreadable ``memory.used`` reads as 0; an unreadable
    ``utilization.gpu`` (``[N/A]``, or a value outside 0 to 100) as None: utilization is only ever shown
    and compared, so it never makes a reading fail.

    Args:
        text: nvidia-smi's standard output; blank lines are ignored.

    Returns:
        The GPUs with their own memory, in the order nvidia-smi listed them.

    Raises:
        GpuProbeError: a row with too few columns, a bad index, an empty UUID or a negative size.
    """
    gpus: list[GpuMemory] = []
    for line in text.splitlines():
        if line.strip():
            gpu = _parse_row(line)
            if gpu is not None:
                gpus.append(gpu)
    return gpus


def _parse_row(line: str) -> GpuMemory | None:
    raw = line.split(",")
    cells = [cell.strip() for cell in raw]
    if len(cells) < _COLUMNS:
        raise GpuProbeError(f"expected {_COLUMNS} columns in nvidia-smi row {line!r}")
    index, uuid, total, used = cells[0], cells[1], _mib(cells[-3], line), _mib(cells[-2], line)
    if not index.isascii() or not index.isdigit() or len(index) > 6:
        raise GpuProbeError(f"bad GPU index in nvidia-smi row {line!r}")
    if not uuid:
        raise GpuProbeError(f"empty GPU UUID in nvidia-smi row {line!r}")
    if total is None:
        _log.debug("GPU %s reports no memory of its own (%r): it shares system memory", uuid, cells[-3])
        return None
    name = ",".join(raw[2:-_FIXED_AFTER_NAME]).strip()
    return GpuMemory(
        index=int(index),
        uuid=uuid,
        name=name,
        total_mib=total,
        used_mib=used or 0.0,
        utilization_percent=_percent(cells[-1]),
    )


def _mib(cell: str, line: str) -> float | None:
    try:
        value = float(cell)
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    if value < 0:
        raise GpuProbeError(f"negative memory size in nvidia-smi row {line!r}")
    return value


def _percent(cell: str) -> float | None:
    try:
        value = float(cell)
    except ValueError:
        return None
    return value if 0 <= value <= 100 else None  # NaN fails both comparisons


class NvidiaSmiProbe:
    """Lists the node's discrete GPUs by running ``nvidia-smi`` once per query.

    A node without nvidia-smi (no NVIDIA driver: a Mac, a CPU box) simply has no discrete GPUs, so a
    missing executable yields ``[]``. A present nvidia-smi that fails, hangs or prints something
    unreadable raises :class:`~mirbad_runtime.exceptions.GpuProbeError` instead of reporting no GPUs:
    admission would otherwise take a node with a wedged driver for unified memory and stop checking
    per-GPU budgets. Callers that only display telemetry log the error and carry on.

    Args:
        executable: the command name (looked up on ``PATH``) or a path to it.
        timeout_s: how long one run may take before it is killed.
    """

    def __init__(self, executable: str | Path = "nvidia-smi", *, timeout_s: float = 10.0) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.executable = str(executable)
        self.timeout_s = timeout_s

    async def query(self) -> list[GpuMemory]:
        """Run nvidia-smi and parse its rows.

        Returns:
            The GPUs with memory of their own; ``[]`` when nvidia-smi is not installed.

        Raises:
            GpuProbeError: nvidia-smi exited non-zero, timed out, could not be run or printed
                unreadable rows.
        """
        found = shutil.which(self.executable)
        if found is None:
            return []
        try:
            with anyio.fail_after(self.timeout_s):
                result = await anyio.run_process([found, *NVIDIA_SMI_ARGS], check=False)
        except TimeoutError:
            raise GpuProbeError(f"nvidia-smi did not answer within {self.timeout_s:g} s") from None
        except FileNotFoundError:
            return []  # removed between the lookup and the run: the driver is gone
        except OSError as exc:
            raise GpuProbeError(f"nvidia-smi could not be run: {exc}") from exc
        return _rows_of(result)


def _rows_of(result: subprocess.CompletedProcess[bytes]) -> list[GpuMemory]:
    if result.returncode != 0:
        stderr = result.stderr.decode(errors="replace").strip()[:_STDERR_SHOWN]
        stdout = result.stdout.decode(errors="replace").strip()[:_STDERR_SHOWN]
        # nvidia-smi prints its own failures ("NVIDIA-SMI has failed ...") on stdout.
        raise GpuProbeError(f"nvidia-smi exited with {result.returncode}: {stderr or stdout or 'no output'}")
    return parse_gpu_rows(result.stdout.decode(errors="replace"))
