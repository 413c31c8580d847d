"""``/api/models/{id}/benchmark(s)`` and ``/api/benchmark``: benchmark jobs and their stored results.

A POST starts a job on the model's node (202 with the job; one job per node, so a second is 409
``job_conflict`` naming the running job); ``GET /api/benchmark`` lists each node's current (or last)
job with its live progress and ``DELETE /api/benchmark`` cancels. Every start and cancel is audited.
"""

from __future__ import annotations

from typing import Annotated, Final

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from mirbad_orchestration.jobs import PRESETS
from mirbad_protocol import BenchmarkJobList, BenchmarkJobView, BenchmarkList, BenchmarkOptions, SloGuards

from ._api_errors import refusals
from ._api_session import actor_of
from ._composition import MasterServices
from ._views import dump

__all__ = ["benchmarks_router"]

_PRESET_HELP: Final = f"the preset: one of {', '.join(PRESETS)}; none: the classic suite"
# The optional body, documented by hand: it is read as user input (an unknown field is a 400).
_OPTIONS_BODY: Final = {
    "requestBody": {
        "required": False,
        "content": {"application/json": {"schema": BenchmarkOptions.model_json_schema(by_alias=True)}},
    }
}
_Preset = Annotated[str | None, Query(description=_PRESET_HELP)]
_Node = Annotated[str | None, Query(alias="node", description="cancel only this node's job")]


async def start_benchmark_job(
    services: MasterServices,
    model_id: str,
    actor: str,
    *,
    preset: str | None = None,
    guards: SloGuards | None = None,
) -> BenchmarkJobView:
    """Start a benchmark of ``model_id`` and audit it: Benchmark (API and portal).

    Raises:
        MirbadError: the start was refused (see :meth:`BenchmarkJobs.start`); nothing is audited then.
    """
    job = await services.jobs.start(model_id, preset=preset, guards=guards)
    detail = f"job {job.id}" + (f", preset {preset}" if preset else "")
    await services.audit.record(actor, "model.benchmark", model_id, node_id=job.node_id, detail=detail)
    return job


def benchmarks_router(services: MasterServices) -> APIRouter:
    """The benchmark routes over ``services``."""
    router = APIRouter(tags=["benchmarks"])

    @router.post(
        "/models/{model_id}/benchmark",
        status_code=202,
        response_model=BenchmarkJobView,
        summary="Benchmark a Ready model with its current settings (its node goes into maintenance)",
        responses=refusals(400, 404, 409, 422),
        openapi_extra=_OPTIONS_BODY,
    )
    async def start_benchmark(model_id: str, request: Request, preset: _Preset = None) -> Response:
        raw = await request.body()
        options = BenchmarkOptions.from_user_json(raw) if raw.strip() else BenchmarkOptions()
        job = await start_benchmark_job(
            services, model_id, actor_of(request), preset=preset, guards=options.guards
        )
        return JSONResponse(dump(job), status_code=202)

    @router.get(
        "/models/{model_id}/benchmarks",
        response_model=BenchmarkList,
        summary="A model's stored benchmark results, newest first (unreadable files are skipped)",
        responses=refusals(404),
    )
    async def list_benchmarks(model_id: str) -> Response:
        await services.models.get(model_id)
        return JSONResponse(dump(await services.benchmarks.list(model_id)))

    @router.get(
        "/benchmark",
        response_model=BenchmarkJobList,
        summary="Each node's running benchmark job (else its last one) with its progress",
    )
    async def current_benchmarks() -> Response:
        return JSONResponse({"jobs": [dump(job) for job in services.jobs.jobs()]})

    @router.delete(
        "/benchmark",
        response_model=BenchmarkJobList,
        summary="Cancel the running benchmark job(s); the node leaves maintenance",
        responses=refusals(404),
    )
    async def cancel_benchmark(request: Request, node_id: _Node = None) -> Response:
        cancelled = await services.jobs.cancel(node_id)
        await services.audit.record_jobs(actor_of(request), "model.benchmark.cancel", cancelled)
        return JSONResponse({"jobs": [dump(job) for job in cancelled]})

    return router
