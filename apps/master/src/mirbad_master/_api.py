"""The admin API, ``/api``: models, nodes, keys and the fleet's status, for the administrator only.

Every route but signing in runs :func:`~mirbad_master._api_session.admin_guard` first. FastAPI builds
the OpenAPI document of these routes (``/openapi.json``); errors follow ``_api_errors``. Whatever no
``/api`` route takes is answered here too (:func:`api_fallback`), never by the portal's catch-all.
"""

from __future__ import annotations

import re
from typing import Final

from fastapi import APIRouter, Depends, FastAPI, Response
from fastapi.responses import JSONResponse
from starlette.routing import Mount, compile_path
from starlette.types import Receive, Scope, Send

from mirbad_protocol.admin import AdminErrorCode

from ._admin_auth import AdminAuth
from ._api_errors import error_response
from ._api_session import admin_guard, session_router
from ._composition import MasterServices
from ._views import StatusReport, dump, status_report
from .audit.api import audit_router
from .backup_share.api import backup_share_router
from .backups.api import backup_download_router, backups_router
from .benchmarks.api import benchmarks_router
from .downloads.api import downloads_router
from .keys.api import keys_router
from .models.api import models_router
from .nodes.api import nodes_router
from .releases.api import releases_router
from .restore.api import RESTORE_PREFIX, restore_router
from .services.api import services_router
from .takeover.api import takeover_router
from .tuning.api import tuning_router

__all__ = ["OWN_BODY_CAPS", "api_fallback", "api_router"]

OWN_BODY_CAPS: Final = (f"/api{RESTORE_PREFIX}",)
"""The routes that read and cap their own bodies (a backup upload: 64 MiB, refused with 422)."""


def api_router(services: MasterServices, auth: AdminAuth) -> APIRouter:
    """Every ``/api`` route (mount it with ``prefix="/api"``)."""
    api = APIRouter()
    api.include_router(session_router(auth))
    # A one-time token is the credential here, so a browser's plain link can download a backup.
    api.include_router(backup_download_router(services))
    guarded = APIRouter(dependencies=[Depends(admin_guard(auth))])

    @guarded.get(
        "/status", response_model=StatusReport, tags=["status"], summary="The whole fleet at a glance"
    )
    async def fleet_status() -> Response:
        return JSONResponse(dump(await status_report(services)))

    guarded.include_router(models_router(services))
    guarded.include_router(nodes_router(services))
    guarded.include_router(keys_router(services))
    guarded.include_router(benchmarks_router(services))
    guarded.include_router(tuning_router(services))
    guarded.include_router(downloads_router(services))
    guarded.include_router(services_router(services))
    guarded.include_router(releases_router(services))
    guarded.include_router(backups_router(services))
    guarded.include_router(backup_share_router(services))
    guarded.include_router(restore_router(services))
    guarded.include_router(audit_router(services))
    guarded.include_router(takeover_router(services))
    api.include_router(guarded)
    return api


def api_fallback(app: FastAPI) -> Mount:
    """A mount at ``/api`` for what no ``/api`` route takes: 405 or 404 in the admin envelope.

    Add it after the ``/api`` routes and before the portal. A path whose route does not take the method
    (``TRACE``, ``OPTIONS`` ...) only half matches that route, so routing went on to the portal's
    catch-all mount, which answered its HTML 404; a mount matches every method, so this one comes
    first. The methods a path takes are read from the OpenAPI document (FastAPI's own record of the
    routes; its router keeps included routers in private structures): 405 carries them in ``Allow``.
    """
    table: list[tuple[re.Pattern[str], list[str]]] = []

    async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
        if not table:
            table.extend(_method_table(app))
        path = scope["path"]
        allowed = sorted({method for pattern, methods in table if pattern.match(path) for method in methods})
        if allowed:
            message = f"{scope['method']} {path}: the route takes {', '.join(allowed)}"
            headers = {"Allow": ", ".join(allowed)}
            answer = error_response(405, AdminErrorCode.METHOD_NOT_ALLOWED, message, headers=headers)
        else:
            answer = error_response(404, AdminErrorCode.ROUTE_NOT_FOUND, f"{path}: no such route")
        await answer(scope, receive, send)

    return Mount("/api", app=refuse)


def _method_table(app: FastAPI) -> list[tuple[re.Pattern[str], list[str]]]:
    """Each documented ``/api`` path as a pattern, with the methods it takes."""
    table = []
    for path, operations in app.openapi()["paths"].items():
        if path.startswith("/api"):
            pattern, _, _ = compile_path(path)
            table.append((pattern, [method.upper() for method in operations]))
    if app.docs_url is not None:
        table.append((compile_path(app.docs_url)[0], ["GET", "HEAD"]))
    return table
