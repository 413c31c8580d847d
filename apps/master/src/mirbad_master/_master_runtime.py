"""The master's runtime: the remote runtime, remembering what it launched and, for a fleet of one, boots.

Two things the agents do not tell the master, and one check of every start:

* which definition a running instance was launched with, remembered for the launches of this master
  process: the model views read what runs from the argv a node reports, and fall back on it (and take
  the settings the command line does not carry from it) only where the label matches;
* that the local node's models are gone. A fleet of one stops its models when it stops, so each
  ``mirbad up`` is a new boot of the local node: the runtime reports a per-run boot id for it (when the
  agent reports none of its own), and the health monitor relaunches what the recovery state lists;
* the start gate (``mirbad up``'s llama-server build): checked before every start and restart, so the
  admin API, the portal, ``/v1`` and the health monitor are all refused alike, before the agent is asked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from mirbad_orchestration.fleet import LOCAL_NODE_ID, NodeMonitor, NodeView, RemoteModelRuntime
from mirbad_protocol import ModelDefinition, ModelState, ModelStatus

__all__ = ["MasterRuntime", "StartGate"]

StartGate = Callable[[ModelDefinition, str], None]
"""``(definition, node_id) -> None``: raises a ``MirbadError`` when the node must not start it now."""

_RUNNING = (ModelState.STARTING, ModelState.READY)


class MasterRuntime(RemoteModelRuntime):
    """:class:`~mirbad_orchestration.fleet.RemoteModelRuntime` with launch records and a local boot id.

    Args:
        monitor: the node monitor (registry, clients and status cache).
        local_boot_id: the boot id reported for the local node instead of its host's; a fleet of one
            passes a new one each run, because its agent (and the models) stop with it, so every run is
            a "reboot" after which the previously running set comes back. ``None`` keeps the agent's own.
        default_node_id: the node of definitions without a placement (``local`` by default).
        start_gate: checked before each start and restart; what it raises is the caller's refusal.
    """

    def __init__(
        self,
        monitor: NodeMonitor,
        *,
        local_boot_id: str | None = None,
        default_node_id: str = LOCAL_NODE_ID,
        start_gate: StartGate | None = None,
    ) -> None:
        super().__init__(monitor, default_node_id=default_node_id)
        self._local_boot_id = local_boot_id
        self._start_gate = start_gate
        self._launched: dict[str, ModelDefinition] = {}

    def launched(self, model_id: str) -> ModelDefinition | None:
        """The definition this master last launched ``model_id`` with, or None."""
        return self._launched.get(model_id)

    async def start(self, definition: ModelDefinition, *, force: bool = False) -> ModelStatus:
        """Start as the remote runtime does, remembering ``definition`` when this call launched it."""
        self._check_gate(definition)
        holder = self._cache.locate(definition.id)
        current = holder.model(definition.id) if holder is not None else None
        status = await super().start(definition, force=force)
        # A model already running keeps what it was launched with; only a new launch is recorded.
        if current is None or current.state not in _RUNNING:
            self._launched[definition.id] = definition
        return status

    async def restart(self, definition: ModelDefinition, *, force: bool = False) -> ModelStatus:
        """Restart with ``definition`` and remember it."""
        self._check_gate(definition)
        status = await super().restart(definition, force=force)
        self._launched[definition.id] = definition
        return status

    def _check_gate(self, definition: ModelDefinition) -> None:
        if self._start_gate is not None:
            self._start_gate(definition, self.node_for(definition))

    async def stop(self, model_id: str) -> None:
        """Stop and forget the launch record."""
        await super().stop(model_id)
        self._launched.pop(model_id, None)

    async def nodes(self) -> list[NodeView]:
        """The nodes, the local one with this run's boot id when one was given."""
        views = await super().nodes()
        if self._local_boot_id is None:
            return views
        return [
            replace(view, boot_id=self._local_boot_id) if view.node_id == LOCAL_NODE_ID else view
            for view in views
        ]
