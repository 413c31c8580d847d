"""hostd's HTTP API (served on its unix socket only; docs/hostd.md has the routes)."""

from __future__ import annotations

from typing import Final, cast

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mirbad_protocol import InvalidFieldError, MirbadError
from mirbad_protocol.hostd import (
    HOSTD_ACTIONS,
    BackupShare,
    HostdAction,
    HostdErrorCode,
    WhitelistAdd,
    WhitelistUpdate,
)

from ._backup_mount import BackupMount
from ._errors import error_response, handle_exception
from ._services import HostServices

__all__ = ["MAX_BODY_BYTES", "create_app"]

MAX_BODY_BYTES: Final = 64 * 1024
"""The largest request body hostd reads; every real one is a few hundred bytes."""


def create_app(services: HostServices, backup_mount: BackupMount | None = None) -> Starlette:
    """The Starlette app of hostd over ``services``, with the backup share's routes when given one."""

    async def list_services(request: Request) -> Response:
        include = request.query_params.get("include")
        if include not in (None, "all"):
            raise InvalidFieldError("include", "must be `all` or absent")
        listing = await services.services(include_all=include == "all")
        return JSONResponse(listing.to_wire())

    async def act(request: Request) -> Response:
        action = request.path_params["action"]
        if action not in HOSTD_ACTIONS:
            return error_response(
                HostdErrorCode.NOT_FOUND, f"no action {action!r}; one of {list(HOSTD_ACTIONS)}"
            )
        name = request.path_params["name"]
        result = await services.act(name, cast(HostdAction, action), request.query_params.get("confirm"))
        return JSONResponse(result.to_wire(), status_code=202)

    async def add(request: Request) -> Response:
        body = WhitelistAdd.from_user_json(await _body(request))
        entry = await services.add(body)
        return JSONResponse(entry.to_wire(), status_code=201)

    async def update(request: Request) -> Response:
        body = WhitelistUpdate.from_user_json(await _body(request))
        entry = await services.update(request.path_params["name"], body)
        return JSONResponse(entry.to_wire())

    async def remove(request: Request) -> Response:
        entry = await services.remove(request.path_params["name"])
        return JSONResponse(entry.to_wire())

    async def gpu_processes(request: Request) -> Response:
        processes = await services.gpu_processes()
        return JSONResponse([process.to_wire() for process in processes])

    async def mount_status(request: Request) -> Response:
        assert backup_mount is not None
        return JSONResponse((await backup_mount.status()).to_wire())

    async def mount_apply(request: Request) -> Response:
        assert backup_mount is not None
        share = BackupShare.from_user_json(await _body(request))
        return JSONResponse((await backup_mount.apply(share)).to_wire())

    async def mount_test(request: Request) -> Response:
        assert backup_mount is not None
        share = BackupShare.from_user_json(await _body(request))
        return JSONResponse((await backup_mount.test(share)).to_wire())

    async def mount_remove(request: Request) -> Response:
        assert backup_mount is not None
        return JSONResponse((await backup_mount.remove()).to_wire())

    routes = [
        Route("/services", list_services, methods=["GET"]),
        # {name:path}: a name holding a slash reaches the name check (422 naming it), not a 404.
        Route("/services/{name:path}/{action}", act, methods=["POST"]),
        Route("/whitelist", add, methods=["POST"]),
        Route("/whitelist/{name:path}", update, methods=["PATCH"]),
        Route("/whitelist/{name:path}", remove, methods=["DELETE"]),
        Route("/gpu-processes", gpu_processes, methods=["GET"]),
    ]
    if backup_mount is not None:
        routes += [
            Route("/backup-mount", mount_status, methods=["GET"]),
            Route("/backup-mount", mount_apply, methods=["PUT"]),
            Route("/backup-mount", mount_remove, methods=["DELETE"]),
            Route("/backup-mount/test", mount_test, methods=["POST"]),
        ]
    # MirbadError by name: Starlette handles it in its exception middleware (no traceback logged);
    # only a bare Exception reaches the server-error handler.
    handlers = {HTTPException: handle_exception, MirbadError: handle_exception, Exception: handle_exception}
    return Starlette(routes=routes, exception_handlers=handlers)


async def _body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise InvalidFieldError("(document)", f"a body of at most {MAX_BODY_BYTES} bytes")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise InvalidFieldError("(document)", f"a body of at most {MAX_BODY_BYTES} bytes")
    return body
