"""A model's state as the master tells it, the same in every view: the admin API, the portal and ``/v1``.

The state comes from the status cache, never from a wait on a node. A model's node is the one the cache
finds an instance on (a running one first), else its placement's, else the default node. When that node
does not answer, its last known states are not vouched for: the model reads ``Unknown``, with the
reason, rather than the ``Ready`` it was when the node was last seen.
"""

from __future__ import annotations

from mirbad_protocol import ModelDefinition, ModelState, ModelStatus

from ._node_monitor import StatusCache

__all__ = ["model_node", "model_status"]


def model_node(cache: StatusCache, definition: ModelDefinition, default_node_id: str) -> str:
    """The node ``definition`` runs on, or would run on when started."""
    holder = cache.locate(definition.id)
    found = holder.model(definition.id) if holder is not None else None
    if holder is not None and found is not None and found.state is not ModelState.STOPPED:
        return holder.node_id
    return definition.placement.node_id if definition.placement else default_node_id


def model_status(cache: StatusCache, definition: ModelDefinition, default_node_id: str) -> ModelStatus:
    """The status every view shows for ``definition``: its node's last answer, or Unknown and why."""
    node_id = model_node(cache, definition, default_node_id)
    node = cache.node(node_id)
    known = node.model(definition.id) if node is not None else None
    status = known or ModelStatus(
        id=definition.id,
        served_name=definition.served_name,
        state=ModelState.STOPPED,
        runtime=definition.runtime,
        node_id=node_id,
    )
    if node is None:
        return _unknown(status, f"node {node_id!r} has not been polled yet")
    # Never polled but told of a start or stop: that answer came from the node itself just now.
    if not node.reachable and node.polled_at is not None:
        return _unknown(status, f"node {node_id!r} is unreachable: {node.error}")
    return status


def _unknown(status: ModelStatus, reason: str) -> ModelStatus:
    # The last known port and start time stay: they say what was running when the node was last seen.
    return status.model_copy(update={"state": ModelState.UNKNOWN, "error": reason})
