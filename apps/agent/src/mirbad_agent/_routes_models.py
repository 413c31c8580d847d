"""The model routes of the agent contract: runtimes, statuses, start, stop, restart and logs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from mirbad_protocol import ContainerLaunch, MirbadError, ProcessLaunch
from mirbad_protocol.agent import (
    LOG_STREAM_MEDIA_TYPE,
    ROUTE_MODEL,
    ROUTE_MODEL_LOGS,
    ROUTE_MODEL_RESTART,
    ROUTE_MODEL_START,
    ROUTE_MODEL_STOP,
    ROUTE_MODELS,
    ROUTE_RUNTIMES,
    AgentErrorCode,
    LogEnd,
    LogLine,
    LogTail,
    RestartRequest,
    StartRequest,
    StatusList,
)
from mirbad_runtime import ModelNotFoundError, RuntimeDriver

from ._composition import AgentServices
from ._http import query_bool, query_int, read_wire, wire_response
from .exceptions import RequestRefusedError

__all__ = ["model_routes"]

_DEFAULT_TAIL = 200
_MAX_TAIL = 10_000


def model_routes(services: AgentServices) -> list[Route]:
    """The routes under ``/agent/v1`` that describe the node and drive its models."""

    async def runtimes(request: Request) -> JSONResponse:
        return wire_response(services.info())

    async def list_models(request: Request) -> JSONResponse:
        statuses = await services.runtimes.list_statuses()
        services.lifecycle.settle(statuses)
        return wire_response(StatusList(models=statuses))

    async def model_status(request: Request) -> JSONResponse:
        status = await services.runtimes.status(request.path_params["model_id"])
        services.lifecycle.settle([status], complete=False)
        return wire_response(status)

    async def start(request: Request) -> JSONResponse:
        body = await read_wire(request, StartRequest)
        spec = _checked_spec(request, body.spec)
        force = body.force or query_bool(request, "force")
        return wire_response(await services.lifecycle.start(spec, force=force))

    async def restart(request: Request) -> JSONResponse:
        body = await read_wire(request, RestartRequest)
        spec = _checked_spec(request, body.spec)
        force = body.force or query_bool(request, "force")
        return wire_response(await services.lifecycle.restart(spec, force=force))

    async def stop(request: Request) -> JSONResponse:
        return wire_response(await services.lifecycle.stop(request.path_params["model_id"]))

    async def logs(request: Request) -> Response:
        model_id = request.path_params["model_id"]
        follow = query_bool(request, "follow")
        tail = query_int(request, "tail", 0 if follow else _DEFAULT_TAIL, minimum=0, maximum=_MAX_TAIL)
        driver = await _driver_of(services, model_id)
        if follow:
            return StreamingResponse(_log_events(driver, model_id, tail), media_type=LOG_STREAM_MEDIA_TYPE)
        return wire_response(LogTail(model_id=model_id, lines=await driver.logs(model_id, tail)))

    return [
        Route(ROUTE_RUNTIMES, runtimes, methods=["GET"]),
        Route(ROUTE_MODELS, list_models, methods=["GET"]),
        Route(ROUTE_MODEL, model_status, methods=["GET"]),
        Route(ROUTE_MODEL_START, start, methods=["POST"]),
        Route(ROUTE_MODEL_RESTART, restart, methods=["POST"]),
        Route(ROUTE_MODEL_STOP, stop, methods=["POST"]),
        Route(ROUTE_MODEL_LOGS, logs, methods=["GET"]),
    ]


def _checked_spec(request: Request, spec: ContainerLaunch | ProcessLaunch) -> ContainerLaunch | ProcessLaunch:
    model_id = request.path_params["model_id"]
    if spec.model_id != model_id:
        raise RequestRefusedError(
            AgentErrorCode.INVALID_REQUEST,
            f"the spec is for model {spec.model_id}, the path names model {model_id}",
            field="spec.modelId",
        )
    return spec


async def _driver_of(services: AgentServices, model_id: str) -> RuntimeDriver:
    found = await services.runtimes.locate(model_id)
    if found is None:
        raise ModelNotFoundError(model_id)
    return found[0]


async def _log_events(driver: RuntimeDriver, model_id: str, tail: int) -> AsyncIterator[str]:
    """The followed log as NDJSON events: a ``line`` per log line, then one ``end``."""
    lines = driver.follow_logs(model_id, tail)
    end = LogEnd()
    try:
        async for line in lines:
            yield _event(LogLine(line=line))
    except MirbadError as exc:
        end = LogEnd(reason="error", message=str(exc))
    finally:
        close = getattr(lines, "aclose", None)
        if close is not None:
            # Release the runtime's log reader even when the client went away mid-stream.
            with anyio.CancelScope(shield=True):
                await close()
    yield _event(end)


def _event(event: LogLine | LogEnd) -> str:
    return json.dumps(event.to_wire(), ensure_ascii=False, separators=(",", ":")) + "\n"
