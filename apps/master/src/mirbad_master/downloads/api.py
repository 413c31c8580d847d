"""``/api/nodes/{id}/downloads``: model downloads onto one node, through its agent.

A POST starts a job (202 with the job) on a node whose agent reports the feature flag of the request's
kind (``downloads.hf-native`` for ``huggingface``, ``downloads.ollama`` for ``ollama``): a node without
it is refused with 409 ``feature_missing`` before the agent is asked. The agent's own refusals keep
their codes and fields (``source_not_found``, ``source_needs_token``, ``download_conflict``,
``insufficient_space``, ``invalid_request``, and 507 ``insufficient_storage`` when the node's disk is
too full to write the job's record). GET lists the node's jobs with their progress, GET one
shows one, DELETE cancels (``?remove=true`` also deletes its partial files), POST ``.../retry`` runs a
failed or cancelled job again from the verified bytes on the node. A download id that is not the
agent's shape is a 400 naming ``downloadId``. A token in the request is forwarded to the agent and is
never logged, audited nor returned. Every start (refused ones too), cancel, retry and removal is audited.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from fastapi import APIRouter, Body, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BeforeValidator

from mirbad_master._api_errors import refusals
from mirbad_master._api_session import actor_of
from mirbad_master._composition import MasterServices
from mirbad_protocol import InvalidFieldError
from mirbad_protocol.downloads import DownloadJob, DownloadList, HuggingFaceDownload, OllamaDownload

from . import actions as downloads

__all__ = ["downloads_router", "read_download_request"]

_KINDS: Final[dict[str, type[HuggingFaceDownload | OllamaDownload]]] = {
    "huggingface": HuggingFaceDownload,
    "ollama": OllamaDownload,
}
_REMOVED: Final[dict[int | str, dict[str, Any]]] = {
    204: {"description": "remove=true: the job is forgotten and its partial files deleted"}
}


def read_download_request(data: Any) -> HuggingFaceDownload | OllamaDownload:
    """A download request as a person's input: ``kind`` picks the model, unknown fields are refused.

    Raises:
        InvalidFieldError: no or an unknown ``kind``, or a field that breaks the request.
    """
    if isinstance(data, HuggingFaceDownload | OllamaDownload):
        return data
    kind = data.get("kind") if isinstance(data, dict) else None
    model = _KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise InvalidFieldError("kind", f"must be one of {', '.join(sorted(_KINDS))}")
    return model.from_user_input(data)


# Not the discriminated DownloadRequest: its tag check would run before ours and name no field.
_Start = Annotated[HuggingFaceDownload | OllamaDownload, BeforeValidator(read_download_request), Body()]
_Remove = Annotated[bool, Query(description="also delete the job's partial files and forget it")]


def downloads_router(services: MasterServices) -> APIRouter:
    """The routes under ``/nodes/{node_id}/downloads`` over ``services``."""
    router = APIRouter(prefix="/nodes/{node_id}/downloads", tags=["downloads"])

    @router.post(
        "",
        status_code=202,
        response_model=DownloadJob,
        summary="Download a model from Hugging Face or an Ollama registry onto the node",
        responses=refusals(400, 403, 404, 409, 502, 503, 504, 507),
    )
    async def start_download(node_id: str, body: _Start, request: Request) -> Response:
        job = await downloads.start_download(services, node_id, body, actor_of(request))
        return JSONResponse(job.to_full_wire(), status_code=202)

    @router.get(
        "",
        response_model=DownloadList,
        summary="The node's download jobs, newest first, with their progress",
        responses=refusals(404, 502, 503, 504),
    )
    async def list_downloads(node_id: str) -> Response:
        return JSONResponse(
            DownloadList(downloads=await downloads.node_downloads(services, node_id)).to_full_wire()
        )

    @router.get(
        "/{download_id}",
        response_model=DownloadJob,
        summary="One download job with its per-file and overall progress",
        responses=refusals(400, 404, 502, 503, 504),
    )
    async def get_download(node_id: str, download_id: str) -> Response:
        return JSONResponse((await downloads.node_download(services, node_id, download_id)).to_full_wire())

    @router.delete(
        "/{download_id}",
        response_model=DownloadJob,
        summary="Cancel a download job (remove=true: also delete its partial files; answers 204)",
        responses=_REMOVED | refusals(400, 404, 409, 502, 503, 504, 507),
    )
    async def cancel_download(
        node_id: str, download_id: str, request: Request, remove: _Remove = False
    ) -> Response:
        job = await downloads.cancel_download(
            services, node_id, download_id, actor_of(request), remove=remove
        )
        return Response(status_code=204) if remove else JSONResponse(job.to_full_wire())

    @router.post(
        "/{download_id}/retry",
        response_model=DownloadJob,
        summary="Run a failed or cancelled download again, resuming from the verified bytes on the node",
        responses=refusals(400, 404, 409, 502, 503, 504, 507),
    )
    async def retry_download(node_id: str, download_id: str, request: Request) -> Response:
        job = await downloads.retry_download(services, node_id, download_id, actor_of(request))
        return JSONResponse(job.to_full_wire())

    return router
