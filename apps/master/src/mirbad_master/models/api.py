"""``/api/models``: the registry, starts and stops by hand, and each model's log as server-sent events.

Every change goes through the room's actions (:mod:`mirbad_master.models.actions`), as the portal's
do. Starts, stops and restarts go through :class:`~mirbad_orchestration.supervision.ModelControl`, so
the recovery state, the crash count and the audit log follow them: a start by hand lifts a restart
pause, a stop is never taken for a crash.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any, Final

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from mirbad_master._api_errors import error_body, refusals, user_input
from mirbad_master._api_session import actor_of
from mirbad_master._composition import MasterServices
from mirbad_master._views import ModelView, dump, model_view
from mirbad_master.exceptions import ApiError
from mirbad_orchestration.fleet import AgentClient
from mirbad_orchestration.registry import filter_by_tags
from mirbad_protocol import MirbadError, ModelDefinition
from mirbad_protocol.admin import AdminErrorCode

from . import actions

__all__ = ["MAX_LOG_TAIL", "models_router"]

MAX_LOG_TAIL: Final = 10_000
"""The most past log lines one request may ask for."""

# A start or restart can be refused by admission, another start or the node itself; a stop or a log
# read reaches the node too.
_ON_A_NODE: Final = refusals(502, 503, 504)
_STARTING: Final = refusals(409, 422, 502, 503, 504)
# Before OpenAPI 3.2 the schema of an event stream describes each event (what a client such as
# schemathesis checks every event against), not the stream as one string.
_LOG_EVENT: Final[dict[str, Any]] = {
    "type": "object",
    "description": "one server-sent event: a log line as `data`; `event: end` closes the stream, "
    "`event: error` carries the refusal's JSON",
    "properties": {
        "event": {"type": "string"},
        "data": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
    "required": ["data"],
}
_LOG_STREAM: Final[dict[int | str, dict[str, Any]]] = {
    200: {"content": {"text/event-stream": {"schema": _LOG_EVENT}}}
}
_Definition = Annotated[ModelDefinition, user_input(ModelDefinition)]
_Force = Annotated[bool, Query(description="skip the node's memory admission")]


def models_router(services: MasterServices) -> APIRouter:
    """The routes under ``/models`` over ``services``."""
    router = APIRouter(prefix="/models", tags=["models"])

    async def view_of(model_id: str) -> Response:
        definition = await services.models.get(model_id)
        return JSONResponse(dump(await model_view(services, definition)))

    @router.get("", response_model=list[ModelView], summary="List models (with ?tag=, carrying ALL tags)")
    async def list_models(tag: Annotated[list[str] | None, Query()] = None) -> Response:
        definitions = filter_by_tags(await services.models.list(), tag or [])
        return JSONResponse([dump(await model_view(services, d)) for d in definitions])

    @router.post(
        "",
        status_code=201,
        response_model=ModelView,
        summary="Register a model",
        responses=refusals(409, 422, 507),  # 422: its placement names a GPU its node does not report
    )
    async def create_model(definition: _Definition, request: Request) -> Response:
        stored = await actions.create_model(services, definition, actor_of(request))
        answer = JSONResponse(dump(await model_view(services, stored)), status_code=201)
        answer.headers["Location"] = f"/api/models/{stored.id}"
        return answer

    @router.get("/{model_id}", response_model=ModelView, summary="One model")
    async def get_model(model_id: str) -> Response:
        return await view_of(model_id)

    @router.put(
        "/{model_id}",
        response_model=ModelView,
        summary="Replace a model's definition",
        responses=refusals(409, 422, 507),  # 422: its placement names a GPU its node does not report
    )
    async def update_model(model_id: str, definition: _Definition, request: Request) -> Response:
        if definition.id != model_id:
            raise ApiError(
                400,
                AdminErrorCode.INVALID_REQUEST,
                f"id: {definition.id!r} differs from the URL's {model_id!r}",
                field="id",
            )
        stored = await actions.update_model(services, definition, actor_of(request))
        return JSONResponse(dump(await model_view(services, stored)))

    @router.delete(
        "/{model_id}",
        status_code=204,
        summary="Stop a model and remove it",
        responses=refusals(409, 502, 503, 504, 507),  # 409: a tuning run holds it
    )
    async def delete_model(model_id: str, request: Request) -> Response:
        await actions.delete_model(services, model_id, actor_of(request))
        return Response(status_code=204)

    @router.post(
        "/{model_id}/start",
        response_model=ModelView,
        summary="Start a model (lifts a pause)",
        responses=_STARTING,
    )
    async def start_model(model_id: str, request: Request, force: _Force = False) -> Response:
        await actions.start_model(services, model_id, actor_of(request), force=force)
        return await view_of(model_id)

    @router.post(
        "/{model_id}/stop",
        response_model=ModelView,
        summary="Stop a model",
        responses=refusals(502, 503, 504, 507),
    )
    async def stop_model(model_id: str, request: Request) -> Response:
        await actions.stop_model(services, model_id, actor_of(request))
        return await view_of(model_id)

    @router.post(
        "/{model_id}/restart",
        response_model=ModelView,
        summary="Restart with the saved definition",
        responses=_STARTING,
    )
    async def restart_model(model_id: str, request: Request, force: _Force = False) -> Response:
        await actions.restart_model(services, model_id, actor_of(request), force=force)
        return await view_of(model_id)

    @router.get(
        "/{model_id}/logs",
        response_class=StreamingResponse,
        summary="The model's log: the last lines, then each new one (text/event-stream)",
        responses={**_LOG_STREAM, **_ON_A_NODE},
    )
    async def model_logs(
        model_id: str,
        tail: Annotated[int, Query(ge=0, le=MAX_LOG_TAIL)] = 200,
        follow: Annotated[bool, Query(description="keep streaming new lines after the tail")] = True,
    ) -> Response:
        client = await _client_of(services, await services.models.get(model_id))
        # Read before the stream starts, so an unknown instance or a down node is a plain error status.
        lines = await client.logs(model_id, tail=tail)
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        events = _log_events(client, model_id, lines) if follow else _tail_events(lines)
        return StreamingResponse(events, media_type="text/event-stream", headers=headers)

    return router


async def _client_of(services: MasterServices, definition: ModelDefinition) -> AgentClient:
    holder = services.cache.locate(definition.id)
    node_id = holder.node_id if holder is not None else services.runtime.node_for(definition)
    return await services.client_of(node_id)


async def _log_events(client: AgentClient, model_id: str, tail: list[str]) -> AsyncIterator[str]:
    """The tail, then every new line, as SSE; ends with an ``end`` (or ``error``) event.

    The response ends when the model exits or the client leaves (the server cancels the generator,
    which closes the agent stream).
    """
    for line in tail:
        yield _event(line)
    try:
        async with contextlib.aclosing(client.follow_logs(model_id, tail=0)) as follow:
            async for line in follow:
                yield _event(line)
    except MirbadError as exc:
        # The envelope of every refusal, so a client reads the node and the model from its fields.
        yield _event(json.dumps(error_body(exc), ensure_ascii=False), kind="error")
        return
    yield _event("exited", kind="end")


async def _tail_events(tail: list[str]) -> AsyncIterator[str]:
    """The tail alone, closed by an ``end`` event, for callers that want a snapshot of the log."""
    for line in tail:
        yield _event(line)
    yield _event("tail", kind="end")


def _event(text: str, *, kind: str | None = None) -> str:
    head = f"event: {kind}\n" if kind else ""
    return head + "".join(f"data: {part}\n" for part in text.replace("\r", "").split("\n")) + "\n"
