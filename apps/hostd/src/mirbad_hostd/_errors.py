"""The one place where an exception becomes a hostd error response."""

from __future__ import annotations

import logging

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from mirbad_protocol import InvalidFieldError
from mirbad_protocol.hostd import HostdErrorCode, hostd_error_body

from .exceptions import (
    ActionFailedError,
    BackupMountConflictError,
    BackupMountNotConfiguredError,
    ConfirmationRequiredError,
    GpuQueryError,
    HostdError,
    MountBusyError,
    MountProbeError,
    ServiceExistsError,
    ServiceNotFoundError,
    UnitDeniedError,
    UnitUnavailableError,
)

__all__ = ["error_response", "handle_exception"]

logger = logging.getLogger(__name__)

_CODES: tuple[tuple[type[BaseException], HostdErrorCode], ...] = (
    (InvalidFieldError, HostdErrorCode.INVALID_REQUEST),
    (UnitDeniedError, HostdErrorCode.DENIED),
    (ConfirmationRequiredError, HostdErrorCode.CONFIRM),
    (ServiceNotFoundError, HostdErrorCode.NOT_FOUND),
    (ServiceExistsError, HostdErrorCode.EXISTS),
    (UnitUnavailableError, HostdErrorCode.UNIT_UNAVAILABLE),
    (ActionFailedError, HostdErrorCode.ACTION_FAILED),
    (GpuQueryError, HostdErrorCode.GPU_UNAVAILABLE),
    (BackupMountConflictError, HostdErrorCode.MOUNT_CONFLICT),
    (MountProbeError, HostdErrorCode.MOUNT_FAILED),
    (MountBusyError, HostdErrorCode.MOUNT_BUSY),
    (BackupMountNotConfiguredError, HostdErrorCode.NOT_FOUND),
)
_HTTP_CODES = {404: HostdErrorCode.NOT_FOUND, 405: HostdErrorCode.METHOD_NOT_ALLOWED}


def error_response(
    code: HostdErrorCode, message: str, *, field: str | None = None, pattern: str | None = None
) -> JSONResponse:
    """The error envelope for ``code`` with the status the code carries."""
    body = hostd_error_body(code, message, field=field, pattern=pattern)
    return JSONResponse(body, status_code=code.http_status)


async def handle_exception(request: Request, exc: Exception) -> JSONResponse:
    """A Starlette exception handler: the envelope for ``exc``."""
    if isinstance(exc, HTTPException):
        code = _HTTP_CODES.get(exc.status_code, HostdErrorCode.INVALID_REQUEST)
        return error_response(code, f"{request.method} {request.url.path}: {exc.detail}")
    code = next((c for kind, c in _CODES if isinstance(exc, kind)), HostdErrorCode.INTERNAL_ERROR)
    if code is HostdErrorCode.INTERNAL_ERROR:
        logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        message = "internal error; hostd's journal has the details"
        if isinstance(exc, HostdError):
            message = str(exc)
        return error_response(code, message)
    field = exc.field if isinstance(exc, InvalidFieldError) else None
    pattern = exc.pattern if isinstance(exc, UnitDeniedError) else None
    return error_response(code, str(exc), field=field, pattern=pattern)
