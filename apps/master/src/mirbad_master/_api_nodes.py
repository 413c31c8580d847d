"""``/api/nodes``: the fleet's nodes, their enrollment tokens, adding and removing them.

A new machine joins in one step: the operator asks for an enrollment token here, naming where the
node's agent will answer (``address`` or ``agentUrl``), and runs the returned ``installCommand`` on the
machine; its agent trades the token for a certificate at the master's enroll listener, which registers
the node. Without an address the node is registered by hand afterwards (``POST /api/nodes``). A token
for a name a node already has is refused unless ``reenroll`` asks for a new certificate for it.
"""

from __future__ import annotations

import shlex
from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import Field

from mirbad_orchestration import NODE_ID_PATTERN, EnrollmentTokenIssued, NodeRecord, agent_url_for
from mirbad_protocol import WireModel

from ._api_errors import ApiError, refusals, user_input
from ._api_session import actor_of
from ._composition import MasterServices
from ._views import NodeSummary, dump, node_summary

__all__ = ["EnrollmentTokenRequest", "NodeCreate", "nodes_router"]

_MAX_TOKEN_TTL_S = 7 * 24 * 3600


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
    ttl_seconds: Annotated[int, Field(ge=60, le=_MAX_TOKEN_TTL_S)] = 3600
    address: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9.:-]+$")] | None = None
    agent_url: str | None = None
    reenroll: bool = False


class NodeCreate(WireModel):
    """The body of ``POST /api/nodes``: an enrolled node and where its agent answers."""

    id: Annotated[str, Field(pattern=NODE_ID_PATTERN)]
    name: Annotated[str, Field(min_length=1, max_length=200)]
    agent_url: str
    labels: dict[str, str] = Field(default_factory=dict)


_NodeCreate = Annotated[NodeCreate, user_input(NodeCreate)]
_TokenRequest = Annotated[EnrollmentTokenRequest, user_input(EnrollmentTokenRequest)]


def nodes_router(services: MasterServices) -> APIRouter:
    """The routes under ``/nodes`` over ``services``."""
    router = APIRouter(prefix="/nodes", tags=["nodes"])

    @router.get("", response_model=list[NodeSummary], summary="List the nodes and their last known state")
    async def list_nodes() -> Response:
        records = await services.nodes.list()
        return JSONResponse([dump(node_summary(r, services.cache.node(r.id))) for r in records])

    @router.post(
        "",
        status_code=201,
        response_model=NodeSummary,
        summary="Register an enrolled node",
        responses=refusals(409),
    )
    async def add_node(body: _NodeCreate, request: Request) -> Response:
        # from_wire: the record's own URL rule (https, no path) is then a 400 naming agentUrl.
        record = NodeRecord.from_wire({**body.to_wire(), "certificateName": body.name})
        await services.nodes.add(record)
        await services.audit.record(actor_of(request), "node.add", record.id)
        state = await services.node_monitor.poll_node(record)
        return JSONResponse(dump(node_summary(record, state)), status_code=201)

    @router.post(
        "/enrollment-tokens",
        status_code=201,
        response_model=EnrollmentTokenIssued,
        summary="Issue a one-time token for a new node",
        responses=refusals(404, 409),
    )
    async def issue_token(body: _TokenRequest, request: Request) -> Response:
        ttl = timedelta(seconds=body.ttl_seconds)
        agent_url = body.agent_url
        if agent_url is None and body.address is not None:
            agent_url = agent_url_for(body.address)
        token = await services.enrollment.issue_join_token(
            body.node_name, ttl, agent_url=agent_url, reenroll=body.reenroll
        )
        command = ["mirbad-agent", "enroll", "--master", services.settings.enroll_url, "--token", token]
        command += ["--name", body.node_name]
        if body.address is not None:
            command += ["--san", body.address]
        issued = EnrollmentTokenIssued(
            token=token,
            node_name=body.node_name,
            expires_at=datetime.now(UTC) + ttl,
            install_command=shlex.join(command),
        )
        await services.audit.record(actor_of(request), "node.enrollment-token", body.node_name)
        return JSONResponse(dump(issued), status_code=201)

    @router.get("/{node_id}", response_model=NodeSummary, summary="One node")
    async def get_node(node_id: str) -> Response:
        record = await services.nodes.get(node_id)
        return JSONResponse(dump(node_summary(record, services.cache.node(node_id))))

    @router.delete(
        "/{node_id}", status_code=204, summary="Remove a node from the fleet", responses=refusals(409)
    )
    async def remove_node(node_id: str, request: Request, unplace: bool = False) -> Response:
        record = await services.nodes.get(node_id)
        if record.local:
            raise ApiError(409, "local_node", f"node {node_id!r} is the master's own agent; it stays")
        placed = [model.id for model in await services.models.placed_on(node_id)]
        if placed and not unplace:
            # Models left pointing at a node that is gone could never start again, silently.
            names = ", ".join(repr(model_id) for model_id in sorted(placed))
            raise ApiError(
                409,
                "node_has_models",
                f"models are placed on node {node_id!r}: {names}; move or delete them, "
                "or remove the node with ?unplace=true to clear their placement",
            )
        if placed:
            for model in await services.models.unplace(node_id):
                await services.audit.record(actor_of(request), "model.unplace", model.id, node_id=node_id)
            await services.sync_models()
        await services.nodes.remove(node_id)
        services.cache.forget(node_id)
        await services.clients.forget(node_id)
        await services.audit.record(actor_of(request), "node.remove", node_id)
        return Response(status_code=204)

    return router
