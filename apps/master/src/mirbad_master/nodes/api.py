"""``/api/nodes``: the fleet's nodes, their enrollment tokens, adding and removing them.

A new machine joins in one step: the operator asks for an enrollment token here, naming where the
node's agent will answer (``address`` or ``agentUrl``), and runs the returned ``installCommand`` on the
machine; its agent trades the token for a certificate at the master's enroll listener, which registers
the node. Without an address the node is registered by hand afterwards (``POST /api/nodes``). A token
for a name a node already has is refused unless ``reenroll`` asks for a new certificate for it.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from mirbad_master._api_errors import refusals, user_input
from mirbad_master._api_session import actor_of
from mirbad_master._composition import MasterServices
from mirbad_master._views import NodeSummary, dump, node_summary
from mirbad_protocol.admin import EnrollmentTokenIssued

from . import actions
from .actions import EnrollmentTokenRequest, NodeCreate

__all__ = ["nodes_router"]

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
        record, state = await actions.add_node(services, body, actor_of(request))
        return JSONResponse(dump(node_summary(record, state)), status_code=201)

    @router.post(
        "/enrollment-tokens",
        status_code=201,
        response_model=EnrollmentTokenIssued,
        summary="Issue a one-time token for a new node",
        responses=refusals(404, 409),
    )
    async def issue_token(body: _TokenRequest, request: Request) -> Response:
        issued = await actions.issue_enrollment(services, body, actor_of(request))
        return JSONResponse(dump(issued), status_code=201)

    @router.get("/{node_id}", response_model=NodeSummary, summary="One node")
    async def get_node(node_id: str) -> Response:
        record = await services.nodes.get(node_id)
        return JSONResponse(dump(node_summary(record, services.cache.node(node_id))))

    @router.delete(
        "/{node_id}", status_code=204, summary="Remove a node from the fleet", responses=refusals(409)
    )
    async def remove_node(node_id: str, request: Request, unplace: bool = False) -> Response:
        await actions.remove_node(services, node_id, actor_of(request), unplace=unplace)
        return Response(status_code=204)

    return router
