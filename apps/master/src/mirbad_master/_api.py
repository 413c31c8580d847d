"""The admin API, ``/api``: models, nodes, keys and the fleet's status, for the administrator only.

Every route but signing in runs :func:`~mirbad_master._api_session.admin_guard` first. FastAPI builds
the OpenAPI document of these routes (``/openapi.json``); errors follow ``_api_errors``.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response
from fastapi.responses import JSONResponse

from ._admin_auth import AdminAuth
from ._api_benchmarks import benchmarks_router
from ._api_downloads import downloads_router
from ._api_keys import keys_router
from ._api_models import models_router
from ._api_nodes import nodes_router
from ._api_releases import releases_router
from ._api_services import services_router
from ._api_session import admin_guard, session_router
from ._api_tuning import tuning_router
from ._composition import MasterServices
from ._views import StatusReport, dump, status_report

__all__ = ["api_router"]


def api_router(services: MasterServices, auth: AdminAuth) -> APIRouter:
    """Every ``/api`` route (mount it with ``prefix="/api"``)."""
    api = APIRouter()
    api.include_router(session_router(auth))
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
    api.include_router(guarded)
    return api
