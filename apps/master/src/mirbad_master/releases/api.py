"""``/api/releases`` and ``/api/nodes/{id}/releases``, ``/image-pulls``: versions, builds, images, pulls.

``GET /releases`` answers from the node monitor's cache (no node is asked): the master's version and
every agent's, with a skew warning where major.minor differs. ``GET /releases/changelog`` is the
changelog shipped with the master, as Markdown. A node's llama-server builds, vLLM images and pulls
are asked of its agent. ``POST /nodes/{id}/image-pulls`` starts a pull (202 with the job): a reference
that does not parse is 422 ``invalid_image_reference`` naming ``image``, a second pull of the same
image while one runs 409 ``pull_conflict``, a node without Docker 409 ``feature_missing``. ``DELETE``
cancels. Starts and cancels are audited.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from fastapi import APIRouter, Body, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse

from mirbad_master._api_errors import refusals
from mirbad_master._api_session import actor_of
from mirbad_master._composition import MasterServices
from mirbad_master.exceptions import ApiError
from mirbad_protocol.admin import AdminErrorCode
from mirbad_protocol.releases import ImagePull, NodeReleases, ReleasesView

from . import actions as releases

__all__ = ["releases_router"]

_MARKDOWN: Final[dict[int | str, dict[str, Any]]] = {
    200: {"description": "CHANGELOG.md", "content": {"text/markdown": {"schema": {"type": "string"}}}}
}
_Body = Annotated[Any, Body(description='`{"image": "registry/name:tag"}`')]


def releases_router(services: MasterServices) -> APIRouter:
    """The release routes over ``services``."""
    router = APIRouter(tags=["releases"])

    @router.get(
        "/releases",
        response_model=ReleasesView,
        summary="The master's version and every agent's, with a warning where major.minor differs",
    )
    async def versions() -> Response:
        return JSONResponse(releases.releases_view(services).to_wire())

    @router.get(
        "/releases/changelog",
        summary="The changelog shipped with the master (Markdown)",
        responses=_MARKDOWN | refusals(404),
    )
    async def changelog() -> Response:
        text = releases.changelog_text()
        if text is None:
            raise ApiError(
                404, AdminErrorCode.ROUTE_NOT_FOUND, "this master was installed without its changelog"
            )
        return PlainTextResponse(text, media_type="text/markdown; charset=utf-8")

    @router.get(
        "/nodes/{node_id}/releases",
        response_model=NodeReleases,
        summary="The node's llama-server builds, vLLM images and image pulls",
        responses=refusals(404, 502, 503, 504),
    )
    async def node(node_id: str) -> Response:
        return JSONResponse((await releases.node_releases(services, node_id)).to_wire())

    @router.post(
        "/nodes/{node_id}/image-pulls",
        status_code=202,
        response_model=ImagePull,
        summary="Pull a container image on the node (its Docker pulls; follow it with GET)",
        responses=refusals(400, 404, 409, 422, 502, 503, 504),
    )
    async def start_pull(node_id: str, body: _Body, request: Request) -> Response:
        image = releases.read_pull_request(body).image
        job = await releases.start_image_pull(services, node_id, image, actor_of(request))
        return JSONResponse(job.to_wire(), status_code=202)

    @router.get(
        "/nodes/{node_id}/image-pulls/{pull_id}",
        response_model=ImagePull,
        summary="One image pull with its per-layer progress",
        responses=refusals(404, 502, 503, 504),
    )
    async def one_pull(node_id: str, pull_id: str) -> Response:
        return JSONResponse((await releases.image_pull(services, node_id, pull_id)).to_wire())

    @router.delete(
        "/nodes/{node_id}/image-pulls/{pull_id}",
        response_model=ImagePull,
        summary="Cancel a running image pull",
        responses=refusals(404, 502, 503, 504),
    )
    async def cancel_pull(node_id: str, pull_id: str, request: Request) -> Response:
        job = await releases.cancel_image_pull(services, node_id, pull_id, actor_of(request))
        return JSONResponse(job.to_wire())

    return router
