"""``/api/nodes/{node}/host/...``: host services (units through hostd, Docker containers) of one node.

The checks that stay on the master run here and in :class:`~mirbad_orchestration.services.HostServiceManager`:
the container whitelist, the typed-name confirmations of protected services and the principal of a
whitelist change, which comes from the request's own session (the admin guard's), never from its JSON;
a password field in a body is not read. hostd's refusals come back as the admin API's codes: ``confirm``
and ``denied`` 403, an unknown service or action 404 ``service_not_found``, a bad field 422 naming it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Final, TypeVar

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from mirbad_orchestration.exceptions import (
    AgentRequestError,
    ContainerNotWhitelistedError,
    HostServiceConfirmError,
    WhitelistChangeRefusedError,
)
from mirbad_protocol import (
    CONTAINER_ACTIONS,
    HOSTD_ACTIONS,
    AdminErrorBody,
    AdminErrorCode,
    InvalidFieldError,
    WhitelistAdd,
    WhitelistUpdate,
    WireModel,
    container_service_name,
    service_name,
)

from ._api_errors import refusals
from ._api_session import actor_of
from ._composition import MasterServices
from .exceptions import ApiError

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
# hostd's and the agent's refusal codes, as the admin API's.
_PASSED: Final = {
    "confirm": AdminErrorCode.CONFIRM,
    "denied": AdminErrorCode.DENIED,
    "not_found": AdminErrorCode.SERVICE_NOT_FOUND,
    "service_not_found": AdminErrorCode.SERVICE_NOT_FOUND,
    "hostd_unavailable": AdminErrorCode.HOSTD_UNAVAILABLE,
    "invalid_request": AdminErrorCode.INVALID_REQUEST,
    "exists": AdminErrorCode.NODE_CONFLICT,
    "unit_unavailable": AdminErrorCode.NODE_CONFLICT,
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
    manager = services.host_services

    @router.get(
        "/nodes/{node_id}/host/services",
        summary="A node's whitelisted units (?include=all)",
        responses=refusals(404, 502, 503, 504),  # it reaches the node: away, slow, or answering oddly
    )
    async def units(node_id: str, include: _Include = None) -> Response:
        if include not in (None, "all"):
            raise InvalidFieldError("include", "must be `all` or absent")
        async with _refusals():
            listing = await manager.units(node_id, include_all=include == "all")
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
        _checked_name(name, service_name)
        if action not in HOSTD_ACTIONS:
            raise ApiError(404, AdminErrorCode.SERVICE_NOT_FOUND, f"no action {action!r}")
        async with _refusals():
            done = await manager.unit_action(node_id, name, action, confirm=confirm)
        await services.audit.record(actor_of(request), f"host.unit.{action}", name, node_id=node_id)
        return JSONResponse(done.to_wire(), status_code=202)

    @router.post(
        "/nodes/{node_id}/host/whitelist", status_code=201, summary="Whitelist a unit", responses=_RESPONSES
    )
    async def add_unit(node_id: str, request: Request) -> Response:
        body = await _body(request, WhitelistAdd)
        async with _refusals():
            entry = await manager.add_unit(node_id, body, principal=_principal(request))
        await services.audit.record(actor_of(request), "host.whitelist.add", entry.name, node_id=node_id)
        return JSONResponse(entry.to_wire(), status_code=201)

    @router.patch(
        "/nodes/{node_id}/host/whitelist/{name}", summary="Rename or (un)protect a unit", responses=_RESPONSES
    )
    async def update_unit(node_id: str, name: str, request: Request) -> Response:
        body = await _body(request, WhitelistUpdate)
        async with _refusals():
            entry = await manager.update_unit(node_id, name, body, principal=_principal(request))
        await services.audit.record(actor_of(request), "host.whitelist.update", name, node_id=node_id)
        return JSONResponse(entry.to_wire())

    @router.delete(
        "/nodes/{node_id}/host/whitelist/{name}",
        summary="Take a unit off the whitelist",
        responses=_RESPONSES,
    )
    async def remove_unit(node_id: str, name: str, request: Request) -> Response:
        async with _refusals():
            entry = await manager.remove_unit(node_id, name, principal=_principal(request))
        await services.audit.record(actor_of(request), "host.whitelist.remove", name, node_id=node_id)
        return JSONResponse(entry.to_wire())

    @router.get(
        "/nodes/{node_id}/host/containers",
        summary="A node's containers and the whitelist",
        responses=_RESPONSES,
    )
    async def containers(node_id: str) -> Response:
        async with _refusals():
            entries, listing = await manager.containers(node_id)
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
        _checked_name(body.name, container_service_name, field="name")
        async with _refusals():
            entry = await manager.add_container(
                node_id,
                body.name,
                confirm=body.confirm,
                principal=_principal(request),
                display_name=body.display_name,
                protected=body.protected,
            )
        await services.audit.record(actor_of(request), "host.containers.add", body.name, node_id=node_id)
        return JSONResponse(entry.to_wire(), status_code=201)

    @router.patch(
        "/nodes/{node_id}/host/containers/{name}",
        summary="Rename or (un)protect a container",
        responses=_RESPONSES,
    )
    async def update_container(node_id: str, name: str, request: Request) -> Response:
        body = await _body(request, _ContainerUpdate)
        async with _refusals():
            entry = await manager.update_container(
                node_id,
                name,
                principal=_principal(request),
                protected=body.protected,
                display_name=body.display_name,
                confirm=body.confirm,
            )
        await services.audit.record(actor_of(request), "host.containers.update", name, node_id=node_id)
        return JSONResponse(entry.to_wire())

    @router.delete(
        "/nodes/{node_id}/host/containers/{name}",
        summary="Take a container off the whitelist",
        responses=_RESPONSES,
    )
    async def remove_container(node_id: str, name: str, request: Request) -> Response:
        async with _refusals():
            entry = await manager.remove_container(node_id, name, principal=_principal(request))
        await services.audit.record(actor_of(request), "host.containers.remove", name, node_id=node_id)
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
        _checked_name(name, container_service_name)
        if action not in CONTAINER_ACTIONS:
            raise ApiError(404, AdminErrorCode.SERVICE_NOT_FOUND, f"no action {action!r}")
        async with _refusals():
            done = await manager.container_action(node_id, name, action, confirm=confirm)
        await services.audit.record(actor_of(request), f"host.container.{action}", name, node_id=node_id)
        return JSONResponse(done.to_wire(), status_code=202)

    @router.put(
        "/nodes/{node_id}/host/containers/{name}/autostart",
        summary="A container's autostart",
        responses=_RESPONSES,
    )
    async def autostart(node_id: str, name: str, request: Request) -> Response:
        _checked_name(name, container_service_name)
        body = await _body(request, _Autostart)
        async with _refusals():
            container = await manager.container_autostart(node_id, name, body.enabled, confirm=body.confirm)
        action = "on" if body.enabled else "off"
        await services.audit.record(
            actor_of(request), f"host.container.autostart.{action}", name, node_id=node_id
        )
        return JSONResponse(container.to_wire())

    return router


def _principal(request: Request) -> str | None:
    # Set by the admin guard from this request's own session or password, never from its body.
    actor = getattr(request.state, "actor", None)
    return actor if isinstance(actor, str) and actor else None


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


def _checked_name(name: str, check: Any, *, field: str = "name") -> None:
    try:
        check(name)
    except ValueError as exc:
        raise ApiError(422, AdminErrorCode.INVALID_REQUEST, f"{field}: {exc}", field=field) from None


@asynccontextmanager
async def _refusals() -> AsyncIterator[None]:
    try:
        yield
    except HostServiceConfirmError as exc:
        raise ApiError(403, AdminErrorCode.CONFIRM, str(exc), field="confirm") from None
    except ContainerNotWhitelistedError as exc:
        raise ApiError(403, AdminErrorCode.NOT_WHITELISTED, str(exc)) from None
    except WhitelistChangeRefusedError as exc:
        raise ApiError(403, AdminErrorCode.WHITELIST_REFUSED, str(exc)) from None
    except AgentRequestError as exc:
        code = _PASSED.get(exc.code or "")
        if code is None:
            raise
        status = 422 if code is AdminErrorCode.INVALID_REQUEST else code.http_status
        # The deny pattern travels as its own field (hostd -> agent -> here), not only in the prose.
        raise ApiError(status, code, exc.message, field=exc.field, pattern=exc.pattern) from None
