"""What the admin API answers: the views (mirbad_protocol's admin API models) built from the services.

Views are read from what the master already knows (the registry, the status cache, the pauses), so a
listing never waits on a node; the models of a node that stops answering read Unknown, with the
reason, exactly as ``/v1`` tells them (:func:`mirbad_orchestration.fleet.model_status`). A Ready model's
status also carries ``progress`` (Stalled or Slow) when its metrics history says it is not progressing.
Views go out whole (every field, defaults included), unlike the agent envelopes; ``progress`` and its
reason alone are absent while the model progresses.
"""

from __future__ import annotations

from typing import Any

from mirbad_orchestration.commandline import DEFAULT_TOTAL_GIB
from mirbad_orchestration.fleet import NodeRecord, NodeState, launch_total_gib, model_status
from mirbad_protocol import ModelDefinition, ModelState, ModelStatus, WireModel
from mirbad_protocol.admin import MaintenanceView, ModelView, NodeSummary, SettingChangeView, StatusReport

from ._composition import MasterServices

# The view models themselves are wire models of mirbad_protocol, shared with mirbad_client; they are
# re-exported here for the master's own modules.
__all__ = [
    "MaintenanceView",
    "ModelView",
    "NodeSummary",
    "SettingChangeView",
    "StatusReport",
    "dump",
    "model_view",
    "node_summary",
    "status_report",
]


def dump(model: WireModel) -> dict[str, Any]:
    """A view as the API sends it: camelCase, every field present."""
    return model.model_dump(mode="json", by_alias=True)


async def model_view(services: MasterServices, definition: ModelDefinition) -> ModelView:
    """The view of one saved model."""
    status, node = _status_of(services, definition)
    total_gib = _total_gib(definition, node)
    launched = services.runtime.launched(definition.id)
    # From what the instance runs (the argv its node reports), so it holds after a master restart too.
    review = services.restart_pending.review(definition, status, launched=launched, total_gib=total_gib)
    pending = review.pending
    changes = [
        SettingChangeView(field=c.field, old=c.old, new=c.new, needs_restart=c.needs_restart)
        for c in review.changes
    ]
    return ModelView(
        definition=definition,
        status=status.model_copy(update={"restart_pending": pending}),
        restart_pending=pending,
        changed_settings=changes,
        changed_settings_problem=review.problem,
        pause=await services.pauses.get(definition.id),
    )


def node_summary(record: NodeRecord, state: NodeState | None) -> NodeSummary:
    """A node's record with its last polled state."""
    known = state or NodeState(record.id)
    return NodeSummary(
        id=record.id,
        name=record.name,
        agent_url=record.agent_url,
        local=record.local,
        enrolled_at=record.enrolled_at,
        labels=record.labels,
        reachable=known.reachable,
        polled_at=known.polled_at,
        last_seen=known.last_seen,
        error=known.error,
        info=known.info,
        memory=known.memory,
        models=list(known.models),
    )


async def status_report(services: MasterServices) -> StatusReport:
    """The whole fleet at a glance, from the caches."""
    records = await services.nodes.list()
    models = [(_status_of(services, d)[0]) for d in await services.models.list()]
    metrics = [m for m in (services.telemetry.latest(status.id) for status in models) if m is not None]
    notice = await services.maintenance.current()
    return StatusReport(
        nodes=[node_summary(record, services.cache.node(record.id)) for record in records],
        models=models,
        metrics=metrics,
        router=services.stats.snapshot(),
        pauses=await services.pauses.list(),
        maintenance=MaintenanceView(message=notice.message, retry_after_s=notice.retry_after_s)
        if notice
        else None,
    )


def _status_of(services: MasterServices, definition: ModelDefinition) -> tuple[ModelStatus, NodeState | None]:
    # The one rule /v1 resolves with too, so a view never says Ready where a request is refused.
    status = model_status(services.cache, definition, services.runtime.default_node_id)
    node = services.cache.node(status.node_id or services.runtime.default_node_id)
    if status.state is ModelState.READY:
        progress = services.telemetry.progress(definition.id, definition.runtime)
        if progress is not None:
            flagged = {"progress": progress.state, "progress_reason": progress.reason}
            status = status.model_copy(update=flagged)
    return status, node


def _total_gib(definition: ModelDefinition, node: NodeState | None) -> float:
    if definition.runtime != "vllm" or node is None or node.memory is None:
        return DEFAULT_TOTAL_GIB
    gpus = definition.placement.gpu_uuids if definition.placement else []
    return launch_total_gib(node.memory, gpus)
