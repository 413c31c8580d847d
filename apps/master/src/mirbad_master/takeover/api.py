"""``/api/master``: this master's instance id and fencing epoch, and the operator's takeover.

Thin routes over :mod:`.actions`; the takeover's actor is the signed-in administrator.
"""

from __future__ import annotations

from typing import Final

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from mirbad_master._api_errors import refusals
from mirbad_master._api_session import actor_of
from mirbad_master._composition import MasterServices
from mirbad_orchestration.fleet import MasterIdentity

from . import actions
from ._views import TakeoverResult

__all__ = ["takeover_router"]

_PATH: Final = "/master"


def takeover_router(services: MasterServices) -> APIRouter:
    """The takeover room's routes over ``services``."""
    router = APIRouter(tags=["master"])

    @router.get(
        _PATH,
        summary="This master's instance id and fencing epoch",
        response_model=MasterIdentity,
        response_model_by_alias=True,
        responses=refusals(401),
    )
    async def identity() -> Response:
        return JSONResponse((await actions.master_identity(services)).to_wire())

    @router.post(
        _PATH + "/takeover",
        summary="Raise the fencing epoch and claim every node: the nodes refuse older masters from then on",
        response_model=TakeoverResult,
        response_model_by_alias=True,
        responses=refusals(401, 507),
    )
    async def take_over(request: Request) -> Response:
        return JSONResponse((await actions.take_over(services, actor_of(request))).to_wire())

    return router
