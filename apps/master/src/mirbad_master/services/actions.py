"""Every change of a node's host services, whoever asks (the admin API, the portal), and its audit line.

The checks that stay on the master run in :class:`~mirbad_orchestration.services.HostServiceManager`
(the container whitelist, the typed-name confirmations of protected services, the signed-in principal
of a whitelist change); the node's hostd checks again. A refusal comes out as the admin API's own
:class:`~mirbad_master._api_errors.ApiError` (``confirm``, ``denied`` with the node's deny pattern,
``not_whitelisted``, ``whitelist_refused`` 403; ``service_not_found`` 404; a bad field 422 naming it), so
``/api`` and the portal word the same refusal alike. Each change that went through writes one
``host.*`` audit line; refused ones write none (as before on the API).

No lock of the master's is taken: hostd serialises the changes of a node's units, and the whitelist
file's store serialises its own read-modify-write.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Final

from mirbad_master._composition import MasterServices
from mirbad_master.exceptions import ApiError
from mirbad_orchestration.exceptions import (
    AgentRequestError,
    ContainerNotWhitelistedError,
    HostServiceConfirmError,
    WhitelistChangeRefusedError,
)
from mirbad_orchestration.services import WhitelistedContainer
from mirbad_protocol import MirbadError
from mirbad_protocol.admin import AdminErrorCode
from mirbad_protocol.agent import (
    CONTAINER_ACTIONS,
    ContainerActionResult,
    ContainerService,
    ContainerServiceList,
    container_service_name,
)
from mirbad_protocol.hostd import (
    HOSTD_ACTIONS,
    HostdActionResult,
    ServiceList,
    WhitelistAdd,
    WhitelistEntry,
    WhitelistUpdate,
    service_name,
)

__all__ = [
    "add_container",
    "add_unit",
    "checked_container_name",
    "container_action",
    "container_autostart",
    "containers",
    "refusal_text",
    "remove_container",
    "remove_unit",
    "unit_action",
    "units",
    "update_container",
    "update_unit",
]

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


def refusal_text(exc: MirbadError) -> str:
    """A refusal's message, and the node's deny pattern when it named one the message does not spell.

    hostd names the pattern in its own words too, but the field is what says it; neither the page nor
    the API's message may depend on another process's prose.
    """
    pattern = getattr(exc, "pattern", None)
    return _naming_pattern(str(exc), pattern if isinstance(pattern, str) else None)


def _naming_pattern(text: str, pattern: str | None) -> str:
    return f"{text} (deny pattern {pattern!r})" if pattern and pattern not in text else text


async def units(services: MasterServices, node_id: str, *, include_all: bool = False) -> ServiceList:
    """The node's whitelisted units (with ``include_all`` also discovery and the deny list)."""
    async with _refusals():
        return await services.host_services.units(node_id, include_all=include_all)


async def containers(
    services: MasterServices, node_id: str
) -> tuple[list[WhitelistedContainer], ContainerServiceList]:
    """The node's container whitelist entries and every container it could whitelist."""
    async with _refusals():
        return await services.host_services.containers(node_id)


async def unit_action(
    services: MasterServices, node_id: str, name: str, action: str, actor: str, *, confirm: str | None = None
) -> HostdActionResult:
    """Queue ``action`` (start, stop, restart, enable, disable) on a whitelisted unit; audited.

    Raises:
        ApiError: a bad name (422), an unknown action (404), the manager's or the node's refusal.
    """
    _checked_name(name, service_name)
    if action not in HOSTD_ACTIONS:
        raise ApiError(404, AdminErrorCode.SERVICE_NOT_FOUND, f"no action {action!r}")
    async with _refusals():
        done = await services.host_services.unit_action(node_id, name, action, confirm=confirm)
    await services.audit.record(actor, f"host.unit.{action}", name, node_id=node_id)
    return done


async def add_unit(
    services: MasterServices, node_id: str, request: WhitelistAdd, actor: str
) -> WhitelistEntry:
    """Whitelist a unit on the node's hostd for ``actor`` (a signed-in administrator); audited."""
    async with _refusals():
        entry = await services.host_services.add_unit(node_id, request, principal=actor or None)
    await services.audit.record(actor, "host.whitelist.add", entry.name, node_id=node_id)
    return entry


async def update_unit(
    services: MasterServices, node_id: str, name: str, request: WhitelistUpdate, actor: str
) -> WhitelistEntry:
    """Rename or (un)protect a unit's whitelist entry (unprotecting needs its typed name); audited."""
    async with _refusals():
        entry = await services.host_services.update_unit(node_id, name, request, principal=actor or None)
    await services.audit.record(actor, "host.whitelist.update", name, node_id=node_id)
    return entry


async def remove_unit(services: MasterServices, node_id: str, name: str, actor: str) -> WhitelistEntry:
    """Take a unit off the node's whitelist; audited."""
    async with _refusals():
        entry = await services.host_services.remove_unit(node_id, name, principal=actor or None)
    await services.audit.record(actor, "host.whitelist.remove", name, node_id=node_id)
    return entry


async def add_container(
    services: MasterServices,
    node_id: str,
    name: str,
    actor: str,
    *,
    confirm: str,
    display_name: str = "",
    protected: bool = False,
) -> WhitelistedContainer:
    """Whitelist a container, its name typed in ``confirm``; audited."""
    _checked_name(name, container_service_name)
    async with _refusals():
        entry = await services.host_services.add_container(
            node_id,
            name,
            confirm=confirm,
            principal=actor or None,
            display_name=display_name,
            protected=protected,
        )
    await services.audit.record(actor, "host.containers.add", name, node_id=node_id)
    return entry


async def update_container(
    services: MasterServices,
    node_id: str,
    name: str,
    actor: str,
    *,
    protected: bool | None = None,
    display_name: str | None = None,
    confirm: str | None = None,
) -> WhitelistedContainer:
    """Rename or (un)protect a whitelisted container (unprotecting needs ``confirm``); audited."""
    async with _refusals():
        entry = await services.host_services.update_container(
            node_id,
            name,
            principal=actor or None,
            protected=protected,
            display_name=display_name,
            confirm=confirm,
        )
    await services.audit.record(actor, "host.containers.update", name, node_id=node_id)
    return entry


async def remove_container(
    services: MasterServices, node_id: str, name: str, actor: str
) -> WhitelistedContainer:
    """Take a container off the whitelist (its remembered restart policy goes with it); audited."""
    async with _refusals():
        entry = await services.host_services.remove_container(node_id, name, principal=actor or None)
    await services.audit.record(actor, "host.containers.remove", name, node_id=node_id)
    return entry


async def container_action(
    services: MasterServices, node_id: str, name: str, action: str, actor: str, *, confirm: str | None = None
) -> ContainerActionResult:
    """Start, stop or restart a whitelisted container (a protected one's stop/restart needs ``confirm``)."""
    _checked_name(name, container_service_name)
    if action not in CONTAINER_ACTIONS:
        raise ApiError(404, AdminErrorCode.SERVICE_NOT_FOUND, f"no action {action!r}")
    async with _refusals():
        done = await services.host_services.container_action(node_id, name, action, confirm=confirm)
    await services.audit.record(actor, f"host.container.{action}", name, node_id=node_id)
    return done


async def container_autostart(
    services: MasterServices,
    node_id: str,
    name: str,
    enabled: bool,
    actor: str,
    *,
    confirm: str | None = None,
) -> ContainerService:
    """Turn a whitelisted container's autostart on or off (a protected one's off needs ``confirm``)."""
    _checked_name(name, container_service_name)
    async with _refusals():
        container = await services.host_services.container_autostart(node_id, name, enabled, confirm=confirm)
    await services.audit.record(
        actor, f"host.container.autostart.{'on' if enabled else 'off'}", name, node_id=node_id
    )
    return container


def checked_container_name(name: str) -> str:
    """``name`` if it is a container's name.

    Raises:
        ApiError: 422 ``invalid_request`` naming ``name``.
    """
    _checked_name(name, container_service_name)
    return name


def _checked_name(name: str, check: Callable[[str], object], *, field: str = "name") -> None:
    try:
        check(name)
    except ValueError as exc:
        raise ApiError(422, AdminErrorCode.INVALID_REQUEST, f"{field}: {exc}", field=field) from None


@asynccontextmanager
async def _refusals() -> AsyncIterator[None]:
    # The manager's and the node's refusals as the admin API's codes (a bad field is 422 here, as hostd
    # answers it, not the 400 of the other rooms).
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
        message = _naming_pattern(exc.message, exc.pattern)
        raise ApiError(status, code, message, field=exc.field, pattern=exc.pattern) from None
