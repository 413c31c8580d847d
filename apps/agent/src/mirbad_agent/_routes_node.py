"""The node routes of the agent contract: memory, GPUs, telemetry, GGUF, folders, model files and configs."""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from mirbad_protocol.agent import (
    ROUTE_FOLDERS,
    ROUTE_GGUF_INSPECT,
    ROUTE_GPUS,
    ROUTE_MEMORY,
    ROUTE_MODEL_CONFIG,
    ROUTE_MODEL_FILES,
    ROUTE_TELEMETRY,
    AgentErrorCode,
    GgufInspectRequest,
    GpuList,
    ModelFileList,
    ModelFilesRequest,
    ModelTelemetry,
    TelemetrySnapshot,
)

from ._composition import AgentServices
from ._http import query_datetime, query_int, read_wire, wire_response
from .exceptions import PathRefusedError, RequestRefusedError

__all__ = ["node_routes"]

_MAX_ROOTS = 1_000


def node_routes(services: AgentServices) -> list[Route]:
    """The routes under ``/agent/v1`` that report on the node itself."""

    async def memory(request: Request) -> JSONResponse:
        return wire_response(await services.memory.snapshot())

    async def gpus(request: Request) -> JSONResponse:
        return wire_response(GpuList(gpus=await services.gpus()))

    async def telemetry(request: Request) -> JSONResponse:
        since = query_datetime(request, "since")
        capacity = services.ring.capacity
        limit = query_int(request, "limit", capacity, minimum=0, maximum=capacity)
        wanted = request.query_params.get("model")
        model_ids = [wanted] if wanted is not None else services.ring.model_ids()
        models = [
            ModelTelemetry(model_id=model_id, samples=samples)
            for model_id in model_ids
            if (samples := services.ring.history(model_id, since=since, limit=limit))
        ]
        # The host's samples go with the whole ring only: a read of one model (a job's) needs none.
        host = services.ring.host_history(since=since, limit=limit) if wanted is None else []
        snapshot = TelemetrySnapshot(
            taken_at=datetime.now(UTC),
            interval_s=services.telemetry_interval_s,
            models=models,
            host_samples=host,
        )
        return wire_response(snapshot)

    async def gguf_inspect(request: Request) -> JSONResponse:
        body = await read_wire(request, GgufInspectRequest)
        return wire_response(await services.folders.gguf_info(body.path))

    async def folders(request: Request) -> JSONResponse:
        root = query_int(request, "root", 0, minimum=0, maximum=_MAX_ROOTS)
        path = request.query_params.get("path", "")
        return wire_response(await services.folders.list_folder(root, path))

    async def model_files(request: Request) -> JSONResponse:
        body = await read_wire(request, ModelFilesRequest)
        return wire_response(ModelFileList(files=await services.folders.present(body.paths)))

    async def model_config(request: Request) -> JSONResponse:
        path = request.query_params.get("path")
        if path is None:
            raise RequestRefusedError(
                AgentErrorCode.INVALID_REQUEST, "path: a folder is required", field="path"
            )
        try:
            return wire_response(await services.folders.model_config(path))
        except PathRefusedError as exc:
            # The query parameter is the field at fault: the refusal names it.
            raise RequestRefusedError(AgentErrorCode.PATH_REFUSED, str(exc), field="path") from None

    return [
        Route(ROUTE_MEMORY, memory, methods=["GET"]),
        Route(ROUTE_GPUS, gpus, methods=["GET"]),
        Route(ROUTE_TELEMETRY, telemetry, methods=["GET"]),
        Route(ROUTE_GGUF_INSPECT, gguf_inspect, methods=["POST"]),
        Route(ROUTE_FOLDERS, folders, methods=["GET"]),
        Route(ROUTE_MODEL_FILES, model_files, methods=["POST"]),
        Route(ROUTE_MODEL_CONFIG, model_config, methods=["GET"]),
    ]
