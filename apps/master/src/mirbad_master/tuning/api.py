"""``/api/models/{id}/tune``, ``/api/models/{id}/tuning`` and ``/api/tuning``: tuning jobs and their runs.

A POST starts a run on the model's node (202 with the job; one job per node, benchmarks included, so
a second is 409 ``job_conflict``); ``GET /api/tuning`` lists each node's current (or last) run with
its live progress and ``DELETE /api/tuning`` cancels (the saved settings are restored): the shapes
every job kind shares (:mod:`mirbad_master._job_routes`). Apply best writes the winner's tuned settings
onto the saved definition and answers with the model's view, whose ``restartPending`` and
``changedSettings`` are the restart dialog: nothing restarts by itself.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from mirbad_master._api_errors import refusals
from mirbad_master._api_session import actor_of
from mirbad_master._composition import MasterServices
from mirbad_master._job_routes import add_job_routes, add_results_route, optional_body, read_optional_body
from mirbad_master._views import dump, model_view
from mirbad_protocol.admin import ModelView
from mirbad_protocol.tuning import TuningJobList, TuningJobView, TuningList, TuningRequest

from .actions import apply_tuning_run, cancel_tuning, start_tuning

__all__ = ["tuning_router"]

_Run = Annotated[str | None, Query(alias="run", description="the run's file name; the newest by default")]


def tuning_router(services: MasterServices) -> APIRouter:
    """The tuning routes over ``services``."""
    router = APIRouter(tags=["tuning"])

    @router.post(
        "/models/{model_id}/tune",
        status_code=202,
        response_model=TuningJobView,
        summary="Tune a Ready model: candidates as tuning instances, then the confirmation stage",
        responses=refusals(400, 404, 409, 422),
        openapi_extra=optional_body(TuningRequest),
        name="start_tuning",
    )
    async def start_tuning_route(model_id: str, request: Request) -> Response:
        body = await read_optional_body(request, TuningRequest)
        job = await start_tuning(services, model_id, body, actor=actor_of(request))
        return JSONResponse(dump(job), status_code=202)

    add_results_route(
        router,
        services,
        results="tuning",
        listing=TuningList,
        read=services.tuning_results.list,
        summary="A model's stored tuning runs, newest first (unreadable files are skipped)",
    )

    @router.post(
        "/models/{model_id}/tuning/apply",
        response_model=ModelView,
        summary="Save a run's tuned settings onto the model (a running model then reads restart-pending)",
        responses=refusals(404),
    )
    async def apply_tuning(model_id: str, request: Request, run: _Run = None) -> Response:
        stored = await apply_tuning_run(services, model_id, run, actor=actor_of(request))
        return JSONResponse(dump(await model_view(services, stored)))

    async def cancel(node_id: str | None, actor: str) -> list[TuningJobView]:
        return await cancel_tuning(services, node_id, actor=actor)

    add_job_routes(
        router,
        kind="tuning",
        listing=TuningJobList,
        jobs=services.tuning.jobs,
        cancel=cancel,
        current_summary="Each node's running tuning job (else its last one) with its progress",
        cancel_summary="Cancel the running tuning job(s); the saved settings are restored",
    )
    return router
