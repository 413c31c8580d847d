"""What a takeover answers: the master's new identity and which nodes follow it already."""

from __future__ import annotations

from mirbad_protocol import WireModel

__all__ = ["NodeClaim", "TakeoverResult"]


class NodeClaim(WireModel):
    """One node's answer to the takeover's claim.

    Attributes:
        node_id: the node.
        claimed: whether it follows this master now.
        reason: why not (unreachable, or it follows a newer master already).
    """

    node_id: str
    claimed: bool
    reason: str | None = None


class TakeoverResult(WireModel):
    """The master after a takeover, and each registered node's claim.

    Attributes:
        instance_id: this master's instance id.
        epoch: its new fencing epoch.
        nodes: each registered node's claim; a node not claimed follows at this master's next
            command to it (a node that was away), or refuses it (a newer master holds it).
    """

    instance_id: str
    epoch: int
    nodes: list[NodeClaim]
