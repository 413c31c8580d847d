"""How the client turns the admin API's refusals into :mod:`mirbad_client.exceptions`, in one place.

The master answers every refusal with mirbad_protocol's :class:`~mirbad_protocol.admin.AdminErrorBody`: a
code of :class:`~mirbad_protocol.admin.AdminErrorCode` and the ids it is about in fields of their own
(``nodeId``, ``modelId``, ``field`` ...). :data:`EXCEPTION_BY_CODE` is the one table from code to
exception class (documented in :mod:`mirbad_client.exceptions`); the ids come from the fields, never
from the message. A code this client does not know (a newer master's) is an
:class:`~mirbad_client.exceptions.AdminApiError` with the status, the code and whatever ids it names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

import httpx
from pydantic import ValidationError

from mirbad_protocol.admin import AdminError, AdminErrorBody, AdminErrorCode

from .exceptions import (
    AdminApiError,
    AdminAuthError,
    AdminConnectionError,
    AdmissionRefusedError,
    InvalidRequestError,
    LaunchSpecRejectedError,
    LogFollowError,
    NodeBadAnswerError,
    NodeExistsError,
    NodeOfflineError,
    NodeRefusedError,
    NodeTimedOutError,
    NoSuchApiKeyError,
    NoSuchModelError,
    NoSuchNodeError,
    ServedNameTakenError,
    StartBlockedError,
    StartRefusedError,
)

# Internal to the admin API's client; not part of the public API.
__all__: list[str] = []

_C = AdminErrorCode
_Builder = Callable[["ErrorAnswer", AdminError], AdminApiError]
EXCEPTION_BY_CODE: Final[Mapping[str, type[AdminApiError]]] = {
    _C.INVALID_REQUEST: InvalidRequestError,
    _C.UNAUTHORIZED: AdminAuthError,
    _C.TOO_MANY_ATTEMPTS: AdminAuthError,
    _C.MODEL_NOT_FOUND: NoSuchModelError,
    _C.NODE_NOT_FOUND: NoSuchNodeError,
    _C.KEY_NOT_FOUND: NoSuchApiKeyError,
    _C.SERVED_NAME_TAKEN: ServedNameTakenError,
    _C.NODE_EXISTS: NodeExistsError,
    _C.NODE_CONFLICT: StartRefusedError,
    _C.ADMISSION_REFUSED: AdmissionRefusedError,
    _C.START_CONFLICT: StartBlockedError,
    _C.START_LANE_BUSY: StartBlockedError,
    _C.SPEC_REJECTED: LaunchSpecRejectedError,
    _C.NODE_REFUSED: NodeRefusedError,
    _C.BAD_GATEWAY: NodeBadAnswerError,
    _C.LOG_STREAM_FAILED: LogFollowError,
    _C.NODE_UNREACHABLE: NodeOfflineError,
    _C.NODE_TIMEOUT: NodeTimedOutError,
}
"""The exception class of each code; the other codes are a plain :class:`AdminApiError`."""


@dataclass(frozen=True)
class ErrorAnswer:
    """One error answer of the admin API, read.

    Attributes:
        status: the HTTP status.
        error: the envelope's inner object; ``None`` for an answer without the envelope.
        message: the envelope's message, or the start of a body that is not an envelope.
        subject: the id the request was about (a model, key or node id), for a 404 naming none.
        retry_after: the ``Retry-After`` header.
    """

    status: int
    error: AdminError | None
    message: str
    subject: str = ""
    retry_after: str | None = None

    @property
    def retry_after_s(self) -> int | None:
        """The seconds to wait: the envelope's ``retryAfterS``, else a ``Retry-After`` in seconds."""
        if self.error is not None and self.error.retry_after_s is not None:
            return self.error.retry_after_s
        header = self.retry_after
        return int(header) if header is not None and header.isdigit() else None


def _common(kind: type[AdminApiError]) -> _Builder:
    def build(refusal: ErrorAnswer, error: AdminError) -> AdminApiError:
        return kind(refusal.status, error.code, error.message, error.field, **_ids(error))

    return build


def _auth(refusal: ErrorAnswer, error: AdminError) -> AdminApiError:
    retry = refusal.retry_after_s
    return AdminAuthError(refusal.status, error.code, error.message, retry, field=error.field, **_ids(error))


def _invalid_request(refusal: ErrorAnswer, error: AdminError) -> AdminApiError:
    # FastAPI's own errors about the whole body name no field.
    field = error.field or "(document)"
    return InvalidRequestError(refusal.status, error.code, error.message, field, **_ids(error))


def _served_name_taken(refusal: ErrorAnswer, error: AdminError) -> AdminApiError:
    # The envelope's model is the one already serving the name.
    name, owner = error.served_name or "", error.model_id or ""
    return ServedNameTakenError(refusal.status, error.code, error.message, name, owner, node_id=error.node_id)


def _no_such_key(refusal: ErrorAnswer, error: AdminError) -> AdminApiError:
    key_id, field = error.key_id or refusal.subject, error.field
    return NoSuchApiKeyError(refusal.status, error.code, error.message, key_id, field=field, **_ids(error))


def _no_such_model(refusal: ErrorAnswer, error: AdminError) -> AdminApiError:
    ids = _ids(error) | {"model_id": error.model_id or refusal.subject}
    return NoSuchModelError(refusal.status, error.code, error.message, error.field, **ids)


def _no_such_node(refusal: ErrorAnswer, error: AdminError) -> AdminApiError:
    ids = _ids(error) | {"node_id": error.node_id or refusal.subject}
    return NoSuchNodeError(refusal.status, error.code, error.message, error.field, **ids)


def _ids(error: AdminError) -> dict[str, str | None]:
    return {"node_id": error.node_id, "model_id": error.model_id}


# The classes whose constructor takes more than the common ids, or falls back to the request's id.
_BUILDERS: Final[Mapping[type[AdminApiError], _Builder]] = {
    AdminAuthError: _auth,
    InvalidRequestError: _invalid_request,
    ServedNameTakenError: _served_name_taken,
    NoSuchApiKeyError: _no_such_key,
    NoSuchModelError: _no_such_model,
    NoSuchNodeError: _no_such_node,
}


def admin_error(refusal: ErrorAnswer) -> AdminApiError:
    """The exception an error answer of the admin API stands for (see :data:`EXCEPTION_BY_CODE`)."""
    error = refusal.error
    if error is None:
        return AdminApiError(refusal.status, None, refusal.message)
    kind = EXCEPTION_BY_CODE.get(error.code, AdminApiError)
    return _BUILDERS.get(kind, _common(kind))(refusal, error)


def read_refusal(answer: httpx.Response, subject: str = "") -> ErrorAnswer:
    """Read an error answer (its body already read) into an :class:`ErrorAnswer`."""
    retry_after = answer.headers.get("retry-after")
    try:
        error = AdminErrorBody.model_validate_json(answer.content).error
    except ValidationError:
        text = answer.text.strip()[:200] or answer.reason_phrase
        message = f"HTTP {answer.status_code}: {text}"
        return ErrorAnswer(answer.status_code, None, message, subject, retry_after)
    return ErrorAnswer(answer.status_code, error, error.message, subject, retry_after)


def connection_error(base_url: str, exc: httpx.HTTPError) -> AdminConnectionError:
    """The exception for an exchange with the master that failed below HTTP."""
    if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
        return AdminConnectionError(base_url, f"the master at {base_url} did not answer in time")
    reason = str(exc) or type(exc).__name__
    return AdminConnectionError(base_url, f"cannot reach the master at {base_url}: {reason}")


def stream_error(data: str) -> LogFollowError:
    """The exception for a followed log the master ended with an ``error`` event.

    The event's data is the refusal envelope (whatever its code, the follow is what failed); a master
    from before the envelope sent the message alone, which is kept as it is.
    """
    try:
        error = AdminErrorBody.model_validate_json(data).error
    except ValidationError:
        return LogFollowError(502, AdminErrorCode.LOG_STREAM_FAILED.value, data)
    return LogFollowError(502, error.code, error.message, error.field, **_ids(error))
