"""``/api/models/{id}/tune``, ``/api/models/{id}/tuning`` and ``/api/tuning``: tuning jobs and their runs.

A POST starts a run on the model's node (202 with the job; one job per node, benchmarks included, so
a second is 409 ``job_conflict``); ``GET /api/tuning`` lists each node's current (or last) run with
its live progress and ``DELETE /api/tuning`` cancels (the saved settings are restored). Apply best
writes the winner's tuned settings onto the saved definition and answers with the model's view, whose
``restartPending`` and ``changedSettings`` are the restart dialog: nothing restarts by itself.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from mirbad_orchestration.exceptions import NoTuningRunError
from mirbad_orchestration.tuning import apply_best
from mirbad_protocol import (
    ModelDefinition,
    ModelView,
    TuningJobList,
    TuningJobView,
    TuningList,
    TuningRequest,
)

from ._api_errors import refusals
from ._api_session import actor_of
from ._composition import MasterServices
from ._views import dump, model_view
from .models.actions import update_model

__all__ = ["apply_tuning_run", "tuning_router"]

# The optional body, documented by hand: it is read as user input (an unknown field is a 400).
_REQUEST_BODY = {
    "requestBody": {
        "required": False,
        "content": {"application/json": {"schema": TuningRequest.model_json_schema(by_alias=True)}},
    }
}
_Node = Annotated[str | None, Query(alias="node", description="cancel only this node's run")]
_Run = Annotated[str | None, Query(alias="run", description="the run's file name; the newest by default")]


async def apply_tuning_run(
    services: MasterServices, model_id: str, run: str | None, actor: str
) -> ModelDefinition:
    """Save run ``run``'s (None: the newest's) tuned settings onto ``model_id``: Apply best (API and portal).

    Raises:
        UnknownModelError: no such model.
        NoTuningRunError: the model has no such run, or the run's baseline won (nothing to apply).
    """
    saved = await services.models.get(model_id)
    listing = await services.tuning_results.list(model_id)
    name = run or (listing.files[0] if listing.files else None)
    if name is None:
        raise NoTuningRunError(f"model {model_id!r} has no tuning run")
    found = await services.tuning_results.load(model_id, name)
    if found.best_definition is None:
        raise NoTuningRunError(f"tuning run {name!r} kept the saved settings: there is nothing to apply")
    stored = await update_model(services, apply_best(saved, found.best_definition), actor)
    await services.audit.record(actor, "model.tune.apply", model_id, detail=name)
    return stored


async def start_tuning_job(
    services: MasterServices, model_id: str, body: TuningRequest, actor: str
) -> TuningJobView:
    """Start a tuning run of ``model_id`` and audit it: Tune (API and portal).

    Raises:
        MirbadError: the start was refused (see :meth:`TuningJobs.start`); nothing is audited then.
    """
    job = await services.tuning.start(model_id, body)
    detail = f"job {job.id}, goal {job.goal}, steps {', '.join(job.steps)}"
    detail += f", preset {job.preset}" if job.preset else ""
    await services.audit.record(actor, "model.tune", model_id, node_id=job.node_id, detail=detail)
    return job


def tuning_router(services: MasterServices) -> APIRouter:
    """The tuning routes over ``services``."""
    router = APIRouter(tags=["tuning"])

    @router.post(
        "/models/{model_id}/tune",
        status_code=202,
        response_model=TuningJobView,
        summary="Tune a Ready model: candidates as tuning instances, then the confirmation stage",
        responses=refusals(400, 404, 409, 422),
        openapi_extra=_REQUEST_BODY,
    )
    async def start_tuning(model_id: str, request: Request) -> Response:
        raw = await request.body()
        body = TuningRequest.from_user_json(raw) if raw.strip() else TuningRequest()
        job = await start_tuning_job(services, model_id, body, actor_of(request))
        return JSONResponse(dump(job), status_code=202)

    @router.get(
        "/models/{model_id}/tuning",
        response_model=TuningList,
        summary="A model's stored tuning runs, newest first (unreadable files are skipped)",
        responses=refusals(404),
    )
    async def list_tuning(model_id: str) -> Response:
        await services.models.get(model_id)
        return JSONResponse(dump(await services.tuning_results.list(model_id)))

    @router.post(
        "/models/{model_id}/tuning/apply",
        response_model=ModelView,
        summary="Save a run's tuned settings onto the model (a running model then reads restart-pending)",
        responses=refusals(404),
    )
    async def apply_tuning(model_id: str, request: Request, run: _Run = None) -> Response:
        stored = await apply_tuning_run(services, model_id, run, actor_of(request))
        return JSONResponse(dump(await model_view(services, stored)))

    @router.get(
        "/tuning",
        response_model=TuningJobList,
        summary="Each node's running tuning job (else its last one) with its progress",
    )
    async def current_tuning() -> Response:
        return JSONResponse({"jobs": [dump(job) for job in services.tuning.jobs()]})

    @router.delete(
        "/tuning",
        response_model=TuningJobList,
        summary="Cancel the running tuning job(s); the saved settings are restored",
        responses=refusals(404),
    )
    async def cancel_tuning(request: Request, node_id: _Node = None) -> Response:
        cancelled = await services.tuning.cancel(node_id)
        await services.audit.record_jobs(actor_of(request), "model.tune.cancel", cancelled)
        return JSONResponse({"jobs": [dump(job) for job in cancelled]})

    return router
