"""The agent's ``/host/...`` routes: host services passed through to the node's hostd.

The master never reaches hostd itself: hostd answers only on a unix socket of this machine, so the
agent carries each call over, with the runtime's :class:`~mirbad_runtime.HostdClient`. hostd's
refusals (``denied``, ``confirm``, ``not_found``, ``invalid_request`` ...) come back with hostd's own
status and envelope, the deny pattern included, so the master shows what hostd said. A node without
hostd (no socket, a silent or off-contract daemon) answers 503 ``hostd_unavailable``, and reports the
``host.services`` feature flag only while hostd answers, and ``host.backup-mount`` while hostd also
offers the backup share's routes (an older hostd answers them 404).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final, cast

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mirbad_protocol import InvalidFieldError, WireModel
from mirbad_protocol.agent import (
    CONTAINER_ACTIONS,
    ROUTE_HOST_CONTAINER_ACTION,
    ROUTE_HOST_CONTAINER_RESTART_POLICY,
    ROUTE_HOST_CONTAINERS,
    AgentErrorCode,
    ContainerAction,
    RestartPolicy,
    container_service_name,
)
from mirbad_protocol.hostd import (
    HOSTD_ACTIONS,
    ROUTE_HOST_BACKUP_MOUNT,
    ROUTE_HOST_BACKUP_MOUNT_TEST,
    ROUTE_HOST_GPU_PROCESSES,
    ROUTE_HOST_SERVICE_ACTION,
    ROUTE_HOST_SERVICES,
    ROUTE_HOST_WHITELIST,
    ROUTE_HOST_WHITELIST_ENTRY,
    BackupShare,
    GpuProcess,
    HostdAction,
    HostdErrorBody,
    HostdErrorCode,
    HostdErrorDetail,
    WhitelistAdd,
    WhitelistUpdate,
    hostd_error_body,
)
from mirbad_runtime import ContainerServices, HostdClient
from mirbad_runtime.exceptions import HostdRefusedError, HostdUnavailableError

from ._errors import agent_error_response
from ._http import read_wire, wire_response
from .exceptions import RequestRefusedError

__all__ = ["HostServicesGateway", "container_service_routes", "host_service_routes"]

logger = logging.getLogger(__name__)

_Call = Callable[[HostdClient], Awaitable[WireModel | list[WireModel]]]

_PROBE_INTERVAL_S: Final = 60.0  # how often the lifespan re-asks an absent hostd (it may be installed later)


class HostServicesGateway:
    """The agent's side of hostd: a client on its socket and whether hostd answered last time.

    Args:
        socket_path: hostd's socket (``hostd_socket`` in the agent's settings).
        client: another client (tests); ``socket_path`` is then unused.
    """

    def __init__(self, socket_path: Path, *, client: HostdClient | None = None) -> None:
        self.socket_path = socket_path
        self.client = client or HostdClient(socket_path)
        self.available = False
        self.backup_mount = False

    async def aclose(self) -> None:
        """Close the client's connection pool."""
        await self.client.aclose()

    async def probe(self) -> bool:
        """Ask hostd for its services once; a refusal counts as an answer. Returns :attr:`available`.

        When hostd answers, its backup share's status is asked too: :attr:`backup_mount` says whether
        hostd offers those routes.
        """
        try:
            await self.client.services()
        except HostdRefusedError:
            self.record(True)
        except HostdUnavailableError as exc:
            self.record(False, str(exc))
        else:
            self.record(True)
        self.backup_mount = self.available and await self._offers_backup_mount()
        return self.available

    async def _offers_backup_mount(self) -> bool:
        try:
            await self.client.backup_mount()
        except HostdRefusedError as exc:
            return exc.status != 404  # a hostd without the share's routes
        except HostdUnavailableError:
            return False
        return True

    async def run(self) -> None:
        """Probe now and then every minute, so the feature flag follows hostd (cancelled with the app)."""
        while True:
            await self.probe()
            await anyio.sleep(_PROBE_INTERVAL_S)

    async def gpu_processes(self, *, timeout_s: float = 3.0) -> list[GpuProcess]:
        """Hostd's GPU processes within ``timeout_s`` (telemetry's bound).

        Raises:
            HostdUnavailableError: hostd is missing or silent.
            HostdRefusedError: hostd answered 503 (nvidia-smi failed) or another refusal.
        """
        return await self.client.gpu_processes(timeout_s=timeout_s)

    def record(self, available: bool, reason: str = "") -> None:
        """Note whether hostd answered (a refusal is an answer); a change is one log line."""
        if available != self.available:
            if available:
                logger.info("hostd answers on %s: host services are offered", self.socket_path)
            else:
                logger.info("hostd is not available (%s): no host services", reason)
        self.available = available


def host_service_routes(gateway: HostServicesGateway | None) -> list[Route]:
    """The routes under ``/agent/v1/host`` (503 ``hostd_unavailable`` on a node without hostd).

    Args:
        gateway: hostd's gateway; None when the agent is set up without one (``hostd_socket`` null).
    """

    async def list_services(request: Request) -> Response:
        include = request.query_params.get("include")
        if include not in (None, "all"):
            return _invalid("include", "must be `all` or absent")
        return await _passed(gateway, lambda c: c.services(include_all=include == "all"))

    async def act(request: Request) -> Response:
        action = request.path_params["action"]
        if action not in HOSTD_ACTIONS:
            body = hostd_error_body(
                HostdErrorCode.NOT_FOUND, f"no action {action!r}; one of {list(HOSTD_ACTIONS)}"
            )
            return JSONResponse(body, status_code=HostdErrorCode.NOT_FOUND.http_status)
        name = request.path_params["name"]
        confirm = request.query_params.get("confirm")
        return await _passed(
            gateway, lambda c: c.act(name, cast(HostdAction, action), confirm=confirm), status_code=202
        )

    async def add(request: Request) -> Response:
        body = await read_wire(request, WhitelistAdd)
        return await _passed(gateway, lambda c: c.add_to_whitelist(body), status_code=201)

    async def update(request: Request) -> Response:
        body = await read_wire(request, WhitelistUpdate)
        name = request.path_params["name"]
        return await _passed(gateway, lambda c: c.update_whitelist(name, body))

    async def remove(request: Request) -> Response:
        name = request.path_params["name"]
        return await _passed(gateway, lambda c: c.remove_from_whitelist(name))

    async def gpu_processes(request: Request) -> Response:
        async def listed(client: HostdClient) -> list[WireModel]:
            return list(await client.gpu_processes())

        return await _passed(gateway, listed)

    async def mount_status(request: Request) -> Response:
        return await _passed(gateway, lambda c: c.backup_mount())

    async def mount_apply(request: Request) -> Response:
        share = await _share(request)
        if isinstance(share, Response):
            return share
        return await _passed(gateway, lambda c: c.apply_backup_mount(share))

    async def mount_test(request: Request) -> Response:
        share = await _share(request)
        if isinstance(share, Response):
            return share
        return await _passed(gateway, lambda c: c.test_backup_mount(share))

    async def mount_remove(request: Request) -> Response:
        return await _passed(gateway, lambda c: c.remove_backup_mount())

    return [
        Route(ROUTE_HOST_BACKUP_MOUNT, mount_status, methods=["GET"]),
        Route(ROUTE_HOST_BACKUP_MOUNT, mount_apply, methods=["PUT"]),
        Route(ROUTE_HOST_BACKUP_MOUNT, mount_remove, methods=["DELETE"]),
        Route(ROUTE_HOST_BACKUP_MOUNT_TEST, mount_test, methods=["POST"]),
        Route(ROUTE_HOST_SERVICES, list_services, methods=["GET"]),
        Route(ROUTE_HOST_SERVICE_ACTION, act, methods=["POST"]),
        Route(ROUTE_HOST_WHITELIST, add, methods=["POST"]),
        Route(ROUTE_HOST_WHITELIST_ENTRY, update, methods=["PATCH"]),
        Route(ROUTE_HOST_WHITELIST_ENTRY, remove, methods=["DELETE"]),
        Route(ROUTE_HOST_GPU_PROCESSES, gpu_processes, methods=["GET"]),
    ]


async def _passed(gateway: HostServicesGateway | None, call: _Call, *, status_code: int = 200) -> Response:
    if gateway is None:
        return _unavailable("this agent is set up without hostd (hostd_socket is null)")
    try:
        result = await call(gateway.client)
    except HostdRefusedError as exc:
        gateway.record(True)
        return _refusal(exc)
    except HostdUnavailableError as exc:
        gateway.record(False, str(exc))
        return _unavailable(str(exc))
    gateway.record(True)
    if isinstance(result, list):
        return JSONResponse([item.to_wire() for item in result], status_code=status_code)
    return wire_response(result, status_code=status_code)


async def _share(request: Request) -> BackupShare | Response:
    # A bad field is hostd's 422 naming it, as hostd itself answers it (the messages never repeat a value).
    try:
        return await read_wire(request, BackupShare)
    except InvalidFieldError as exc:
        return _invalid(exc.field, exc.reason)


def _refusal(exc: HostdRefusedError) -> JSONResponse:
    # hostd's own envelope and status: the master reads `denied` with its pattern, `confirm`, `not_found`.
    error = HostdErrorDetail(code=exc.code, message=exc.message, field=exc.field, pattern=exc.pattern)
    return JSONResponse(HostdErrorBody(error=error).to_wire(), status_code=exc.status)


def _unavailable(reason: str) -> JSONResponse:
    return agent_error_response(AgentErrorCode.HOSTD_UNAVAILABLE, f"no host services on this node: {reason}")


def _invalid(field: str, message: str) -> JSONResponse:
    body = hostd_error_body(HostdErrorCode.INVALID_REQUEST, f"{field}: {message}", field=field)
    return JSONResponse(body, status_code=HostdErrorCode.INVALID_REQUEST.http_status)


def container_service_routes(containers: ContainerServices | None) -> list[Route]:
    """The routes under ``/agent/v1/host/containers``: Docker containers as host services.

    Which containers may be touched is the master's whitelist; the agent refuses only Mirbad's own
    kinds (404 ``service_not_found``). A node without Docker answers 404 ``route_not_found``.

    Args:
        containers: the node's containers; None on a node whose agent composes no Docker.
    """

    def docker() -> ContainerServices:
        if containers is None:
            raise RequestRefusedError(AgentErrorCode.ROUTE_NOT_FOUND, "this node offers no Docker containers")
        return containers

    async def list_containers(request: Request) -> Response:
        return wire_response(await docker().containers())

    async def act(request: Request) -> Response:
        action = request.path_params["action"]
        if action not in CONTAINER_ACTIONS:
            raise RequestRefusedError(
                AgentErrorCode.ROUTE_NOT_FOUND, f"no action {action!r}; one of {list(CONTAINER_ACTIONS)}"
            )
        result = await docker().act(_name(request), cast(ContainerAction, action))
        return wire_response(result, status_code=202)

    async def set_policy(request: Request) -> Response:
        policy = await read_wire(request, RestartPolicy)
        return wire_response(await docker().set_restart_policy(_name(request), policy))

    return [
        Route(ROUTE_HOST_CONTAINERS, list_containers, methods=["GET"]),
        # Before the action route: "restart-policy" is not an action.
        Route(ROUTE_HOST_CONTAINER_RESTART_POLICY, set_policy, methods=["PUT"]),
        Route(ROUTE_HOST_CONTAINER_ACTION, act, methods=["POST"]),
    ]


def _name(request: Request) -> str:
    name = str(request.path_params["name"])
    try:
        return container_service_name(name)
    except ValueError as exc:
        raise InvalidFieldError("name", str(exc)) from None
