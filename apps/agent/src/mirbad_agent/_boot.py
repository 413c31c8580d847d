"""The agent's boot id: what the master compares to learn that what ran on the node is gone.

The master relaunches a node's started models when the node's boot id changes (a reboot ends every
model). On bare metal that is the kernel's boot id. An agent in a container has a second way to lose
its models: a new container (``docker-compose down`` then ``up``, an image upgrade, a pod recreated)
starts a new PID namespace, and the llama-server children of the old agent ended with the old one,
while the kernel's boot id stays the same. So in a container the boot id is the kernel's combined with
the start time of the container's PID 1 (in clock ticks since the kernel booted), which changes with
every new container or restart of it and with nothing else. vLLM containers belong to the host's
dockerd and outlive the agent's container; the master relaunches only started models that are not
running, so they are left alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["boot_id", "in_container"]

# Files a container runtime leaves in the root of its containers: Docker's, Podman's.
_CONTAINER_MARKERS = (".dockerenv", "run/.containerenv")
# Set in every Kubernetes pod, whose containerd leaves no marker file.
_KUBERNETES_ENV = "KUBERNETES_SERVICE_HOST"
# /proc/PID/stat: the fields after the command's closing parenthesis start at field 3 (state);
# starttime is field 22.
_START_TIME_INDEX = 22 - 3


def boot_id(root: Path = Path("/"), environ: Mapping[str, str] = os.environ) -> str | None:
    """This agent's boot id: the kernel's, plus its container's start identity inside a container.

    Args:
        root: the file system root (a test's stand-in of ``/proc`` and the marker files).
        environ: the process environment (a test's stand-in).

    Returns:
        ``KERNEL_BOOT_ID`` on bare metal, ``KERNEL_BOOT_ID/PID1_START_TICKS`` in a container; None
        where Linux's boot id cannot be read (the master then cannot tell a reboot from a restart).
    """
    kernel = _read(root / "proc/sys/kernel/random/boot_id")
    if kernel is None or not in_container(root, environ):
        return kernel
    start = _init_start_ticks(root)
    # Without PID 1's start time a container is known only by the kernel's boot, as before.
    return f"{kernel}/{start}" if start is not None else kernel


def in_container(root: Path = Path("/"), environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this process runs in a Docker or Podman container or a Kubernetes pod.

    Args:
        root: the file system root (a test's stand-in).
        environ: the process environment (a test's stand-in).
    """
    return _KUBERNETES_ENV in environ or any((root / marker).exists() for marker in _CONTAINER_MARKERS)


def _init_start_ticks(root: Path) -> str | None:
    stat = _read(root / "proc/1/stat")
    if stat is None or ")" not in stat:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return fields[_START_TIME_INDEX] if len(fields) > _START_TIME_INDEX else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None
