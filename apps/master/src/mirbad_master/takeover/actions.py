"""Reading this master's identity and taking over the fleet (raising the fencing epoch), audited."""

from __future__ import annotations

from typing import Final

import anyio

from mirbad_master._composition import MasterServices
from mirbad_orchestration.fleet import MasterIdentity, NodeRecord
from mirbad_protocol import MirbadError

from ._views import NodeClaim, TakeoverResult

__all__ = ["TAKEOVER_ACTION", "master_identity", "take_over"]

TAKEOVER_ACTION: Final = "master.takeover"
"""The audit action of a takeover (its target is the instance id, its detail the epochs and nodes)."""


async def master_identity(services: MasterServices) -> MasterIdentity:
    """This master's instance id and fencing epoch."""
    return await services.identity.read()


async def take_over(services: MasterServices, actor: str) -> TakeoverResult:
    """Raise the fencing epoch by one and claim every registered node for this master.

    Each node's fence rises to the new epoch at once, so from now on it refuses the commands of any
    older master (the one this replaces included). A node that does not answer follows at this
    master's next command to it. The models that run stay as they are: the agents report them and
    this master serves them on.
    """
    try:
        identity = await services.identity.bump_epoch()
    except MirbadError as exc:
        await services.audit.record(actor, TAKEOVER_ACTION, "master", outcome="refused", detail=str(exc))
        raise
    records = await services.nodes.list()
    claims: dict[str, NodeClaim] = {}
    async with anyio.create_task_group() as group:
        for record in records:
            group.start_soon(_claim, services, record, claims)
    nodes = [claims[record.id] for record in records]
    claimed = sum(claim.claimed for claim in nodes)
    await services.audit.record(
        actor,
        TAKEOVER_ACTION,
        identity.instance_id,
        detail=f"epoch {identity.epoch - 1} -> {identity.epoch}; {claimed} of {len(nodes)} node(s) claimed",
    )
    return TakeoverResult(instance_id=identity.instance_id, epoch=identity.epoch, nodes=nodes)


async def _claim(services: MasterServices, record: NodeRecord, claims: dict[str, NodeClaim]) -> None:
    try:
        await services.clients.client_for(record).claim()
    except MirbadError as exc:
        claims[record.id] = NodeClaim(node_id=record.id, claimed=False, reason=str(exc))
        return
    claims[record.id] = NodeClaim(node_id=record.id, claimed=True)
