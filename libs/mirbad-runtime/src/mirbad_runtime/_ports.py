"""Choosing a free loopback port for a new model, shared by the container and process drivers."""

from __future__ import annotations

import socket
from collections.abc import Callable

# Internal to the drivers.
__all__: list[str] = []


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
