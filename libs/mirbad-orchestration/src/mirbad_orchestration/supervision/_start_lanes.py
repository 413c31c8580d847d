"""Per-node start lanes: the master launches one model at a time on each node.

Models that start together compete for the same memory while they size their KV caches, and one of them
runs out. The master's own launches (boot auto-start, a rebooted node's relaunch, crash restarts)
therefore take their node's lane for the whole start, until the model is Ready or has failed. Nodes
are independent: each has its own lane, so a fleet boots its nodes in parallel.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import anyio

from mirbad_orchestration.exceptions import StartLaneBusyError

__all__ = ["DEFAULT_LANE_WAIT", "StartLanes"]

DEFAULT_LANE_WAIT: Final = 1800.0
"""Seconds a launch waits for its node's lane by default: longer than any sane model start."""


class StartLanes:
    """One fair lock per node; waiters get the lane in the order they asked for it.

    Args:
        wait_timeout: seconds :meth:`hold` waits for a busy lane unless told otherwise.
    """

    def __init__(self, *, wait_timeout: float = DEFAULT_LANE_WAIT) -> None:
        self._wait_timeout = wait_timeout
        self._locks: dict[str, anyio.Lock] = {}
        self._holders: dict[str, str] = {}

    @asynccontextmanager
    async def hold(self, node_id: str, *, holder: str, wait: float | None = None) -> AsyncIterator[None]:
        """Hold ``node_id``'s lane for the body of the ``async with`` block.

        Args:
            node_id: the node whose lane to take.
            holder: what takes it (a model id), reported to the launches that wait behind it.
            wait: seconds to wait for a busy lane; the instance's ``wait_timeout`` when ``None``.

        Raises:
            StartLaneBusyError: the lane stayed busy for the whole wait; the body did not run.
        """
        lock = self._locks.get(node_id)
        if lock is None:
            lock = self._locks[node_id] = anyio.Lock()
        wait = self._wait_timeout if wait is None else wait
        acquired = False
        with anyio.move_on_after(wait):
            await lock.acquire()
            acquired = True
        if not acquired:
            raise StartLaneBusyError(node_id, self._holders.get(node_id), wait)
        self._holders[node_id] = holder
        try:
            yield
        finally:
            del self._holders[node_id]
            lock.release()

    def holder(self, node_id: str) -> str | None:
        """What holds ``node_id``'s lane now, or ``None`` when the lane is free."""
        return self._holders.get(node_id)
