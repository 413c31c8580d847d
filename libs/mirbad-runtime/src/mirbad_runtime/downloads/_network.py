"""How far a download trusts the network: connect, read and total bounds, a size cap, a rate floor.

A hub or registry that accepts a connection and never answers, answers without end, or drips a file a
byte at a time must not hold the agent: every call has a connect and a read timeout, planning has a
total deadline, an answer that is only metadata (repository info, a manifest) is read up to a cap, and
a transfer must keep up a minimum average rate over a window (so its deadline grows with its size).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

import anyio
import httpx

from mirbad_runtime.exceptions import SourceUnavailableError

__all__ = ["MAX_INFO_BYTES", "NetworkLimits", "RateFloor", "read_capped"]

MAX_INFO_BYTES: Final = 1024 * 1024
"""The default cap of a repository-info or manifest answer (1 MiB)."""


@dataclass(frozen=True)
class NetworkLimits:
    """The bounds of every call a download makes to a hub or registry.

    Attributes:
        connect_timeout_s: how long a connection (with TLS) may take to open.
        read_timeout_s: the longest silence while waiting for an answer or its next bytes.
        plan_timeout_s: the total bound of resolving a request (repository info or manifest, redirects
            and all), including the wait for a planning slot.
        max_info_bytes: the largest repository-info or manifest answer read.
        min_bytes_per_second: the average rate a transfer must keep up over each ``rate_window_s``.
        rate_window_s: the window the rate is measured over (a slower transfer fails as stalled).
        max_planning: how many starts resolve their source at once (the others wait, within
            ``plan_timeout_s``).
    """

    connect_timeout_s: float = 10.0
    read_timeout_s: float = 30.0
    plan_timeout_s: float = 60.0
    max_info_bytes: int = MAX_INFO_BYTES
    min_bytes_per_second: int = 10 * 1024
    rate_window_s: float = 60.0
    max_planning: int = 4

    def timeout(self) -> httpx.Timeout:
        """The per-call bounds as an httpx timeout (a write is bounded like a read)."""
        return httpx.Timeout(self.read_timeout_s, connect=self.connect_timeout_s, pool=self.connect_timeout_s)


async def read_capped(chunks: AsyncIterator[bytes], cap: int, what: str) -> bytes:
    """The whole of ``chunks`` if it stays within ``cap`` bytes.

    Raises:
        SourceUnavailableError: more than ``cap`` bytes arrived (reading stops there).
    """
    buffer = bytearray()
    async for chunk in chunks:
        buffer += chunk
        if len(buffer) > cap:
            raise SourceUnavailableError(f"{what} is larger than {cap} bytes; the source is not trusted")
    return bytes(buffer)


class RateFloor:
    """A cancel scope that ends a transfer which brings fewer than the floor's bytes in a window.

    Each time a window's quota of bytes has arrived the deadline moves one window on, so a transfer
    at or above the rate never ends, and one below it (or silent) ends within a window.
    """

    def __init__(self, min_bytes_per_second: int, window_s: float) -> None:
        self.window_s = window_s
        self.quota = max(1, int(min_bytes_per_second * window_s))
        self.scope = anyio.CancelScope(deadline=anyio.current_time() + window_s)
        self._counted = 0

    def arrived(self, count: int) -> None:
        """Count ``count`` bytes received; a full quota restarts the window."""
        self._counted += count
        if self._counted >= self.quota:
            self._counted = 0
            self.scope.deadline = anyio.current_time() + self.window_s

    @property
    def stalled(self) -> bool:
        """Whether the floor ended the transfer."""
        return self.scope.cancelled_caught

    def reason(self) -> str:
        """Why a stalled transfer ended."""
        return f"stalled: fewer than {self.quota} bytes arrived in {self.window_s:g} s"
