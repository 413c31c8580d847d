"""What ``mirbad up`` claims before it starts anything: its data directory and its ports.

Two ``mirbad up`` on one host must not collide silently. Each port is bound (or, for the local agent's
port, probed) before anything starts, and a port that is taken is an error naming the flag and the
variable that move it. A data directory serves one ``mirbad up`` at a time: a second one would start a
second agent over the first one's state and stop the first one's agent as a leftover, so it is refused
with the pid of the one that holds it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from ._serving import bind
from ._settings import ENVIRONMENT
from .exceptions import DataDirInUseError, ServeError

__all__ = ["bind_port", "claim_data_dir", "probe_port"]

LOCK_FILE: Final = "up.lock"

_FLAGS: Final = {"port": "--port", "enroll_port": "--enroll-port", "agent_port": "--agent-port"}


def bind_port(host: str, port: int, purpose: str, setting: str) -> socket.socket:
    """A listening socket on ``host:port``, or an error saying which flag moves it.

    Args:
        host: the address to bind.
        port: the port.
        purpose: what listens there, for the message.
        setting: the :class:`MasterSettings` field that chose the port (``port``, ``enroll_port`` ...).

    Raises:
        ServeError: the port is taken (or the address is not this machine's).
    """
    try:
        return bind(host, port, purpose)
    except ServeError as exc:
        raise ServeError(f"{exc}. {_how_to_move(setting)}") from None


def probe_port(host: str, port: int, purpose: str, setting: str) -> None:
    """Check that ``host:port`` is free now, for a listener another process opens later.

    Raises:
        ServeError: it is taken; the message names the flag that moves it.
    """
    bind_port(host, port, purpose, setting).close()


@contextlib.contextmanager
def claim_data_dir(data_dir: Path) -> Iterator[None]:
    """Hold ``data_dir`` for this ``mirbad up`` until the block ends (an advisory lock on POSIX).

    Raises:
        DataDirInUseError: another ``mirbad up`` holds it.
    """
    if sys.platform == "win32":  # no fcntl; a Windows master runs as a service, one per machine
        yield
        return
    import fcntl

    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    handle = (data_dir / LOCK_FILE).open("a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise DataDirInUseError(
                f"the data directory {data_dir} is in use by another `mirbad up` (pid {holder}); "
                "stop that one, or give this one its own --data-dir (and --port, --enroll-port)"
            ) from None
        handle.truncate(0)
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield
    finally:
        handle.close()


def _how_to_move(setting: str) -> str:
    return (
        f"Is another `mirbad up` running? Choose another port with {_FLAGS[setting]} "
        f"(or {ENVIRONMENT[setting]})."
    )
