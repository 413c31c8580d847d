"""The health monitor: watches every node's models and brings back the ones that should be running.

Every poll reads each reachable node's statuses and logs each state change. When it first sees a node
(at master boot, or when the node comes up later) it starts that node's AutoStart models; when the
node has rebooted since it was last seen, it also relaunches the models the recovery state lists
there. Those launches go through the node's start lane, one model at a time, each until Ready.

A listed model (started and never explicitly stopped) that goes Ready/Starting -> Failed or Ready ->
Stopped has crashed: it is restarted through the lane after a growing backoff, and once it crashed
``crash_restart_limit`` times in a row its restarts are paused (persisted, shown by the UI) until a
start by hand or a long enough Ready spell. Models something else owns right now (a maintenance
window, a tuning run, a job) are left alone. Optionally, a Ready model without requests for its idle
time is stopped, explicitly, so it is not mistaken for a crash. A launch the node refuses for now
(:class:`~mirbad_orchestration.exceptions.NodeNotReadyToStartError`: its llama-server is still being
built, say) is no crash either: it is tried again a poll later.

Starts and stops by hand go through :attr:`HealthMonitor.control` (a :class:`ModelControl`, in
``_lifecycle``), the same path as the monitor's own idle unloads, so that the recovery state, the pauses
and the audit log follow them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import partial

import anyio
from anyio.abc import TaskGroup, TaskStatus

from mirbad_orchestration.exceptions import NodeError
from mirbad_orchestration.fleet import ModelRuntime, NodeView
from mirbad_orchestration.stores import AuditLog
from mirbad_protocol import MirbadError, ModelState, ModelStatus

from ._crash_ledger import CrashLedger, last_line
from ._health_settings import (
    IDLE_UNLOAD_ACTOR,
    DefinitionSource,
    HealthSettings,
    LastUsed,
    SkipCheck,
)
from ._lane_launch import RUNNING, LaneLauncher, LaunchOutcome
from ._lifecycle import ModelControl
from ._recovery_state import RecoveryState
from ._restart_pauses import RestartPauses
from ._start_lanes import StartLanes

__all__ = ["HealthMonitor"]

_logger = logging.getLogger("mirbad_orchestration.health")

_Key = tuple[str, str]  # (node id, model id)


class HealthMonitor:
    """Polls the fleet, auto-starts, relaunches, crash-restarts and unloads models (see the module).

    Args:
        runtime: the fleet's runtime.
        definitions: returns the saved definitions (``registry.list``); read again whenever needed, so
            a launch always uses the latest saved settings.
        recovery: which models each node should be running.
        pauses: the paused automatic restarts.
        lanes: the per-node start lanes, shared with any other launcher of the master.
        audit: where starts and stops are audited; nothing is audited when ``None``.
        settings: intervals, backoff, limits and idle times.
        skip: whether something else owns a model right now (maintenance, tuning, a job).
        last_used: when a model last served a request (from the router's stats), for idle unload.
        clock: returns the current time, aware; tests pass a fake clock's ``now``.
        sleep: waits for a number of seconds; tests pass a fake clock's ``sleep``.
    """

    def __init__(
        self,
        runtime: ModelRuntime,
        definitions: DefinitionSource,
        *,
        recovery: RecoveryState,
        pauses: RestartPauses,
        lanes: StartLanes | None = None,
        audit: AuditLog | None = None,
        settings: HealthSettings | None = None,
        skip: SkipCheck | None = None,
        last_used: LastUsed | None = None,
        clock: Callable[[], datetime] | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        self._runtime = runtime
        self._definitions = definitions
        self._recovery = recovery
        self._audit = audit
        self._settings = settings or HealthSettings()
        self._skip = skip
        self._last_used = last_used
        self._clock = clock or partial(datetime.now, UTC)
        self._sleep = sleep or anyio.sleep
        self._launcher = LaneLauncher(
            runtime=runtime,
            definitions=definitions,
            lanes=lanes or StartLanes(),
            recovery=recovery,
            pauses=pauses,
            audit=audit,
            settings=self._settings,
            skipped=lambda model_id, node_id: self._skipped((node_id, model_id)),
            clock=self._clock,
            sleep=self._sleep,
        )
        self._ledger = CrashLedger(pauses, audit, self._settings, self._clock)
        self._control = ModelControl(runtime, recovery=recovery, ledger=self._ledger, audit=audit)
        self._tasks: TaskGroup | None = None
        self._states: dict[_Key, ModelState] = {}
        self._ready_since: dict[_Key, datetime] = {}
        self._busy: set[_Key] = set()  # a launch, restart or unload of the monitor's own is under way
        self._reachable: dict[str, bool] = {}
        self._boot_ids: dict[str, str | None] = {}

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Monitor until cancelled; ``task_status`` is signalled after the first poll."""
        self._states.clear()
        self._busy.clear()
        self._boot_ids.clear()
        try:
            async with anyio.create_task_group() as tasks:
                self._tasks = tasks
                await self._poll_safely()
                task_status.started()
                while True:
                    await self._sleep(self._settings.poll_interval)
                    await self._poll_safely()
        finally:
            self._tasks = None

    @property
    def control(self) -> ModelControl:
        """The start/stop/restart path by hand; it shares this monitor's crash count and unlistings."""
        return self._control

    # ------------------------------------------------------------------ polling

    async def _poll_safely(self) -> None:
        try:
            await self._poll()
        except Exception:  # one bad poll (a bug, a full disk) must not end the monitoring
            _logger.exception("health poll failed; next try in %gs", self._settings.poll_interval)

    async def _poll(self) -> None:
        await self._control.write_pending_unlistings()
        for node in await self._runtime.nodes():
            statuses = await self._read_node(node.node_id) if node.reachable else None
            self._note_reachability(node.node_id, statuses is not None)
            if statuses is None:
                continue
            try:
                await self._observe_node(node, statuses)
            except Exception:  # one node's trouble (a bug, a full disk) must not blind the others
                _logger.exception("health poll of node %s failed", node.node_id)

    async def _read_node(self, node_id: str) -> dict[str, ModelStatus] | None:
        try:
            return {status.id: status for status in await self._runtime.statuses(node_id)}
        except NodeError:
            return None  # unreadable since it was listed: its models are unknown, not stopped

    def _note_reachability(self, node_id: str, reachable: bool) -> None:
        previous = self._reachable.get(node_id)
        self._reachable[node_id] = reachable
        if previous is not None and previous != reachable:
            _logger.info("node %s: %s", node_id, "reachable" if reachable else "unreachable")

    async def _observe_node(self, node: NodeView, current: dict[str, ModelStatus]) -> None:
        await self._check_boot(node, running={m for m, status in current.items() if status.state in RUNNING})
        now = self._clock()
        listed = await self._control.listed(node.node_id)
        known = {model_id for node_id, model_id in self._states if node_id == node.node_id}
        for model_id in sorted(current.keys() | listed | known):
            await self._observe_model((node.node_id, model_id), current.get(model_id), listed, now)

    async def _observe_model(
        self, key: _Key, status: ModelStatus | None, listed: frozenset[str], now: datetime
    ) -> None:
        model_id = key[1]
        state = status.state if status is not None else ModelState.STOPPED
        error = status.error if status is not None else None
        previous = self._note(key, state, error)
        await self._track_ready(key, state, now)
        if key in self._busy or self._skipped(key):
            return
        if previous is not None and _crashed(previous, state) and model_id in listed:
            await self._count_crash(key, error or f"{previous.value} -> {state.value}")
        elif state is ModelState.READY:
            self._unload_if_idle(key, now)
        elif state is ModelState.STOPPED and model_id not in listed:
            self._states.pop(key, None)  # nothing left to watch until it runs again

    def _note(self, key: _Key, state: ModelState, error: str | None = None) -> ModelState | None:
        previous = self._states.get(key)
        self._states[key] = state
        if previous is not None and previous is not state:
            reason = f" ({last_line(error)})" if error else ""
            _logger.info("model %s on %s: %s -> %s%s", key[1], key[0], previous.value, state.value, reason)
        return previous

    async def _track_ready(self, key: _Key, state: ModelState, now: datetime) -> None:
        if state is not ModelState.READY:
            self._ready_since.pop(key, None)
            return
        since = self._ready_since.setdefault(key, now)
        if now - since >= timedelta(seconds=self._settings.ready_resets_crashes):
            await self._ledger.ready_long_enough(key)

    # ------------------------------------------------------------------ boot and relaunch

    async def _check_boot(self, node: NodeView, *, running: set[str]) -> None:
        """On a node's first sighting or new boot, queue its AutoStart (and, if rebooted, listed) models."""
        node_id = node.node_id
        first = node_id not in self._boot_ids
        previous = await self._recovery.boot_id(node_id) if first else self._boot_ids[node_id]
        # A boot id never recorded counts as a new boot: relaunching listed models that do not run
        # is what a start never followed by a stop asks for anyway.
        booted = node.boot_id is not None and node.boot_id != previous
        if not (first or booted):
            return
        if booted and previous is not None:
            _logger.info(
                "node %s: booted since last seen (boot id %s -> %s)", node_id, previous, node.boot_id
            )
        for key in [key for key in self._states if booted and key[0] == node_id]:
            self._states.pop(key)  # what ran there before the boot is gone, not crashed
            self._ready_since.pop(key, None)
        await self._queue_launches(node_id, relaunch=booted, running=running)
        # Recorded only once the launches are queued: a failure before retries the whole boot.
        if booted:
            await self._recovery.set_boot_id(node_id, node.boot_id)
        self._boot_ids[node_id] = node.boot_id

    async def _queue_launches(self, node_id: str, *, relaunch: bool, running: set[str]) -> None:
        listed = await self._control.listed(node_id) if relaunch else frozenset()
        queue = [
            definition.id
            for definition in await self._definitions()
            if self._runtime.node_for(definition) == node_id
            and (definition.auto_start or definition.id in listed)
            and definition.id not in running
            and (node_id, definition.id) not in self._busy
        ]
        if queue:
            _logger.info("node %s: launching one at a time: %s", node_id, ", ".join(queue))
            self._busy.update((node_id, model_id) for model_id in queue)
            self._spawn(partial(self._launch_queue, node_id, queue))

    async def _launch_queue(self, node_id: str, queue: list[str]) -> None:
        for model_id in queue:
            key = (node_id, model_id)
            try:
                outcome = await self._launch(key)
            finally:
                self._busy.discard(key)
            await self._after_launch(key, outcome)

    async def _launch(self, key: _Key) -> LaunchOutcome:
        outcome = await self._launcher.launch(*key)
        if outcome.status is not None:
            self._note(key, outcome.status.state, outcome.status.error)
        return outcome

    async def _after_launch(self, key: _Key, outcome: LaunchOutcome) -> None:
        # Runs once the key is no longer busy, so a restart it schedules is not forgotten.
        if outcome.failure is not None:
            await self._count_crash(key, outcome.failure, node_down=outcome.node_down)
        elif outcome.deferred is not None:
            # Not the model's failure (its node cannot start it yet): tried again a poll later,
            # with no crash counted, so it neither backs off nor ends paused.
            _logger.debug("model %s on %s: not started yet (%s)", key[1], key[0], outcome.deferred)
            self._busy.add(key)
            self._spawn(partial(self._restart_after, key, self._settings.poll_interval))

    # ------------------------------------------------------------------ crashes

    async def _count_crash(self, key: _Key, error: str, *, node_down: bool = False) -> None:
        delay = await self._ledger.record(key, error, node_down=node_down)
        if delay is not None:
            self._busy.add(key)
            self._spawn(partial(self._restart_after, key, delay))

    async def _restart_after(self, key: _Key, delay: float) -> None:
        outcome = LaunchOutcome()
        try:
            await self._sleep(delay)
            # An explicit stop during the backoff unlisted the model: it is no longer wanted.
            if key[1] in await self._control.listed(key[0]):
                outcome = await self._launch(key)
        finally:
            self._busy.discard(key)
        await self._after_launch(key, outcome)

    # ------------------------------------------------------------------ idle unload

    def _unload_if_idle(self, key: _Key, now: datetime) -> None:
        ttl = self._settings.idle_ttls.get(key[1])
        if ttl is None:
            return
        idle_from = self._ready_since.get(key, now)
        used = self._last_used(key[1]) if self._last_used is not None else None
        if used is not None and used > idle_from:
            idle_from = used
        if now - idle_from >= timedelta(seconds=ttl):
            _logger.info("model %s on %s: no request for %gs, unloading", key[1], key[0], ttl)
            self._busy.add(key)
            self._spawn(partial(self._unload, key))

    async def _unload(self, key: _Key) -> None:
        try:
            await self._control.stop(key[1], actor=IDLE_UNLOAD_ACTOR)
        except MirbadError as exc:
            _logger.warning("model %s on %s: idle unload failed: %s", key[1], key[0], exc)
        finally:
            self._busy.discard(key)

    # ------------------------------------------------------------------ helpers

    def _skipped(self, key: _Key) -> bool:
        return self._skip is not None and self._skip(key[1], key[0])

    def _spawn(self, job: Callable[[], Awaitable[None]]) -> None:
        assert self._tasks is not None, "the monitor spawns work only while it runs"
        self._tasks.start_soon(self._guarded, job)

    async def _guarded(self, job: Callable[[], Awaitable[None]]) -> None:
        try:
            await job()
        except Exception:  # a failed launch or unload must not end the monitoring
            _logger.exception("health monitor task failed")


def _crashed(previous: ModelState, state: ModelState) -> bool:
    if state is ModelState.FAILED:
        return previous in RUNNING
    return state is ModelState.STOPPED and previous is ModelState.READY
