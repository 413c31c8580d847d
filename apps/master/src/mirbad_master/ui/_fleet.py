"""What the portal's pages read: one consistent picture of the fleet, built from the master's caches.

Built with the admin API's own views (:mod:`mirbad_master._views`), so a page and ``/api`` never
disagree. Nothing here waits on a node: statuses come from the node monitor's cache, metrics from the
telemetry collector, counters from the router.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final
from urllib.parse import quote

import anyio

from mirbad_master._composition import MasterServices
from mirbad_master._views import ModelView, NodeSummary, model_view, node_summary
from mirbad_orchestration.registry import filter_by_tags
from mirbad_protocol import MirbadError, ModelMetrics, ModelState, RouterModelStats
from mirbad_protocol.agent import AgentInfo

from ._attention import AttentionItem, attention_items

__all__ = [
    "STARTING_POLL_S",
    "STARTING_READ_TIMEOUT_S",
    "FleetSnapshot",
    "ModelRow",
    "fleet_snapshot",
    "parse_tags",
    "read_starting",
    "tags_param",
]

STARTING_POLL_S: Final = 0.5
"""How often a page asks the nodes directly about its Starting models."""
STARTING_READ_TIMEOUT_S: Final = 2.0
"""Bound on one such question (a node that does not answer is the node monitor's business)."""


@dataclass(frozen=True)
class ModelRow:
    """One model with everything the Overview and the Models page show about it.

    Attributes:
        view: the admin API's view (definition, status, pause, pending restart).
        metrics: the newest telemetry sample, if the model was scraped.
        router: the router's counters for its served name.
    """

    view: ModelView
    metrics: ModelMetrics | None
    router: RouterModelStats

    @property
    def id(self) -> str:
        """The model id."""
        return self.view.definition.id

    @property
    def state(self) -> ModelState:
        """The model's current state."""
        return self.view.status.state

    @property
    def running(self) -> bool:
        """Starting or Ready."""
        return self.state in (ModelState.STARTING, ModelState.READY)


@dataclass(frozen=True)
class FleetSnapshot:
    """The fleet at one moment.

    Attributes:
        taken_at: when it was read.
        models: every registered model, in registry order.
        nodes: every registered node.
        attention: what needs the operator (the badge counts it).
        maintenance: the maintenance notice while a job holds the router.
    """

    taken_at: datetime
    models: list[ModelRow]
    nodes: list[NodeSummary]
    attention: list[AttentionItem] = field(default_factory=list)
    maintenance: str | None = None

    @property
    def used_gib(self) -> float:
        """Memory in use on every reachable node."""
        return sum(_used(node) for node in self.nodes if node.reachable and node.memory is not None)

    @property
    def total_gib(self) -> float:
        """Memory of every reachable node."""
        return sum(node.memory.total_gib for node in self.nodes if node.reachable and node.memory is not None)

    @property
    def ready_names(self) -> list[str]:
        """The served names of the Ready models, sorted."""
        return sorted(row.view.definition.served_name for row in self.models if row.state is ModelState.READY)

    @property
    def in_flight(self) -> int:
        """Requests the router is relaying now."""
        return sum(row.router.in_flight for row in self.models)

    @property
    def generation_rate(self) -> float:
        """Tokens per second the running models are generating (from their newest samples)."""
        return sum(
            row.metrics.generation_tokens_per_second or 0.0
            for row in self.models
            if row.running and row.metrics is not None
        )

    def node_info(self, node_id: str | None) -> AgentInfo | None:
        """What the agent of ``node_id`` last said it offers; None when unknown."""
        return next((node.info for node in self.nodes if node.id == node_id), None)

    def tags(self) -> list[str]:
        """Every tag some model carries, sorted."""
        return sorted({tag for row in self.models for tag in row.view.definition.tags})

    def with_tags(self, tags: Sequence[str]) -> list[ModelRow]:
        """The models carrying ALL of ``tags`` (every model when none is selected)."""
        kept = {d.id for d in filter_by_tags([row.view.definition for row in self.models], list(tags))}
        return [row for row in self.models if row.id in kept]


async def fleet_snapshot(services: MasterServices) -> FleetSnapshot:
    """Read the fleet from the master's caches and stores."""
    definitions = await services.models.list()
    views = [await model_view(services, definition) for definition in definitions]
    records = await services.nodes.list()
    nodes = [node_summary(record, services.cache.node(record.id)) for record in records]
    rows = [
        ModelRow(
            view,
            services.telemetry.latest(view.definition.id),
            services.stats.for_model(view.definition.served_name),
        )
        for view in views
    ]
    notice = await services.maintenance.current()
    return FleetSnapshot(
        taken_at=datetime.now(UTC),
        models=rows,
        nodes=nodes,
        attention=attention_items(views, nodes),
        maintenance=notice.message if notice is not None else None,
    )


async def read_starting(services: MasterServices, snapshot: FleetSnapshot) -> bool:
    """Ask the nodes now about each Starting model; True when one has left Starting.

    The node monitor reads the nodes every few seconds (``health_poll_s``) and a page reads its cache,
    so a model Ready after a few milliseconds showed Starting for seconds. The runtime's status read
    goes to the model's node and updates the cache, so every page sees the news at once.
    """
    changed = False
    for row in snapshot.models:
        if row.state is not ModelState.STARTING:
            continue
        with anyio.move_on_after(STARTING_READ_TIMEOUT_S):
            try:
                status = await services.runtime.status(row.id)
            except MirbadError:
                continue  # unreachable or refused: the cache's view stands until the next poll
            changed = changed or status.state is not ModelState.STARTING
    return changed


def parse_tags(text: str | None) -> list[str]:
    """The tags of a ``?tags=a,b`` query (lowercased, de-duplicated, in order)."""
    seen: list[str] = []
    for part in (text or "").split(","):
        tag = part.strip().lower()
        if tag and tag not in seen:
            seen.append(tag)
    return seen


def tags_param(tags: list[str]) -> str:
    """``tags=a,b`` for a URL (the inverse of :func:`parse_tags`), or ``""`` without tags."""
    return f"tags={quote(','.join(tags), safe=',')}" if tags else ""


def _used(node: NodeSummary) -> float:
    assert node.memory is not None
    return max(node.memory.total_gib - node.memory.available_gib, 0.0)
