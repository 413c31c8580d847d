"""The admin API's error mapping, in one place: every exception to one status, code and message.

Every refusal of ``/api`` is mirbad_protocol's :class:`AdminErrorBody`, ``{"error": {"code", "message",
...}}`` with a code of :class:`AdminErrorCode` and the subjects the exception names (``field``,
``nodeId``, ``modelId``, ``keyId`` ...), so a client never reads ids out of the message: 400 names the
invalid field (wire spelling), 404 an unknown id, 409 a conflict (memory admission, another start, a
taken id or served name), 422 a launch the node cannot run, a node's own trouble 503 (unreachable) or
504 (timed out), and 507 a store file that cannot be written for a full disk. The status is the
code's (:attr:`AdminErrorCode.http_status`). The table is searched in order, so subclasses come first.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BeforeValidator
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response

from mirbad_orchestration import (
    AgentAdmissionRefusedError,
    AgentFencedError,
    AgentLaunchRejectedError,
    AgentProtocolError,
    AgentRequestError,
    AgentStartConflictError,
    DuplicateNodeError,
    DuplicateServedNameError,
    EnrollmentError,
    JobConflictError,
    LogStreamError,
    ModelNotReadyError,
    NodeConflictError,
    NodeFeatureMissingError,
    NodeTimeoutError,
    NodeUnreachableError,
    NoJobRunningError,
    NoTuningRunError,
    PresetNotForModelError,
    RegistryError,
    StartLaneBusyError,
    StoreFileError,
    UnknownApiKeyError,
    UnknownModelError,
    UnknownNodeError,
    UnknownPresetError,
    UnknownTuningStepError,
)
from mirbad_orchestration.exceptions import (
    AuditQueryError,
    BackupFormatError,
    BackupNotEncryptedError,
    BackupPassphraseError,
    BackupPassphraseTooShortError,
    BackupRunError,
    NoRestoreJobError,
    RestoreRunningError,
)
from mirbad_protocol import InvalidFieldError, MirbadError, WireModel
from mirbad_protocol.admin import AdminError, AdminErrorBody, AdminErrorCode, admin_error_body

from .exceptions import (
    ApiError,
    LocalNodeError,
    ModelExistsError,
    NodeHasModelsError,
    NotSignedInError,
    TooManyAttemptsError,
    UnknownGpuError,
)

__all__ = [
    "Refusal",
    "error_body",
    "error_response",
    "install_error_handlers",
    "refusal_of",
    "refusal_response",
    "refusals",
    "user_input",
]

_logger = logging.getLogger("mirbad_master.api")


_C = AdminErrorCode
# (exception class, code), first match wins.
_TABLE: Final[Sequence[tuple[type[Exception], AdminErrorCode]]] = (
    (TooManyAttemptsError, _C.TOO_MANY_ATTEMPTS),
    (NotSignedInError, _C.UNAUTHORIZED),
    (ModelExistsError, _C.MODEL_EXISTS),
    (UnknownGpuError, _C.UNKNOWN_GPU),
    (LocalNodeError, _C.LOCAL_NODE),
    (NodeHasModelsError, _C.NODE_HAS_MODELS),
    (DuplicateServedNameError, _C.SERVED_NAME_TAKEN),
    (UnknownPresetError, _C.UNKNOWN_PRESET),
    (UnknownTuningStepError, _C.UNKNOWN_TUNING_STEP),
    (PresetNotForModelError, _C.PRESET_NOT_FOR_MODEL),
    (BackupPassphraseTooShortError, _C.PASSPHRASE_TOO_SHORT),
    (BackupFormatError, _C.INVALID_BACKUP),
    (BackupPassphraseError, _C.INVALID_BACKUP),
    (BackupNotEncryptedError, _C.INVALID_BACKUP),
    (AuditQueryError, _C.INVALID_AUDIT_QUERY),
    (InvalidFieldError, _C.INVALID_REQUEST),
    (BackupRunError, _C.BACKUP_FAILED),
    (RestoreRunningError, _C.JOB_CONFLICT),
    (NoRestoreJobError, _C.JOB_NOT_FOUND),
    (JobConflictError, _C.JOB_CONFLICT),
    (NodeFeatureMissingError, _C.FEATURE_MISSING),
    (ModelNotReadyError, _C.MODEL_NOT_READY),
    (NoJobRunningError, _C.JOB_NOT_FOUND),
    (NoTuningRunError, _C.JOB_NOT_FOUND),
    (UnknownModelError, _C.MODEL_NOT_FOUND),
    (UnknownNodeError, _C.NODE_NOT_FOUND),
    (UnknownApiKeyError, _C.KEY_NOT_FOUND),
    (AgentAdmissionRefusedError, _C.ADMISSION_REFUSED),
    (AgentStartConflictError, _C.START_CONFLICT),
    (AgentFencedError, _C.FENCED),
    (NodeConflictError, _C.NODE_CONFLICT),
    (DuplicateNodeError, _C.NODE_EXISTS),
    (StartLaneBusyError, _C.START_LANE_BUSY),
    (AgentLaunchRejectedError, _C.SPEC_REJECTED),
    (NodeUnreachableError, _C.NODE_UNREACHABLE),
    (NodeTimeoutError, _C.NODE_TIMEOUT),
    (AgentProtocolError, _C.BAD_GATEWAY),
    (LogStreamError, _C.LOG_STREAM_FAILED),
    (AgentRequestError, _C.NODE_REFUSED),
    (StoreFileError, _C.STORAGE_ERROR),
    (EnrollmentError, _C.STORAGE_ERROR),
    (RegistryError, _C.STORAGE_ERROR),
)
_HTTP_CODES: Final = {404: _C.ROUTE_NOT_FOUND, 405: _C.METHOD_NOT_ALLOWED, 413: _C.REQUEST_TOO_LARGE}
# The agent's download refusals keep their code (and field) at the admin API instead of node_refused.
_AGENT_CODES: Final = {
    code.value: code
    for code in (
        _C.DOWNLOAD_NOT_FOUND,
        _C.SOURCE_NOT_FOUND,
        _C.SOURCE_NEEDS_TOKEN,
        _C.DOWNLOAD_CONFLICT,
        _C.INSUFFICIENT_SPACE,
        _C.INVALID_REQUEST,
        _C.INVALID_IMAGE_REFERENCE,
        _C.PULL_NOT_FOUND,
        _C.PULL_CONFLICT,
        _C.INSUFFICIENT_STORAGE,  # the node's disk is full (its own state file); a stop is done all the same
    )
}
# How the agent refuses a launch whose model path leads to nothing (mirbad_runtime's
# ModelPathRejectedError): the model's files are missing, a conflict to fix by downloading them, not a
# spec the node can never run.
_MISSING_MODEL_PATH: Final = re.compile(r"model path '(?P<path>[^']*)' refused: no such file under")
# The attributes the libraries' exceptions name their subjects with, as the envelope's fields.
_SUBJECTS: Final = ("node_id", "model_id", "key_id", "job_id", "pattern")


# What each refusal status means, for the OpenAPI document (the codes are the table's above).
_STATUS_DESCRIPTIONS: Final = {
    400: "`invalid_request`: a field is invalid or unknown; `field` names it (wire spelling)",
    403: "`source_needs_token`: the repository is private or gated; start again with a `token`",
    401: "`unauthorized`: no or a wrong administrator password or session",
    413: "`request_too_large`: the body is over `max_api_body_bytes` (30,000,000 bytes by default)",
    404: "`model_not_found`, `node_not_found`, `key_not_found`, `job_not_found` (also: no restore job), "
    "`download_not_found`, `source_not_found` (`field` names it), `backup_not_found` (or `route_not_found`)",
    409: "a conflict: `model_exists`, `served_name_taken`, `admission_refused` (retry with force=true), "
    "`start_conflict`, `start_lane_busy`, `node_exists`, `node_conflict`, `local_node`, "
    "`fenced` (the node follows a master at a newer epoch), "
    "`job_conflict` (a job runs on the node, or holds the model: `jobId`; or a restore runs), "
    "`model_not_ready` (its state), "
    "`feature_missing` (the node lacks the download feature: `nodeId`, `field`), `download_conflict`, "
    "`insufficient_space`, `model_files_missing` (the model's files are not on its node), "
    "`backup_failed` (the backup could not be written: no backup directory set, the directory missing, "
    "a full disk; the message says why)",
    422: "`spec_rejected`: the node cannot run this launch at all; `unknown_gpu`: a placement names a GPU "
    "its node does not report (`field` is `placement.gpuUuids`, `nodeId` the node); "
    "`unknown_preset`: the message lists the presets; `preset_not_for_model`: a reranker, or a preset "
    "for the other kind of model; "
    "`passphrase_too_short`: a backup passphrase under 12 characters (`field` is `passphrase`); "
    "`invalid_backup`: not a backup this master restores, over 64 MiB, or a passphrase that does not open "
    "it (`field` names what); `mount_failed`, `mount_busy`: the backup share did not mount, or is in use; "
    "`invalid_audit_query`: an audit filter's time that does not parse, a limit out of range or a "
    "cursor the log did not give out (`field` names it)",
    429: "`too_many_attempts`: too many wrong passwords from this address, or its checks queued too "
    "long; see `Retry-After`",
    502: "`node_refused`, `bad_gateway`, `log_stream_failed`: the node answered oddly",
    503: "`node_unreachable`: the model's node does not answer",
    504: "`node_timeout`: the model's node did not answer in time",
    507: "`insufficient_storage`: a file of the master, or a node's own state file, cannot be written: "
    "its disk is full (the message names the file; a stop is done all the same)",
}


_STATUS_HEADERS: Final = {
    401: {
        "WWW-Authenticate": {"description": 'always `Bearer realm="mirbad"`', "schema": {"type": "string"}}
    },
    429: {
        "Retry-After": {"description": "seconds until a try is counted again", "schema": {"type": "integer"}}
    },
}


def refusals(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for these refusal statuses, each in the error envelope."""
    return {
        s: {"model": AdminErrorBody, "description": _STATUS_DESCRIPTIONS[s]}
        | ({"headers": _STATUS_HEADERS[s]} if s in _STATUS_HEADERS else {})
        for s in statuses
    }


def user_input(model: type[WireModel]) -> BeforeValidator:
    """``Annotated`` metadata for a route's body: validate it with :meth:`WireModel.from_user_input`.

    ``Annotated[ModelDefinition, user_input(ModelDefinition)]`` keeps the model's schema in OpenAPI
    while an unknown field, or a value beyond a user-input limit, is a 400 naming the field.
    """
    return BeforeValidator(model.from_user_input)


def error_response(
    status: int,
    code: AdminErrorCode,
    message: str,
    *,
    field: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """An error in the admin API's envelope (no subject but ``field``; see :func:`error_body`)."""
    return JSONResponse(admin_error_body(code, message, field=field), status_code=status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    """Answer every Mirbad exception, validation error and HTTP error of ``app`` in the envelope."""
    app.add_exception_handler(MirbadError, _mirbad_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)


class Refusal(NamedTuple):
    """How the admin API answers an exception: the status and the envelope's code, message and field."""

    status: int
    code: str
    message: str
    field: str | None


def refusal_of(exc: Exception) -> Refusal:
    """The status and envelope ``/api`` answers ``exc`` with (500 ``internal_error`` for the unexpected)."""
    if isinstance(exc, ApiError):
        return Refusal(exc.status, exc.code, str(exc), exc.field)
    code = next((c for kind, c in _TABLE if isinstance(exc, kind)), AdminErrorCode.INTERNAL_ERROR)
    if isinstance(exc, AgentLaunchRejectedError):
        missing = _MISSING_MODEL_PATH.search(exc.message)
        if missing is not None:
            message = (
                f"node {exc.node_id!r} has no {missing['path']!r} under its model roots: download it first"
            )
            return Refusal(409, AdminErrorCode.MODEL_FILES_MISSING, message, "modelPath")
    if type(exc) is AgentRequestError and exc.code in _AGENT_CODES:
        passed = _AGENT_CODES[exc.code]
        return Refusal(passed.http_status, passed, _message(exc), exc.field)
    if isinstance(exc, StoreFileError | RegistryError) and exc.disk_full:
        # Not the server's bug: someone has to make room; the message names the file.
        code = AdminErrorCode.INSUFFICIENT_STORAGE
    field = exc.field if isinstance(exc, InvalidFieldError | NodeFeatureMissingError) else None
    if isinstance(exc, BackupPassphraseError | BackupNotEncryptedError):
        field = "passphrase"  # what to change: the backup itself is readable
    return Refusal(code.http_status, code, _message(exc), field)


def error_body(exc: Exception) -> dict[str, Any]:
    """The JSON body ``/api`` answers ``exc`` with, subjects included (also a followed log's ``error``)."""
    refusal = refusal_of(exc)
    subjects = {"field": refusal.field} | _subjects_of(exc)
    error = AdminError.model_validate({"code": refusal.code, "message": refusal.message, **subjects})
    return AdminErrorBody(error=error).to_wire()


def refusal_response(exc: Exception, *, headers: dict[str, str] | None = None) -> JSONResponse:
    """The whole answer ``/api`` gives ``exc``: its status, envelope and the headers the status documents.

    Args:
        exc: the refusal.
        headers: more headers to send with it.
    """
    refusal = refusal_of(exc)
    sent = dict(headers or {})
    if isinstance(exc, TooManyAttemptsError):
        sent["Retry-After"] = str(exc.retry_after_s)
    if refusal.status == 401:
        sent["WWW-Authenticate"] = 'Bearer realm="mirbad"'
    return JSONResponse(error_body(exc), status_code=refusal.status, headers=sent or None)


async def _mirbad_error(request: Request, exc: Exception) -> Response:
    answer = refusal_response(exc)
    if answer.status_code >= 500:
        _logger.warning("%s %s failed: %s", request.method, request.url.path, exc)
    return answer


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    field, reason = _field_of(exc.errors()[0]) if exc.errors() else ("(document)", "invalid request")
    return error_response(400, AdminErrorCode.INVALID_REQUEST, f"{field}: {reason}", field=field)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, AdminErrorCode.HTTP_ERROR)
    return error_response(exc.status_code, code, str(exc.detail), headers=dict(exc.headers or {}))


def _subjects_of(exc: Exception) -> dict[str, Any]:
    """The envelope's subject fields (snake_case) that ``exc`` names."""
    named = {name: getattr(exc, name, None) for name in _SUBJECTS}
    subjects: dict[str, Any] = {name: value for name, value in named.items() if isinstance(value, str)}
    if isinstance(exc, DuplicateServedNameError):
        # The model already serving the name is the one the conflict is about.
        subjects |= {"served_name": exc.served_name, "model_id": exc.owner_id}
    if isinstance(exc, TooManyAttemptsError):
        subjects["retry_after_s"] = exc.retry_after_s
    return {name: value for name, value in subjects.items() if value is not None}


def _message(exc: Exception) -> str:
    if isinstance(exc, ModelExistsError):
        return exc.reason  # the field is in the envelope; the message has always been the reason alone
    if isinstance(exc, InvalidFieldError):
        return str(exc)
    return str(exc) or type(exc).__name__


def _field_of(error: Any) -> tuple[str, str]:
    """The wire field and reason of FastAPI's first validation error (its location minus ``body``)."""
    inner = (error.get("ctx") or {}).get("error")
    if isinstance(inner, InvalidFieldError):
        # A body validated as user input (``user_input``) names its field itself, at any depth.
        return inner.field, inner.reason
    location = [str(part) for part in error.get("loc", ())]
    if location and location[0] in ("body", "query", "path", "header", "cookie"):
        location = location[1:]
    message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    if error.get("type") == "json_invalid":
        return "(document)", "not valid JSON"
    if not location:
        # A whole-model check names its field as the message's first word ("image: ...").
        named = re.fullmatch(r"([A-Za-z][\w.]*): (.+)", message, re.DOTALL)
        return (named.group(1), named.group(2)) if named else ("(document)", message)
    return ".".join(location), message[:1].lower() + message[1:]
