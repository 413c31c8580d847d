"""Test doubles shipped with the library, for the unit tests of the master's logic.

:class:`FakeRuntime` implements :class:`~mirbad_orchestration.fleet.ModelRuntime` for a fleet held in memory:
tests start and stop models through it, steer it (a model goes Ready, crashes, a node reboots or drops
off the network) and read back what was asked of it. :class:`FakeClock` is virtual time for code that
takes a clock and a sleep function (the health monitor), so backoffs of minutes take no time at all.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

import anyio
import anyio.lowlevel
import anyio.to_thread

from mirbad_protocol import ModelDefinition, ModelState, ModelStatus

from .commandline import launch_spec_for
from .exceptions import NodeUnreachableError, UnknownNodeError
from .fleet import ModelRuntime, NodeView

__all__ = ["FakeClock", "FakeRuntime", "StartCall"]

_RUNNING = (ModelState.STARTING, ModelState.READY)
_EPOCH = datetime(2025, 1, 1, tzinfo=UTC)
_SETTLE_ROUNDS = 20


class StartCall(NamedTuple):
    """One call of :meth:`FakeRuntime.start` (or the start half of a restart)."""

    node_id: str
    model_id: str
    force: bool = False


@dataclass
class _Node:
    reachable: bool = True
    boots: int = 1
    models: dict[str, ModelStatus] = field(default_factory=dict)

    def boot_id(self, node_id: str) -> str:
        return f"{node_id}-boot-{self.boots}"


class FakeRuntime(ModelRuntime):
    """A fleet that runs nothing: every node is a dict of model statuses.

    A started model takes ``start_state`` (Starting unless told otherwise) on the node its placement
    names, else on ``default_node``; tests then move it on with :meth:`set_state`.

    Args:
        nodes: the node ids of the fleet (all reachable at first).
        default_node: the node of definitions without a placement; the first node when ``None``.
        start_state: the state a newly started model reports.
        clock: the source of ``started_at``.

    Attributes:
        starts: every start asked for, in order (refused ones included).
        stops: every model id asked to stop, in order.
    """

    def __init__(
        self,
        nodes: Iterable[str] = ("local",),
        *,
        default_node: str | None = None,
        start_state: ModelState = ModelState.STARTING,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._nodes = {node_id: _Node() for node_id in nodes}
        self.default_node = default_node or next(iter(self._nodes))
        self.start_state = start_state
        self._clock = clock or (lambda: datetime.now(UTC))
        self._served_names: dict[str, str] = {}
        self._failures: list[BaseException] = []
        self.starts: list[StartCall] = []
        self.stops: list[str] = []

    # ------------------------------------------------------------------ steering

    def add_node(self, node_id: str) -> None:
        """Add a reachable, empty node."""
        self._nodes.setdefault(node_id, _Node())

    def set_reachable(self, node_id: str, reachable: bool) -> None:
        """Make ``node_id``'s agent answer or not; its models stay as they are."""
        self._nodes[node_id].reachable = reachable

    def reboot(self, node_id: str) -> None:
        """Reboot ``node_id``: its models are gone and it reports a new boot id."""
        node = self._nodes[node_id]
        node.models.clear()
        node.boots += 1

    def set_state(self, model_id: str, state: ModelState, *, error: str | None = None) -> None:
        """Move a started model to ``state`` (Stopped removes it, like a container that vanished)."""
        node_id, status = self._find(model_id)
        models = self._nodes[node_id].models
        if state is ModelState.STOPPED:
            del models[model_id]
        else:
            models[model_id] = status.model_copy(update={"state": state, "error": error})

    def fail_next_start(self, error: BaseException) -> None:
        """Make the next start raise ``error`` and launch nothing (queue several for several starts)."""
        self._failures.append(error)

    def running(self, node_id: str) -> dict[str, ModelState]:
        """The models on ``node_id`` and their states, whatever its reachability."""
        return {model_id: status.state for model_id, status in sorted(self._nodes[node_id].models.items())}

    # ------------------------------------------------------------------ the runtime contract

    def node_for(self, definition: ModelDefinition) -> str:
        """The placement's node, else :attr:`default_node`."""
        return definition.placement.node_id if definition.placement else self.default_node

    async def start(self, definition: ModelDefinition, *, force: bool = False) -> ModelStatus:
        """Record the start and run the model, or return its status when it already runs."""
        node_id = self.node_for(definition)
        self.starts.append(StartCall(node_id, definition.id, force))
        self._served_names[definition.id] = definition.served_name
        node = self._reachable(node_id)
        if self._failures:
            raise self._failures.pop(0)
        current = node.models.get(definition.id)
        if current is not None and current.state in _RUNNING:
            return current
        status = ModelStatus(
            id=definition.id,
            served_name=definition.served_name,
            state=self.start_state,
            runtime=definition.runtime,
            node_id=node_id,
            config_hash=launch_spec_for(definition).config_hash,
            budget_gib=definition.memory_budget_gib,
            started_at=self._clock(),
        )
        node.models[definition.id] = status
        return status

    async def stop(self, model_id: str) -> None:
        """Record the stop and remove the model from its node."""
        self.stops.append(model_id)
        for node_id, node in self._nodes.items():
            if model_id in node.models:
                self._reachable(node_id).models.pop(model_id)

    async def restart(self, definition: ModelDefinition, *, force: bool = False) -> ModelStatus:
        """Stop, then start with ``definition``."""
        await self.stop(definition.id)
        return await self.start(definition, force=force)

    async def status(self, model_id: str) -> ModelStatus:
        """The model's status; Stopped on the default node when no node runs it."""
        for node_id, node in self._nodes.items():
            if model_id in node.models:
                return self._reachable(node_id).models[model_id]
        served_name = self._served_names.get(model_id, model_id)
        return ModelStatus(id=model_id, served_name=served_name, state=ModelState.STOPPED)

    async def statuses(self, node_id: str | None = None) -> list[ModelStatus]:
        """The models of ``node_id`` (raising when it is unreachable), or of every reachable node."""
        if node_id is not None:
            return list(self._reachable(node_id).models.values())
        return [status for node in self._nodes.values() if node.reachable for status in node.models.values()]

    async def nodes(self) -> list[NodeView]:
        """Every node with its reachability and boot id."""
        return [
            NodeView(node_id, node.reachable, node.boot_id(node_id))
            for node_id, node in sorted(self._nodes.items())
        ]

    def _reachable(self, node_id: str) -> _Node:
        node = self._nodes.get(node_id)
        if node is None:
            raise UnknownNodeError(node_id)
        if not node.reachable:
            raise NodeUnreachableError(node_id, f"node {node_id!r} does not answer (fake)")
        return node

    def _find(self, model_id: str) -> tuple[str, ModelStatus]:
        for node_id, node in self._nodes.items():
            if model_id in node.models:
                return node_id, node.models[model_id]
        raise KeyError(f"model {model_id!r} is not running anywhere")


class FakeClock:
    """Virtual time: :meth:`sleep` waits until a test moves the clock past its end with :meth:`advance`.

    Pass :meth:`now` and :meth:`sleep` to the code under test, or the clock itself where it takes a
    ``clock=`` callable (the stores). :meth:`advance` wakes the sleepers in deadline order and lets
    every task run until it blocks again before it moves on, so a test reads the same sequence of
    events on every run.

    Args:
        start: the time the clock shows at first.
    """

    def __init__(self, start: datetime = _EPOCH) -> None:
        self._now = start
        self._sleepers: list[tuple[datetime, int, anyio.Event]] = []
        self._order = itertools.count()

    def now(self) -> datetime:
        """The virtual time."""
        return self._now

    def __call__(self) -> datetime:
        """The virtual time, so the clock itself serves as a ``clock=`` callable."""
        return self._now

    async def sleep(self, seconds: float) -> None:
        """Wait until the virtual time has moved ``seconds`` on."""
        if seconds <= 0:
            await anyio.lowlevel.checkpoint()
            return
        wake = anyio.Event()
        heapq.heappush(self._sleepers, (self._now + timedelta(seconds=seconds), next(self._order), wake))
        await wake.wait()

    async def advance(self, seconds: float | timedelta = 0.0) -> None:
        """Move the time ``seconds`` (or a timedelta) on, waking each sleeper whose time has come in order."""
        step = seconds if isinstance(seconds, timedelta) else timedelta(seconds=seconds)
        target = self._now + step
        await self.settle()
        while self._sleepers and self._sleepers[0][0] <= target:
            self._now = max(self._now, self._sleepers[0][0])
            while self._sleepers and self._sleepers[0][0] <= self._now:
                heapq.heappop(self._sleepers)[2].set()
            await self.settle()
        self._now = target
        await self.settle()

    @staticmethod
    async def settle() -> None:
        """Wait until every other task is blocked and no worker thread (file I/O) is still busy."""
        threads = anyio.to_thread.current_default_thread_limiter()
        while True:
            # Let woken tasks run until they block again first: anyio's check sleeps 0.1 s whenever it
            # finds a task still running, which would make long virtual waits slow in real time.
            for _ in range(_SETTLE_ROUNDS):
                await anyio.lowlevel.checkpoint()
            await anyio.wait_all_tasks_blocked()
            if threads.borrowed_tokens == 0:
                return
            # A task waiting on a worker thread looks blocked; give the thread time to finish.
            await anyio.sleep(0.001)
