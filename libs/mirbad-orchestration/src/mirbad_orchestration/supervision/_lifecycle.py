"""Starting, stopping and restarting a model: the one path every caller takes.

The admin API and the portal (both through the master's write path), a request that starts a model on
demand and the health monitor's idle unload all call :class:`ModelControl`, so that the recovery state,
the crash count, the restart pause and the audit log follow every start and stop the same way:

- a start or restart by hand forgets the model's crashes, lifts its pause, lists it in the recovery
  state (so it is relaunched after a node reboot) and is audited; a refused start unlists it again;
- a stop unlists the model *first*, so that its going down is never taken for a crash.

The health monitor builds the control it shares with its own launches (:attr:`HealthMonitor.control`):
both must see the same crash count and the same pending unlistings.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from mirbad_orchestration.exceptions import StateFileError
from mirbad_orchestration.fleet import ModelRuntime
from mirbad_orchestration.stores import AuditLog
from mirbad_protocol import MirbadError, ModelDefinition, ModelStatus

from ._crash_ledger import CrashLedger
from ._lane_launch import audit_model
from ._recovery_state import RecoveryState

__all__ = ["ModelControl"]

_logger = logging.getLogger("mirbad_orchestration.health")


class ModelControl:
    """Starts, stops and restarts models on behalf of a person or the master itself (see the module).

    Args:
        runtime: the fleet's runtime.
        recovery: which models each node should be running.
        ledger: the health monitor's crash bookkeeping, forgotten on a start or stop by hand.
        audit: where starts and stops are audited; nothing is audited when ``None``.
    """

    def __init__(
        self,
        runtime: ModelRuntime,
        *,
        recovery: RecoveryState,
        ledger: CrashLedger,
        audit: AuditLog | None,
    ) -> None:
        self._runtime = runtime
        self._recovery = recovery
        self._ledger = ledger
        self._audit = audit
        self._unlisting: set[str] = set()  # stopped explicitly; the recovery file has not taken it yet

    async def start(self, definition: ModelDefinition, *, actor: str, force: bool = False) -> ModelStatus:
        """Start a model by hand: clears its crash count and pause, lists it, audits the start.

        Raises:
            MirbadError: the runtime refused or failed the start (the model is then not listed).
        """
        return await self._by_hand("model.start", definition, actor, self._runtime.start, force)

    async def restart(self, definition: ModelDefinition, *, actor: str, force: bool = False) -> ModelStatus:
        """Restart a model by hand with ``definition``, like :meth:`start` otherwise."""
        return await self._by_hand("model.restart", definition, actor, self._runtime.restart, force)

    async def stop(self, model_id: str, *, actor: str) -> None:
        """Stop a model explicitly: unlisted first, so its going down is never taken for a crash.

        A stop never waits on the disk: when the recovery state cannot be written (a full disk), the
        model is still stopped, the unlisting is kept in memory (so it is neither restarted nor
        relaunched) and written on every poll of the health monitor until the file takes it.

        Raises:
            MirbadError: the runtime failed the stop (the model stays unlisted: it was asked to stop).
            StateFileError: the model was stopped, but the recovery state could not record it.
        """
        unrecorded = await self._unlist(model_id)
        self._ledger.forget(model_id)
        try:
            await self._runtime.stop(model_id)
        except MirbadError as exc:
            await audit_model(self._audit, actor, "model.stop", model_id, None, "failed", str(exc))
            raise
        await audit_model(self._audit, actor, "model.stop", model_id, None, "ok")
        if unrecorded is not None:
            raise StateFileError(
                unrecorded.path,
                f"model {model_id!r} was stopped, but its stop could not be recorded ({unrecorded.reason}); "
                "it is written as soon as there is room again, and until then a restart of the master "
                "would bring the model back",
                disk_full=unrecorded.disk_full,
            )

    async def listed(self, node_id: str) -> frozenset[str]:
        """The models ``node_id`` should be running: listed, minus stops the file has not taken yet."""
        return await self._recovery.running(node_id) - self._unlisting

    async def write_pending_unlistings(self) -> None:
        """Record the stops the recovery state could not take earlier (the disk was full)."""
        for model_id in sorted(self._unlisting):
            try:
                await self._recovery.remove(model_id)
            except StateFileError:
                return  # still no room; the next poll tries again
            self._unlisting.discard(model_id)
            _logger.info("model %s: its stop is recorded in the recovery state at last", model_id)

    async def _unlist(self, model_id: str) -> StateFileError | None:
        try:
            await self._recovery.remove(model_id)
        except StateFileError as exc:
            self._unlisting.add(model_id)
            return exc
        self._unlisting.discard(model_id)
        return None

    async def _by_hand(
        self,
        action: str,
        definition: ModelDefinition,
        actor: str,
        call: Callable[..., Awaitable[ModelStatus]],
        force: bool,
    ) -> ModelStatus:
        node_id = self._runtime.node_for(definition)
        await self._ledger.forgive(definition.id, by=actor)
        await self._recovery.add(node_id, definition.id)
        self._unlisting.discard(definition.id)
        try:
            status: ModelStatus = await call(definition, force=force)
        except MirbadError as exc:
            await self._recovery.remove(definition.id, node_id=node_id)
            await audit_model(self._audit, actor, action, definition.id, node_id, "failed", str(exc))
            raise
        await audit_model(self._audit, actor, action, definition.id, node_id, "ok")
        return status
