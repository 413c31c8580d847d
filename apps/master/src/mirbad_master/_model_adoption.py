"""Adopting what a recovered fleet's nodes run: the models become this master's running set, as they run.

A recovered master has no running set of its own (``running-models.json`` was lost with the old
master's disk), so without adoption a model that crashed on a node after the recovery would stay
down. Nothing is started, stopped or restarted here: the running models are only listed, audited
(``model.adopt``) and logged with their pids. Each node is claimed for the recovered master first
(its fence raised to the recovered epoch), so the lost master, should it come back, is refused there
at once rather than from the recovered master's first command (docs/takeover.md).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Final

import anyio

from mirbad_orchestration import ModelRegistry
from mirbad_orchestration.fleet import StatusCache
from mirbad_orchestration.stores import AuditLog
from mirbad_orchestration.supervision import RecoveryState
from mirbad_protocol import MirbadError, ModelDefinition, ModelState, ModelStatus

from ._composition import MasterServices
from ._fleet_recovery import RECOVERY_ACTOR

__all__ = ["RunningModelAdoption"]

_RUNNING: Final = (ModelState.STARTING, ModelState.READY)
_logger = logging.getLogger("mirbad_master")


@dataclass(frozen=True)
class RunningModelAdoption:
    """Makes what the nodes run this master's running set, so a crash is restarted as before.

    Only a model registered here and placed on the node that runs it is adopted; nothing is started,
    stopped or restarted. It reads the status cache the node monitor fills.

    Attributes:
        models: the model registry.
        cache: the node monitor's status cache.
        recovery: the running set (``running-models.json``).
        audit: the audit log (``model.adopt`` lines).
        node_for: the node a definition runs on (its placement, else the default node).
        claim: claims a node for this master (raises its fence); None: nodes are not claimed.
    """

    models: ModelRegistry
    cache: StatusCache
    recovery: RecoveryState
    audit: AuditLog
    node_for: Callable[[ModelDefinition], str]
    claim: Callable[[str], Awaitable[object]] | None = None

    @classmethod
    def of(cls, services: MasterServices) -> RunningModelAdoption:
        """The adoption over a master's services."""

        async def claim(node_id: str) -> object:
            return await (await services.client_of(node_id)).claim()

        return cls(
            services.models,
            services.cache,
            services.recovery,
            services.audit,
            services.runtime.node_for,
            claim,
        )

    async def adopt(self, node_ids: Collection[str] | None = None) -> tuple[list[tuple[str, str]], set[str]]:
        """Adopt what the reachable nodes (of ``node_ids``; all when None) run now.

        Returns:
            ``(node id, model id)`` of each model adopted, and the nodes that did not answer (nothing
            adopted there yet).
        """
        definitions = {model.id: model for model in await self.models.list()}
        adopted: list[tuple[str, str]] = []
        unreached: set[str] = set()
        for node in self.cache.nodes():
            if node_ids is not None and node.node_id not in node_ids:
                continue
            if not node.reachable:
                unreached.add(node.node_id)
                continue
            await self._claim(node.node_id)
            for status in node.models:
                definition = definitions.get(status.id)
                if (
                    status.state in _RUNNING
                    and definition is not None
                    and self.node_for(definition) == node.node_id
                ):
                    await self._adopt(node.node_id, status)
                    adopted.append((node.node_id, status.id))
        return adopted, unreached

    async def adopt_when_reached(self, pending: set[str], *, within_s: float, poll_s: float) -> set[str]:
        """Adopt on each node of ``pending`` once it answers; return the nodes that never did in time."""
        with anyio.move_on_after(within_s):
            while pending:
                await anyio.sleep(poll_s)
                _, pending = await self.adopt(pending)
        if pending:
            _logger.warning(
                "fleet recovery: %s did not answer within %g s; what they run is not adopted (a model "
                "started by hand there is this master's again)",
                ", ".join(sorted(pending)),
                within_s,
            )
        return pending

    async def _claim(self, node_id: str) -> None:
        if self.claim is None:
            return
        try:
            await self.claim(node_id)
        except MirbadError as exc:
            # Not fatal: the node follows at this master's first command to it instead.
            _logger.warning("fleet recovery: could not claim %s for this master: %s", node_id, exc)

    async def _adopt(self, node_id: str, status: ModelStatus) -> None:
        await self.recovery.add(node_id, status.id)
        await self.audit.record(RECOVERY_ACTOR, "model.adopt", status.id, node_id=node_id)
        _logger.info("fleet recovery: adopted %s on %s (pid %s)", status.id, node_id, status.pid)
