"""The router's counters kept in memory: total, failed and in-flight requests per served name."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from mirbad_protocol import RouterModelStats

from ._contracts import StatsSink

__all__ = ["RouterStats"]


@dataclass
class _Counters:
    total: int = 0
    failed: int = 0
    in_flight: int = 0


class RouterStats(StatsSink):
    """A :class:`StatsSink` that counts in memory, for the status page and ``GET /api/status``.

    A lock guards the counters, so callers may share one instance between the event loop and worker
    threads; each call holds it for a few additions only.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, _Counters] = {}

    def begin(self, served_name: str) -> None:
        """Count one more request for ``served_name`` and mark it in flight."""
        with self._lock:
            counters = self._counters.setdefault(served_name, _Counters())
            counters.total += 1
            counters.in_flight += 1

    def end(self, served_name: str, *, failed: bool) -> None:
        """Take a request for ``served_name`` out of flight, counting it as failed when it failed."""
        with self._lock:
            counters = self._counters.setdefault(served_name, _Counters())
            counters.in_flight = max(0, counters.in_flight - 1)
            if failed:
                counters.failed += 1

    def snapshot(self) -> list[RouterModelStats]:
        """The counters of every served name seen so far, sorted by name, taken at one instant."""
        with self._lock:
            rows = [
                RouterModelStats(served_name=name, total=c.total, failed=c.failed, in_flight=c.in_flight)
                for name, c in self._counters.items()
            ]
        return sorted(rows, key=lambda row: row.served_name)

    def for_model(self, served_name: str) -> RouterModelStats:
        """The counters of one served name (all zero when it was never asked for)."""
        with self._lock:
            c = self._counters.get(served_name, _Counters())
            return RouterModelStats(
                served_name=served_name, total=c.total, failed=c.failed, in_flight=c.in_flight
            )
