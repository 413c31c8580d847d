"""The release routes of the agent contract: the llama-server builds, the vLLM images, image pulls.

Each catalogued llama-server is asked ``--version`` (bounded; one that does not answer is reported
with the reason, not left out). The image routes answer 404 ``route_not_found`` on a node without
Docker; a pull start checks the reference (422 ``invalid_image_reference`` naming ``image``) and the
one-pull-per-image rule (409 ``pull_conflict``) before it answers 202 with the job.
"""

from __future__ import annotations

import json
import subprocess
from typing import Final

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from mirbad_protocol import InvalidFieldError
from mirbad_protocol.agent import MAX_REQUEST_BODY_BYTES, AgentErrorCode
from mirbad_protocol.releases import (
    ROUTE_IMAGE_PULL,
    ROUTE_IMAGE_PULL_CANCEL,
    ROUTE_IMAGE_PULLS,
    ROUTE_IMAGES,
    ROUTE_LLAMA_SERVER_BUILDS,
    ImageList,
    ImagePullList,
    ImagePullRequest,
    LlamaServerBinary,
    LlamaServerBuildList,
)
from mirbad_router import read_body
from mirbad_runtime import CatalogedExecutable, NodeImages

from ._composition import AgentServices
from ._http import wire_response
from ._llama_server import LLAMA_SERVER_NAME
from .exceptions import RequestRefusedError

__all__ = ["VERSION_TIMEOUT_S", "llama_server_build", "release_routes"]

VERSION_TIMEOUT_S: Final = 10.0
"""How long ``llama-server --version`` may take before the build is reported as silent."""


def release_routes(services: AgentServices) -> list[Route]:
    """The routes under ``/agent/v1`` that tell what the node runs its models with, and pull images."""

    def images() -> NodeImages:
        if services.images is None:
            raise RequestRefusedError(AgentErrorCode.ROUTE_NOT_FOUND, "this node has no Docker, so no images")
        return services.images

    async def builds(request: Request) -> JSONResponse:
        entries = services.catalog.entries if services.catalog is not None else []
        found = [entry for entry in entries if entry.name.casefold() == LLAMA_SERVER_NAME]
        return wire_response(LlamaServerBuildList(builds=[await llama_server_build(e) for e in found]))

    async def list_images(request: Request) -> JSONResponse:
        return wire_response(ImageList(images=await images().images()))

    async def list_pulls(request: Request) -> JSONResponse:
        return wire_response(ImagePullList(pulls=images().pulls()))

    async def start_pull(request: Request) -> JSONResponse:
        body = await _pull_request(request)
        return wire_response(await images().start_pull(body.image), status_code=202)

    async def one_pull(request: Request) -> JSONResponse:
        return wire_response(images().pull(request.path_params["pull_id"]))

    async def cancel_pull(request: Request) -> JSONResponse:
        return wire_response(await images().cancel_pull(request.path_params["pull_id"]))

    return [
        Route(ROUTE_LLAMA_SERVER_BUILDS, builds, methods=["GET"]),
        Route(ROUTE_IMAGES, list_images, methods=["GET"]),
        Route(ROUTE_IMAGE_PULLS, list_pulls, methods=["GET"]),
        Route(ROUTE_IMAGE_PULLS, start_pull, methods=["POST"]),
        Route(ROUTE_IMAGE_PULL, one_pull, methods=["GET"]),
        Route(ROUTE_IMAGE_PULL_CANCEL, cancel_pull, methods=["POST"]),
    ]


async def _pull_request(request: Request) -> ImagePullRequest:
    raw = await read_body(request, limit=MAX_REQUEST_BODY_BYTES)
    try:
        data = json.loads(raw) if raw.strip() else None
    except ValueError as exc:
        raise InvalidFieldError("(document)", f"not valid JSON: {exc}") from None
    try:
        return ImagePullRequest.from_user_input(data)
    except InvalidFieldError as exc:
        if exc.field != "image" or not isinstance(data, dict) or not isinstance(data.get("image"), str):
            raise
        raise RequestRefusedError(AgentErrorCode.INVALID_IMAGE_REFERENCE, str(exc), field="image") from None


async def llama_server_build(entry: CatalogedExecutable) -> LlamaServerBinary:
    """A catalogued llama-server with what ``--version`` prints (or why it could not be asked)."""
    path = str(entry.path)
    build = LlamaServerBinary(name=entry.name, version=entry.version, path=path, sha256=entry.sha256)
    try:
        with anyio.fail_after(VERSION_TIMEOUT_S):
            done = await anyio.run_process([path, "--version"], check=False, stderr=subprocess.STDOUT)
    except TimeoutError:
        return build.model_copy(update={"error": f"--version did not answer within {VERSION_TIMEOUT_S:g} s"})
    except OSError as exc:
        return build.model_copy(update={"error": f"cannot run it: {exc.strerror or exc}"})
    lines = [line.strip() for line in done.stdout.decode("utf-8", errors="replace").splitlines()]
    versions = [line.removeprefix("version:").strip() for line in lines if line.startswith("version:")]
    reported = versions[0] if versions else None
    built = next((line for line in lines if line.startswith("built with")), None)
    if reported is None:
        tail = " / ".join(lines[-2:]) or "no output"
        return build.model_copy(update={"error": f"--version exited {done.returncode}: {tail}"})
    return build.model_copy(update={"reported": reported, "built_with": built})
