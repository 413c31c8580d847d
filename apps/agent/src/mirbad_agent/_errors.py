"""The one place where an exception becomes an agent error response (the contract's codes)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from mirbad_protocol import InvalidFieldError, MirbadError
from mirbad_protocol.agent import AgentErrorCode, agent_error_body
from mirbad_router import RequestTooLargeError
from mirbad_runtime import (
    GgufFormatError,
    ImagePullError,
    LaunchRejectedError,
    ModelNotFoundError,
    RuntimeUnavailableError,
)
from mirbad_runtime.exceptions import (
    DownloadConflictError,
    DownloadNotFoundError,
    DownloadRefusedError,
    GpuProbeError,
    HostContainerNotFoundError,
    ImagePullConflictError,
    ImagePullNotFoundError,
    InsufficientSpaceError,
    MeminfoFormatError,
    MemoryAdmissionError,
    SourceNeedsTokenError,
    SourceNotFoundError,
    SourceUnavailableError,
    StartConflictError,
    StateWriteError,
)

from .exceptions import PathNotFoundError, PathRefusedError, RequestRefusedError

__all__ = ["agent_error_response", "error_code_of", "handle_exception"]

logger = logging.getLogger(__name__)

# Most specific first: the first matching class decides the code.
_CODES: tuple[tuple[type[BaseException], AgentErrorCode], ...] = (
    (PathRefusedError, AgentErrorCode.PATH_REFUSED),
    (PathNotFoundError, AgentErrorCode.PATH_NOT_FOUND),
    (InvalidFieldError, AgentErrorCode.INVALID_REQUEST),
    (DownloadRefusedError, AgentErrorCode.INVALID_REQUEST),
    (DownloadNotFoundError, AgentErrorCode.DOWNLOAD_NOT_FOUND),
    (ImagePullNotFoundError, AgentErrorCode.PULL_NOT_FOUND),
    (ImagePullConflictError, AgentErrorCode.PULL_CONFLICT),
    (HostContainerNotFoundError, AgentErrorCode.SERVICE_NOT_FOUND),
    (SourceNotFoundError, AgentErrorCode.SOURCE_NOT_FOUND),
    (SourceNeedsTokenError, AgentErrorCode.SOURCE_NEEDS_TOKEN),
    (InsufficientSpaceError, AgentErrorCode.INSUFFICIENT_SPACE),
    (DownloadConflictError, AgentErrorCode.DOWNLOAD_CONFLICT),
    (SourceUnavailableError, AgentErrorCode.UPSTREAM_UNREACHABLE),
    (RequestTooLargeError, AgentErrorCode.REQUEST_TOO_LARGE),
    (MemoryAdmissionError, AgentErrorCode.ADMISSION_REFUSED),
    (StartConflictError, AgentErrorCode.START_CONFLICT),
    (ModelNotFoundError, AgentErrorCode.MODEL_NOT_FOUND),
    (LaunchRejectedError, AgentErrorCode.SPEC_REJECTED),
    (ImagePullError, AgentErrorCode.SPEC_REJECTED),
    (GgufFormatError, AgentErrorCode.GGUF_UNREADABLE),
    (RuntimeUnavailableError, AgentErrorCode.RUNTIME_UNAVAILABLE),
    (GpuProbeError, AgentErrorCode.PROBE_FAILED),
    (MeminfoFormatError, AgentErrorCode.PROBE_FAILED),
)
# The exceptions that name the request field at fault.
_FIELDED = (
    RequestRefusedError,
    InvalidFieldError,
    DownloadRefusedError,
    SourceNotFoundError,
    SourceNeedsTokenError,
    InsufficientSpaceError,
    DownloadConflictError,
)
_HTTP_CODES = {404: AgentErrorCode.ROUTE_NOT_FOUND, 405: AgentErrorCode.METHOD_NOT_ALLOWED}


def error_code_of(exc: BaseException) -> AgentErrorCode:
    """The contract's error code for an exception (``internal_error`` for anything unexpected)."""
    if isinstance(exc, RequestRefusedError):
        return exc.code
    if isinstance(exc, HTTPException):
        return _HTTP_CODES.get(exc.status_code, AgentErrorCode.INVALID_REQUEST)
    if isinstance(exc, StateWriteError) and exc.disk_full:
        return AgentErrorCode.INSUFFICIENT_STORAGE  # someone must make room; no fault of the agent's
    return next((code for kind, code in _CODES if isinstance(exc, kind)), AgentErrorCode.INTERNAL_ERROR)


def agent_error_response(
    code: AgentErrorCode,
    message: str,
    *,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
    epoch: int | None = None,
    request_epoch: int | None = None,
) -> JSONResponse:
    """The contract's error envelope for ``code``, with the HTTP status the code carries.

    Args:
        code: why the request is refused.
        message: what went wrong, for the caller.
        field: the body field, query parameter or path at fault, when there is one.
        headers: headers the answer carries (``Retry-After`` of a model that is not running).
        epoch: ``fenced``: the highest master epoch the agent has seen.
        request_epoch: ``fenced``: the epoch the refused command carried.
    """
    body = agent_error_body(code, message, field=field, epoch=epoch, request_epoch=request_epoch)
    return JSONResponse(body, status_code=code.http_status, headers=headers)


async def handle_exception(request: Request, exc: Exception) -> JSONResponse:
    """The error envelope for ``exc``, with the status its code carries (a Starlette exception handler)."""
    code = error_code_of(exc)
    field = exc.field if isinstance(exc, _FIELDED) else None
    headers = exc.headers if isinstance(exc, HTTPException) else None
    if isinstance(exc, HTTPException):
        message = f"{request.method} {request.url.path}: {exc.detail}"
    elif isinstance(exc, RequestRefusedError):
        message = exc.message
    elif code is AgentErrorCode.INTERNAL_ERROR and not isinstance(exc, MirbadError):
        # Internals stay in the agent's log (the server logs the traceback), not in the answer.
        message = "internal error; the agent's log has the details"
    else:
        message = str(exc)
    if code is AgentErrorCode.INTERNAL_ERROR and isinstance(exc, MirbadError):
        logger.warning("%s %s failed: %s", request.method, request.url.path, exc)
    return agent_error_response(code, message, field=field, headers=headers)
