"""``/api/backup``: the backups in the backup directory, back up now, and getting a backup out.

``GET /api/backup`` lists the backups with the schedule and the last failure; ``POST /api/backup``
writes one now (201; with ``passphrase`` its secrets are encrypted). A backup comes out by
``GET /api/backup/files/{name}`` (signed in) or by a one-time, two-minute link:
``POST /api/backup/download-tokens`` issues it and ``GET /api/backup/download/{token}`` takes it once
without a bearer header, so a browser can download it. Only bare backup names inside the directory
are ever served: anything else is 404 ``backup_not_found``.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from mirbad_master._api_errors import refusals, user_input
from mirbad_master._api_session import actor_of
from mirbad_master._composition import MasterServices
from mirbad_master._views import dump
from mirbad_protocol.admin import (
    BackupDownloadRequest,
    BackupDownloadToken,
    BackupInfo,
    BackupList,
    BackupNow,
)

from . import actions

__all__ = ["backup_download_router", "backups_router"]

_BackupNow = Annotated[BackupNow | None, user_input(BackupNow)]
_DownloadRequest = Annotated[BackupDownloadRequest, user_input(BackupDownloadRequest)]
_FILE: Final[dict[int | str, dict[str, Any]]] = {
    200: {
        "description": "the backup file, as an attachment",
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
}


def backups_router(services: MasterServices) -> APIRouter:
    """The signed-in routes under ``/backup`` over ``services``."""
    router = APIRouter(prefix="/backup", tags=["backups"])

    @router.get("", response_model=BackupList, summary="The backups, the schedule and the last failure")
    async def list_backups() -> Response:
        return JSONResponse(dump(await actions.backup_list(services)))

    @router.post(
        "",
        status_code=201,
        response_model=BackupInfo,
        summary="Back up now (with a passphrase, the secrets are encrypted into it)",
        responses=refusals(409, 422),
    )
    async def back_up_now(request: Request, body: _BackupNow = None) -> Response:
        passphrase = body.passphrase if body is not None else None
        written = await actions.back_up_now(services, passphrase, actor_of(request))
        return JSONResponse(dump(written), status_code=201)

    @router.post(
        "/download-tokens",
        response_model=BackupDownloadToken,
        summary="A one-time, two-minute link to download a backup without a bearer header",
        responses=refusals(404),
    )
    async def issue_token(body: _DownloadRequest, request: Request) -> Response:
        issued = await actions.issue_download_token(services, body.name, actor_of(request))
        return JSONResponse(dump(issued))

    @router.get(
        "/files/{name}",
        response_class=Response,
        summary="One backup file, by its bare name",
        responses=_FILE | refusals(404),
    )
    async def backup_file(name: str, request: Request) -> Response:
        data = await actions.read_backup_file(services, name, actor_of(request))
        return _attachment(name, data)

    return router


def backup_download_router(services: MasterServices) -> APIRouter:
    """``GET /backup/download/{token}``: needs no sign-in, only a token (mount it outside the guard)."""
    router = APIRouter(prefix="/backup", tags=["backups"])

    @router.get(
        "/download/{token}",
        response_class=Response,
        summary="Download a backup once by its token (no bearer header needed)",
        responses=_FILE | refusals(404),
    )
    async def download(token: str) -> Response:
        name, data = await actions.download_by_token(services, token)
        return _attachment(name, data)

    return router


def _attachment(name: str, data: bytes) -> Response:
    # ``name`` is a checked backup name (letters, digits, hyphens, one dot): safe in the header.
    headers = {"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"}
    return Response(data, media_type="application/json", headers=headers)
