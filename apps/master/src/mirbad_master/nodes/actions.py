"""Every change to the fleet's nodes, whoever asks: enrollment tokens, adding and removing a node.

Each change and its audit line are one call, so the admin API and the portal leave the same lines; the
callers differ only in the actor. The bodies of the changes (:class:`EnrollmentTokenRequest`,
:class:`NodeCreate`) are the API's wire models, which the portal's forms fill in and validate alike.
Removing a node refuses for the master's own node and, unless asked to clear their placement, for a
node that still has models placed on it.
"""

from __future__ import annotations

import ipaddress
import shlex
from datetime import UTC, datetime, timedelta
from typing import Annotated, Final

from pydantic import Field, field_validator

from mirbad_master._composition import MasterServices
from mirbad_master.exceptions import LocalNodeError, NodeHasModelsError
from mirbad_orchestration.fleet import NODE_ID_PATTERN, NodeRecord, NodeState, agent_url_for
from mirbad_protocol import WireModel
from mirbad_protocol.admin import EnrollmentTokenIssued

__all__ = [
    "MAX_TOKEN_TTL_S",
    "EnrollmentTokenRequest",
    "NodeCreate",
    "add_node",
    "issue_enrollment",
    "remove_node",
]

MAX_TOKEN_TTL_S: Final = 7 * 24 * 3600
"""The longest an enrollment token may be valid."""


class EnrollmentTokenRequest(WireModel):
    """The body of ``POST /api/nodes/enrollment-tokens``.

    Attributes:
        node_name: the name the node's certificate will carry.
        ttl_seconds: how long the token may be used (once).
        address: the DNS name or IP address the master will reach the node's agent at; it goes into
            the install command (``--san``), so the agent's certificate is valid for it, and the node is
            registered at ``https://{address}:9443`` when it enrolls.
        agent_url: where the node's agent answers, when not ``https://{address}:9443``.
        reenroll: the name is an existing node's: its new certificate replaces the old one, which the
            master refuses from the enrollment on.
    """

    node_name: str
    ttl_seconds: Annotated[int, Field(ge=60, le=MAX_TOKEN_TTL_S)] = 3600
    address: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9.:-]+$")] | None = None
    agent_url: str | None = None
    reenroll: bool = False

    @field_validator("address")
    @classmethod
    def _no_port_in_the_address(cls, value: str | None) -> str | None:
        # A colon belongs to an IPv6 address only: "10.0.0.7:18445" became https://[10.0.0.7:18445]:9443.
        if value is not None and ":" in value:
            try:
                ipaddress.IPv6Address(value)
            except ValueError:
                raise ValueError(
                    "a host name or an IP address, without a port: give another port in agentUrl "
                    "(https://host:port)"
                ) from None
        return value


class NodeCreate(WireModel):
    """The body of ``POST /api/nodes``: an enrolled node and where its agent answers."""

    id: Annotated[str, Field(pattern=NODE_ID_PATTERN)]
    name: Annotated[str, Field(min_length=1, max_length=200)]
    agent_url: str
    labels: dict[str, str] = Field(default_factory=dict)


async def issue_enrollment(
    services: MasterServices, request: EnrollmentTokenRequest, actor: str
) -> EnrollmentTokenIssued:
    """Issue a one-time join token and the command that enrolls the node with it (both shown once).

    With an address (or an agent URL) the node is registered when it enrolls.

    Raises:
        InvalidFieldError: the node name is unusable (``nodeName``).
        EnrollmentError: the name is an existing node's without ``reenroll``, or the tokens cannot be
            stored.
    """
    ttl = timedelta(seconds=request.ttl_seconds)
    agent_url = request.agent_url
    if agent_url is None and request.address is not None:
        agent_url = agent_url_for(request.address)
    token = await services.enrollment.issue_join_token(
        request.node_name, ttl, agent_url=agent_url, reenroll=request.reenroll
    )
    command = ["mirbad-agent", "enroll", "--master", services.settings.enroll_url, "--token", token]
    command += ["--name", request.node_name]
    if request.address is not None:
        command += ["--san", request.address]
    issued = EnrollmentTokenIssued(
        token=token,
        node_name=request.node_name,
        expires_at=datetime.now(UTC) + ttl,
        install_command=shlex.join(command),
    )
    await services.audit.record(actor, "node.enrollment-token", request.node_name)
    return issued


async def add_node(services: MasterServices, node: NodeCreate, actor: str) -> tuple[NodeRecord, NodeState]:
    """Register an enrolled node and read it once, so its state is known at once.

    Raises:
        InvalidFieldError: the record's own rules (an ``agentUrl`` that is not https, or has a path).
        DuplicateNodeError: the id or the URL is taken.
    """
    # from_wire: the record's own URL rule (https, no path) is then an error naming agentUrl.
    record = NodeRecord.from_wire({**node.to_wire(), "certificateName": node.name})
    await services.nodes.add(record)
    await services.audit.record(actor, "node.add", record.id)
    state = await services.node_monitor.poll_node(record)
    return record, state


async def remove_node(services: MasterServices, node_id: str, actor: str, *, unplace: bool = False) -> None:
    """Remove a node from the fleet; with ``unplace``, the models placed on it lose their placement.

    Raises:
        UnknownNodeError: no such node.
        LocalNodeError: it is the master's own node.
        NodeHasModelsError: models are placed on it and ``unplace`` was not given.
    """
    record = await services.nodes.get(node_id)
    if record.local:
        raise LocalNodeError(node_id, f"node {node_id!r} is the master's own agent; it stays")
    placed = [model.id for model in await services.models.placed_on(node_id)]
    if placed and not unplace:
        # Models left pointing at a node that is gone could never start again, silently.
        names = ", ".join(repr(model_id) for model_id in sorted(placed))
        raise NodeHasModelsError(
            node_id,
            f"models are placed on node {node_id!r}: {names}; move or delete them, "
            "or remove the node with ?unplace=true to clear their placement",
        )
    if placed:
        for model in await services.models.unplace(node_id):
            await services.audit.record(actor, "model.unplace", model.id, node_id=node_id)
        await services.sync_models()
    await services.nodes.remove(node_id)
    services.cache.forget(node_id)
    await services.clients.forget(node_id)
    await services.audit.record(actor, "node.remove", node_id)
