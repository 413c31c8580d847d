"""Choosing the host port of a new model container."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ._container_spec import MODEL_LABEL, PORT_LABEL

# Internal to the drivers.
__all__: list[str] = []


def ports_taken_by_containers(containers: Iterable[Mapping[str, Any]]) -> set[int]:
    """Host ports that Docker containers hold or that Mirbad containers have claimed.

    ``containers`` are entries of Docker's container list (``GET /containers/json?all=1``). A Mirbad
    container claims its label's port even while it is not running, so a Failed model keeps its port
    until it is stopped; any container (ours or not) holds the ports it publishes.
    """
    taken: set[int] = set()
    for container in containers:
        labels = container.get("Labels") or {}
        if MODEL_LABEL in labels:
            claimed = _as_port(labels.get(PORT_LABEL))
            if claimed is not None:
                taken.add(claimed)
        for binding in container.get("Ports") or []:
            published = _as_port(binding.get("PublicPort"))
            if published is not None:
                taken.add(published)
    return taken


def loopback_port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a TCP listener could bind ``host:port`` right now (no one else listens there).

    This catches non-Docker listeners; when the agent runs in a container it only sees its own network
    namespace, which is why Docker's published ports are read as well.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # A port left in TIME_WAIT by a stopped model is free for Docker's proxy; only a listener counts.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def lowest_free_port(start: int, end: int, taken: set[int], is_free: Callable[[int], bool]) -> int | None:
    """The lowest port in ``start..end`` (inclusive) not in ``taken`` and accepted by ``is_free``."""
    for port in range(start, end + 1):
        if port not in taken and is_free(port):
            return port
    return None


def _as_port(value: object) -> int | None:
    try:
        port = int(str(value))
    except ValueError:
        return None
    return port if 0 < port < 65536 else None
