"""``/api/restore``: preview a backup, start the restore job, follow it and cancel it.

Both ``POST`` routes take the backup as the JSON body (the document as written) or as a multipart
upload (field ``file``, 64 MiB at most), and its passphrase as the multipart field ``passphrase`` or
in the ``X-Mirbad-Backup-Passphrase`` header; without one the backup's API keys are left out. A body
that is not a backup this master reads, an upload over 64 MiB, a wrong passphrase or a passphrase for
a backup without an encrypted section is a 422 ``invalid_backup`` naming why (and the field); a second
restore while one runs is a 409 ``job_conflict``. ``GET`` shows the running or last job with its
progress, ``DELETE`` cancels it (the download in flight is stopped on its node); without a job both
are a 404 ``job_not_found``. Starts and cancels are audited.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import JSONResponse

from mirbad_master._api_errors import refusals
from mirbad_master._api_session import actor_of
from mirbad_master._composition import MasterServices
from mirbad_master._views import dump
from mirbad_protocol.restore import BACKUP_PASSPHRASE_HEADER, MAX_BACKUP_BYTES, RestoreJobView, RestorePreview

from . import actions
from ._upload import FILE_FIELD, read_backup_upload

__all__ = ["RESTORE_PREFIX", "restore_router"]

RESTORE_PREFIX: Final = "/restore"
"""Where the routes are under ``/api``; they read and cap their own bodies (64 MiB)."""

_BACKUP_BODY: Final[dict[str, Any]] = {
    "requestBody": {
        "required": True,
        "description": f"the backup: its JSON document, or a multipart upload (at most {MAX_BACKUP_BYTES} "
        "bytes)",
        "content": {
            "application/json": {
                "schema": {"type": "object", "description": "the backup document (schemaVersion 1 or 2)"}
            },
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        FILE_FIELD: {"type": "string", "format": "binary"},
                        "passphrase": {"type": "string"},
                    },
                    "required": [FILE_FIELD],
                }
            },
        },
    }
}
_Passphrase = Annotated[
    str | None,
    Header(
        alias=BACKUP_PASSPHRASE_HEADER,
        description="the backup's passphrase (or the multipart field `passphrase`); opens its API keys",
    ),
]


def restore_router(services: MasterServices) -> APIRouter:
    """The routes under ``/restore`` over ``services``."""
    router = APIRouter(prefix=RESTORE_PREFIX, tags=["restore"])

    @router.post(
        "/preview",
        response_model=RestorePreview,
        summary="What restoring a backup would do (nothing changes)",
        responses=refusals(422),
        openapi_extra=_BACKUP_BODY,
    )
    async def preview(request: Request, passphrase: _Passphrase = None) -> Response:
        upload = await read_backup_upload(request)
        return JSONResponse(dump(await actions.preview_backup(services, upload)))

    @router.post(
        "",
        status_code=202,
        response_model=RestoreJobView,
        summary="Restore a backup: models, API keys and host services, then downloads and starts",
        responses=refusals(409, 422),
        openapi_extra=_BACKUP_BODY,
    )
    async def restore(request: Request, passphrase: _Passphrase = None) -> Response:
        upload = await read_backup_upload(request)
        job = await actions.restore_backup(services, upload, actor_of(request))
        return JSONResponse(dump(job), status_code=202)

    @router.get(
        "",
        response_model=RestoreJobView,
        summary="The running or last restore job, with its progress",
        responses=refusals(404),
    )
    async def restore_job() -> Response:
        return JSONResponse(dump(actions.restore_job(services)))

    @router.delete(
        "",
        response_model=RestoreJobView,
        summary="Cancel the running restore (the download in flight is stopped on its node)",
        responses=refusals(404),
    )
    async def cancel_restore(request: Request) -> Response:
        return JSONResponse(dump(await actions.cancel_restore(services, actor_of(request))))

    return router
