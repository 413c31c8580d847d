"""The route shapes every job kind's room shares (benchmarks and tuning today, restores and moves later).

``GET /api/{kind}`` lists each node's running job of the kind (else its last one) with its progress,
``DELETE /api/{kind}[?node=]`` cancels through the room's cancel action (which audits) and answers with
the jobs it stopped, and ``GET /api/models/{id}/{results}`` lists a model's stored results (404 for an
unknown model). Each route keeps the name it had in its room, so the OpenAPI operation ids stay.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from mirbad_protocol import WireModel

from ._api_errors import refusals
from ._api_session import actor_of
from ._composition import MasterServices
from ._views import dump

__all__ = ["add_job_routes", "add_results_route", "optional_body", "read_optional_body"]

_Body = TypeVar("_Body", bound=WireModel)

_Node = Annotated[str | None, Query(alias="node", description="cancel only this node's job")]


def optional_body(model: type[WireModel]) -> dict[str, Any]:
    """The OpenAPI ``openapi_extra`` of a job start whose JSON body is optional.

    Documented by hand because the route reads the body itself, as user input (an unknown field is a
    400 naming it), with :func:`read_optional_body`.
    """
    schema = model.model_json_schema(by_alias=True)
    return {"requestBody": {"required": False, "content": {"application/json": {"schema": schema}}}}


async def read_optional_body(request: Request, model: type[_Body]) -> _Body:
    """The request's body as ``model`` read as user input; an empty body is the model's defaults."""
    raw = await request.body()
    return model.from_user_json(raw) if raw.strip() else model()


def add_job_routes(
    router: APIRouter,
    *,
    kind: str,
    listing: type[WireModel],
    jobs: Callable[[], Sequence[WireModel]],
    cancel: Callable[[str | None, str], Awaitable[Sequence[WireModel]]],
    current_summary: str,
    cancel_summary: str,
    current_name: str | None = None,
) -> None:
    """Add ``GET`` and ``DELETE /{kind}`` to ``router``.

    Args:
        router: the room's router.
        kind: the path and the routes' names (``benchmark``: ``current_benchmark``, ``cancel_benchmark``).
        listing: the answer's model (``{"jobs": [...]}``).
        jobs: every node's running (else last) job of the kind.
        cancel: the room's cancel action, by node (None: every node) and actor.
        current_summary: the listing's summary in the OpenAPI document.
        cancel_summary: the cancel's summary.
        current_name: the listing route's name, when it is not ``current_{kind}``.
    """

    async def current() -> Response:
        return JSONResponse({"jobs": [dump(job) for job in jobs()]})

    async def cancel_jobs(request: Request, node_id: _Node = None) -> Response:
        cancelled = await cancel(node_id, actor_of(request))
        return JSONResponse({"jobs": [dump(job) for job in cancelled]})

    router.add_api_route(
        f"/{kind}",
        current,
        methods=["GET"],
        response_model=listing,
        summary=current_summary,
        name=current_name or f"current_{kind}",
    )
    router.add_api_route(
        f"/{kind}",
        cancel_jobs,
        methods=["DELETE"],
        response_model=listing,
        summary=cancel_summary,
        responses=refusals(404),
        name=f"cancel_{kind}",
    )


def add_results_route(
    router: APIRouter,
    services: MasterServices,
    *,
    results: str,
    listing: type[WireModel],
    read: Callable[[str], Awaitable[WireModel]],
    summary: str,
) -> None:
    """Add ``GET /models/{model_id}/{results}``: a model's stored results of the kind (``read``)."""

    async def list_results(model_id: str) -> Response:
        await services.models.get(model_id)
        return JSONResponse(dump(await read(model_id)))

    router.add_api_route(
        f"/models/{{model_id}}/{results}",
        list_results,
        methods=["GET"],
        response_model=listing,
        summary=summary,
        responses=refusals(404),
        name=f"list_{results}",
    )
