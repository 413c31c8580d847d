"""``/api/backup/destination``: the network share backups go to, mounted by the master's own machine.

Thin routes over :mod:`.actions`. The actor of an apply or a disconnect is the request's own signed-in
administrator (the admin guard's), never a field of its JSON. A body that is not JSON, or a share field
outside its characters, is a 422 naming the field; the password is never echoed, in a refusal or an
answer.
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from mirbad_master._api_errors import refusals
from mirbad_master._api_session import actor_of
from mirbad_master._composition import MasterServices
from mirbad_protocol.hostd import BackupMountRemoved, BackupMountStatus, BackupShare, BackupShareProbe

from . import actions
from ._views import DestinationStatus

__all__ = ["backup_share_router"]

_PATH: Final = "/backup/destination"
# Every change reaches the local node's hostd: it may be missing, away, slow, or refuse.
_CHANGE: Final[dict[int | str, dict[str, Any]]] = refusals(401, 404, 409, 422, 502, 503, 504)
# The body, documented by hand: it is read as user input (a bad field is a 422 naming it, as hostd's).
_SHARE_BODY: Final = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": BackupShare.model_json_schema(by_alias=True)}},
    }
}


def backup_share_router(services: MasterServices) -> APIRouter:
    """The backup destination's routes over ``services``."""
    router = APIRouter(tags=["backup"])

    @router.get(
        _PATH,
        summary="The backup share's settings (no password), whether it is mounted, and its free space",
        response_model=DestinationStatus,
        response_model_by_alias=True,
    )
    async def status() -> Response:
        return JSONResponse((await actions.destination(services)).to_wire())

    @router.put(
        _PATH,
        summary="Test, write and mount the backup share (the signed-in administrator)",
        response_model=BackupMountStatus,
        responses=_CHANGE,
        openapi_extra=_SHARE_BODY,
    )
    async def apply(request: Request) -> Response:
        share = await _share(request)
        applied = await actions.apply_destination(services, share, _principal(request))
        return JSONResponse(applied.to_wire())

    @router.post(
        f"{_PATH}/test",
        summary="Mount the share aside and write a file as the backup account; nothing is kept",
        response_model=BackupShareProbe,
        responses=_CHANGE,
        openapi_extra=_SHARE_BODY,
    )
    async def test(request: Request) -> Response:
        probe = await actions.test_destination(services, await _share(request), actor_of(request))
        return JSONResponse(probe.to_wire())

    @router.delete(
        _PATH,
        summary="Unmount and remove the backup share (the signed-in administrator)",
        response_model=BackupMountRemoved,
        responses=_CHANGE,
    )
    async def disconnect(request: Request) -> Response:
        removed = await actions.disconnect_destination(services, _principal(request))
        return JSONResponse(removed.to_wire())

    return router


def _principal(request: Request) -> str:
    # Set by the admin guard from this request's own session or password, never from its body; empty
    # (refused with 401) if it were ever missing.
    actor = getattr(request.state, "actor", None)
    return actor if isinstance(actor, str) else ""


async def _share(request: Request) -> BackupShare:
    return actions.checked_share(await request.body())
