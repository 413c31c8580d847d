"""``/api/models/{id}/benchmark(s)`` and ``/api/benchmark``: benchmark jobs and their stored results.

A POST starts a job on the model's node (202 with the job; one job per node, so a second is 409
``job_conflict`` naming the running job); ``GET /api/benchmark`` lists each node's current (or last)
job with its live progress and ``DELETE /api/benchmark`` cancels (the shapes every job kind shares,
:mod:`mirbad_master._job_routes`). Every start and cancel is audited by the room's actions.
"""

from __future__ import annotations

from typing import Annotated, Final

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from mirbad_master._api_errors import refusals
from mirbad_master._api_session import actor_of
from mirbad_master._composition import MasterServices
from mirbad_master._job_routes import add_job_routes, add_results_route, optional_body, read_optional_body
from mirbad_master._views import dump
from mirbad_orchestration.jobs import PRESETS
from mirbad_protocol.benchmarks import BenchmarkJobList, BenchmarkJobView, BenchmarkList, BenchmarkOptions

from .actions import cancel_benchmarks, start_benchmark

__all__ = ["benchmarks_router"]

_PRESET_HELP: Final = f"the preset: one of {', '.join(PRESETS)}; none: the classic suite"
_Preset = Annotated[str | None, Query(description=_PRESET_HELP)]


def benchmarks_router(services: MasterServices) -> APIRouter:
    """The benchmark routes over ``services``."""
    router = APIRouter(tags=["benchmarks"])

    @router.post(
        "/models/{model_id}/benchmark",
        status_code=202,
        response_model=BenchmarkJobView,
        summary="Benchmark a Ready model with its current settings (its node goes into maintenance)",
        responses=refusals(400, 404, 409, 422),
        openapi_extra=optional_body(BenchmarkOptions),
        name="start_benchmark",
    )
    async def start_benchmark_route(model_id: str, request: Request, preset: _Preset = None) -> Response:
        options = await read_optional_body(request, BenchmarkOptions)
        job = await start_benchmark(
            services, model_id, preset=preset, guards=options.guards, actor=actor_of(request)
        )
        return JSONResponse(dump(job), status_code=202)

    add_results_route(
        router,
        services,
        results="benchmarks",
        listing=BenchmarkList,
        read=services.benchmarks.list,
        summary="A model's stored benchmark results, newest first (unreadable files are skipped)",
    )

    async def cancel(node_id: str | None, actor: str) -> list[BenchmarkJobView]:
        return await cancel_benchmarks(services, node_id, actor=actor)

    add_job_routes(
        router,
        kind="benchmark",
        listing=BenchmarkJobList,
        jobs=services.jobs.jobs,
        cancel=cancel,
        current_summary="Each node's running benchmark job (else its last one) with its progress",
        cancel_summary="Cancel the running benchmark job(s); the node leaves maintenance",
        current_name="current_benchmarks",
    )
    return router
