"""``/api/nodes/{node}/host/...``: host services (units through hostd, Docker containers) of one node.

Thin routes over :mod:`.actions`, which holds the checks that stay on the master, the refusals as the
admin API's codes and the ``host.*`` audit lines. The principal of a whitelist change comes from the
request's own session (the admin guard's), never from its JSON; a password field in a body is not read.
A body that is not JSON, or a bad field, is a 422 naming it, as hostd answers the same mistakes.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, TypeVar

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from mirbad_master._api_errors import refusals
from mirbad_master._api_session import actor_of
from mirbad_master._composition import MasterServices
from mirbad_master.exceptions import ApiError
from mirbad_protocol import InvalidFieldError, WireModel
from mirbad_protocol.admin import AdminErrorBody, AdminErrorCode
from mirbad_protocol.hostd import WhitelistAdd, WhitelistUpdate

from . import actions

__all__ = ["services_router"]

_M = TypeVar("_M", bound=WireModel)

_Confirm = Annotated[str | None, Query(description="the protected service's name, typed to confirm")]
_Include = Annotated[str | None, Query(description="`all`: discovery and the deny list too")]
# Every host-service route may answer these: hostd's refusals pass through, the node may be away.
_RESPONSES: Final[dict[int | str, dict[str, Any]]] = {
    **refusals(404, 409, 422, 502, 503, 504),
    403: {
        "model": AdminErrorBody,
        "description": "`confirm`, `denied` (`pattern` names the node's deny pattern), `not_whitelisted`, "
        "`whitelist_refused`: see the message",
    },
}


class _ContainerAdd(WireModel):
    """``POST .../host/containers``: a container onto the whitelist, its name typed in ``confirm``."""

    name: str
    confirm: str
    display_name: str = ""
    protected: bool = False


class _ContainerUpdate(WireModel):
    """``PATCH .../host/containers/{name}``: unprotecting needs ``confirm``."""

    display_name: str | None = None
    protected: bool | None = None
    confirm: str | None = None


class _Autostart(WireModel):
    """``PUT .../autostart``: on or off (off needs ``confirm`` for a protected service)."""

    enabled: bool
    confirm: str | None = None


def services_router(services: MasterServices) -> APIRouter:
    """The host-service routes over ``services``."""
    router = APIRouter(tags=["host services"])

    @router.get(
        "/nodes/{node_id}/host/services",
        summary="A node's whitelisted units (?include=all)",
        responses=refusals(404, 502, 503, 504),  # it reaches the node: away, slow, or answering oddly
    )
    async def units(node_id: str, include: _Include = None) -> Response:
        if include not in (None, "all"):
            raise InvalidFieldError("include", "must be `all` or absent")
        listing = await actions.units(services, node_id, include_all=include == "all")
        return JSONResponse(listing.to_wire())

    @router.post(
        "/nodes/{node_id}/host/services/{name}/{action}",
        status_code=202,
        summary="Start, stop, restart, enable or disable a whitelisted unit",
        responses=_RESPONSES,
    )
    async def unit_action(
        node_id: str, name: str, action: str, request: Request, confirm: _Confirm = None
    ) -> Response:
        done = await actions.unit_action(services, node_id, name, action, actor_of(request), confirm=confirm)
        return JSONResponse(done.to_wire(), status_code=202)

    @router.post(
        "/nodes/{node_id}/host/whitelist", status_code=201, summary="Whitelist a unit", responses=_RESPONSES
    )
    async def add_unit(node_id: str, request: Request) -> Response:
        body = await _body(request, WhitelistAdd)
        entry = await actions.add_unit(services, node_id, body, _principal(request))
        return JSONResponse(entry.to_wire(), status_code=201)

    @router.patch(
        "/nodes/{node_id}/host/whitelist/{name}", summary="Rename or (un)protect a unit", responses=_RESPONSES
    )
    async def update_unit(node_id: str, name: str, request: Request) -> Response:
        body = await _body(request, WhitelistUpdate)
        entry = await actions.update_unit(services, node_id, name, body, _principal(request))
        return JSONResponse(entry.to_wire())

    @router.delete(
        "/nodes/{node_id}/host/whitelist/{name}",
        summary="Take a unit off the whitelist",
        responses=_RESPONSES,
    )
    async def remove_unit(node_id: str, name: str, request: Request) -> Response:
        entry = await actions.remove_unit(services, node_id, name, _principal(request))
        return JSONResponse(entry.to_wire())

    @router.get(
        "/nodes/{node_id}/host/containers",
        summary="A node's containers and the whitelist",
        responses=_RESPONSES,
    )
    async def containers(node_id: str) -> Response:
        entries, listing = await actions.containers(services, node_id)
        return JSONResponse(
            {
                "whitelist": [entry.to_wire() for entry in entries],
                "containers": [container.to_wire() for container in listing.containers],
            }
        )

    @router.post(
        "/nodes/{node_id}/host/containers",
        status_code=201,
        summary="Whitelist a container",
        responses=_RESPONSES,
    )
    async def add_container(node_id: str, request: Request) -> Response:
        body = await _body(request, _ContainerAdd)
        entry = await actions.add_container(
            services,
            node_id,
            body.name,
            _principal(request),
            confirm=body.confirm,
            display_name=body.display_name,
            protected=body.protected,
        )
        return JSONResponse(entry.to_wire(), status_code=201)

    @router.patch(
        "/nodes/{node_id}/host/containers/{name}",
        summary="Rename or (un)protect a container",
        responses=_RESPONSES,
    )
    async def update_container(node_id: str, name: str, request: Request) -> Response:
        body = await _body(request, _ContainerUpdate)
        entry = await actions.update_container(
            services,
            node_id,
            name,
            _principal(request),
            protected=body.protected,
            display_name=body.display_name,
            confirm=body.confirm,
        )
        return JSONResponse(entry.to_wire())

    @router.delete(
        "/nodes/{node_id}/host/containers/{name}",
        summary="Take a container off the whitelist",
        responses=_RESPONSES,
    )
    async def remove_container(node_id: str, name: str, request: Request) -> Response:
        entry = await actions.remove_container(services, node_id, name, _principal(request))
        return JSONResponse(entry.to_wire())

    @router.post(
        "/nodes/{node_id}/host/containers/{name}/{action}",
        status_code=202,
        summary="Start, stop or restart a whitelisted container",
        responses=_RESPONSES,
    )
    async def container_action(
        node_id: str, name: str, action: str, request: Request, confirm: _Confirm = None
    ) -> Response:
        done = await actions.container_action(
            services, node_id, name, action, actor_of(request), confirm=confirm
        )
        return JSONResponse(done.to_wire(), status_code=202)

    @router.put(
        "/nodes/{node_id}/host/containers/{name}/autostart",
        summary="A container's autostart",
        responses=_RESPONSES,
    )
    async def autostart(node_id: str, name: str, request: Request) -> Response:
        actions.checked_container_name(name)  # before the body, as hostd reads a path first
        body = await _body(request, _Autostart)
        container = await actions.container_autostart(
            services, node_id, name, body.enabled, actor_of(request), confirm=body.confirm
        )
        return JSONResponse(container.to_wire())

    return router


def _principal(request: Request) -> str:
    # Set by the admin guard from this request's own session or password, never from its body; empty
    # (refused by the whitelist's check) if it were ever missing.
    actor = getattr(request.state, "actor", None)
    return actor if isinstance(actor, str) else ""


async def _body(request: Request, model: type[_M]) -> _M:
    # 422 naming the field, as hostd answers the same mistakes (the "bad input").
    try:
        raw = await request.json()
    except ValueError:
        raise ApiError(422, AdminErrorCode.INVALID_REQUEST, "the body must be JSON", field="(body)") from None
    try:
        return model.from_user_input(_without_passwords(raw))
    except InvalidFieldError as exc:
        raise ApiError(422, AdminErrorCode.INVALID_REQUEST, str(exc), field=exc.field) from None


def _without_passwords(body: Any) -> Any:
    # Password fields are ignored, not refused: the session already says who is asking.
    if isinstance(body, dict):
        return {k: v for k, v in body.items() if "password" not in str(k).lower()}
    return body
