"""What a running model measurably uses: a native process's resident set, a container's memory usage.

The budget is what admission reserved; these are what the telemetry reports beside it, so a model
that outgrows its budget shows. A process is read from ``/proc/{pid}/status`` (``VmRSS``: Linux only;
elsewhere nothing is measured). A container is read from Docker's stats, less the inactive page cache,
as ``docker stats`` shows it (cgroup v2 ``inactive_file``, v1 ``total_inactive_file``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

__all__ = ["PROC_ROOT", "container_memory_bytes", "parse_vm_rss", "process_rss_bytes"]

PROC_ROOT: Final = Path("/proc")
"""Where the process table is read."""

_VM_RSS: Final = re.compile(r"^VmRSS:[ \t]*([0-9]+)[ \t]+kB[ \t]*$", re.MULTILINE)
# cgroup v2 names it inactive_file, v1 total_inactive_file; docker stats subtracts whichever is there.
_INACTIVE_KEYS: Final = ("inactive_file", "total_inactive_file")


def parse_vm_rss(status: str) -> int | None:
    """The resident set in bytes from the text of ``/proc/{pid}/status``; None without a ``VmRSS`` line."""
    found = _VM_RSS.search(status)
    return int(found.group(1)) * 1024 if found else None


def process_rss_bytes(pid: int, *, proc: Path = PROC_ROOT) -> int | None:
    """The resident set of process ``pid`` in bytes, or None when it cannot be read (blocking: a thread).

    Args:
        pid: the process.
        proc: the process table's folder (a test's stand-in).
    """
    try:
        text = (proc / str(pid) / "status").read_text(encoding="utf-8", errors="replace")
    except OSError:
        # Gone, not Linux, or not ours to read: the telemetry reports no measure rather than failing.
        return None
    return parse_vm_rss(text)


def container_memory_bytes(stats: Mapping[str, Any]) -> int | None:
    """A container's memory use in bytes from a Docker stats document, or None when it has none.

    Docker reports ``usage`` including the page cache the kernel can drop at once; like ``docker
    stats``, the inactive part of it is left out.
    """
    memory = stats.get("memory_stats")
    if not isinstance(memory, Mapping):
        return None
    usage = memory.get("usage")
    if not isinstance(usage, int) or isinstance(usage, bool) or usage < 0:
        return None
    detail = memory.get("stats")
    inactive = next(
        (detail[key] for key in _INACTIVE_KEYS if isinstance(detail, Mapping) and key in detail), 0
    )
    if not isinstance(inactive, int) or isinstance(inactive, bool) or not 0 <= inactive <= usage:
        inactive = 0
    return usage - inactive
