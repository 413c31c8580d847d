"""The download routes of the agent contract: start, list, one job, cancel, retry, remove, and size.

The size route lists a request's source as a start does and answers what it would fetch, starting
nothing (a restore preview asks it for each missing folder).

A start is checked (the request, the source, the free space) before it answers, so a bad repo id, an
unknown revision or a full disk is refused with a 4xx naming the field; the transfer itself then runs
in the agent's task group and the caller follows it with GET.
"""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mirbad_protocol import InvalidFieldError
from mirbad_protocol.agent import MAX_REQUEST_BODY_BYTES, AgentErrorCode
from mirbad_protocol.downloads import (
    ROUTE_DOWNLOAD,
    ROUTE_DOWNLOAD_CANCEL,
    ROUTE_DOWNLOAD_RETRY,
    ROUTE_DOWNLOAD_SIZE,
    ROUTE_DOWNLOADS,
    DownloadList,
    DownloadSize,
    HuggingFaceDownload,
    OllamaDownload,
    check_download_id,
)
from mirbad_router import read_body
from mirbad_runtime.downloads import DownloadManager

from ._composition import AgentServices
from ._http import wire_response
from .exceptions import RequestRefusedError

__all__ = ["download_routes", "read_download_request"]

_KINDS: dict[str, type[HuggingFaceDownload | OllamaDownload]] = {
    "huggingface": HuggingFaceDownload,
    "ollama": OllamaDownload,
}


def download_routes(services: AgentServices) -> list[Route]:
    """The routes under ``/agent/v1/downloads`` (none answer but 404 on a node without downloads)."""

    def manager() -> DownloadManager:
        if services.downloads is None:
            raise RequestRefusedError(
                AgentErrorCode.ROUTE_NOT_FOUND, "this node offers no downloads (no model root, or turned off)"
            )
        return services.downloads

    async def start(request: Request) -> JSONResponse:
        body = await read_download_request(request)
        return wire_response(await manager().start(body), status_code=202)

    async def size(request: Request) -> JSONResponse:
        # The body a start takes, token included: the source is listed as a start lists it.
        body = await read_download_request(request)
        plan = await manager().plan(body)
        total = sum(item.size for item in plan.files)
        answer = DownloadSize(revision=plan.revision, total_bytes=total, file_count=len(plan.files))
        return wire_response(answer)

    async def list_jobs(request: Request) -> JSONResponse:
        return wire_response(DownloadList(downloads=manager().jobs()))

    async def one(request: Request) -> JSONResponse:
        return wire_response(manager().get(_download_id(request)))

    async def cancel(request: Request) -> JSONResponse:
        return wire_response(await manager().cancel(_download_id(request)))

    async def retry(request: Request) -> JSONResponse:
        return wire_response(await manager().retry(_download_id(request)))

    async def remove(request: Request) -> Response:
        await manager().remove(_download_id(request))
        return Response(status_code=204)

    return [
        Route(ROUTE_DOWNLOADS, list_jobs, methods=["GET"]),
        Route(ROUTE_DOWNLOADS, start, methods=["POST"]),
        Route(ROUTE_DOWNLOAD_SIZE, size, methods=["POST"]),
        Route(ROUTE_DOWNLOAD, one, methods=["GET"]),
        Route(ROUTE_DOWNLOAD, remove, methods=["DELETE"]),
        Route(ROUTE_DOWNLOAD_CANCEL, cancel, methods=["POST"]),
        Route(ROUTE_DOWNLOAD_RETRY, retry, methods=["POST"]),
    ]


def _download_id(request: Request) -> str:
    try:
        return check_download_id(request.path_params["download_id"])
    except ValueError as exc:
        raise InvalidFieldError("downloadId", str(exc)) from None


async def read_download_request(request: Request) -> HuggingFaceDownload | OllamaDownload:
    """The body of a download start, as a person's input: unknown fields refused with their name.

    Raises:
        InvalidFieldError: not JSON, no or an unknown ``kind``, or a field that breaks the request.
        RequestRefusedError: no body.
    """
    raw = await read_body(request, limit=MAX_REQUEST_BODY_BYTES)
    if not raw.strip():
        raise RequestRefusedError(AgentErrorCode.INVALID_REQUEST, "a JSON body is required")
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise InvalidFieldError("(document)", f"not valid JSON: {exc}") from None
    kind = data.get("kind") if isinstance(data, dict) else None
    model = _KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise InvalidFieldError("kind", f"must be one of {', '.join(sorted(_KINDS))}")
    return model.from_user_input(data)
