"""How the client turns the admin API's refusals into :mod:`mirbad_client.exceptions`, in one place.

The admin API answers every refusal as ``{"error": {"code", "message"[, "field"]}}`` and picks the
status and code from the exception the master raised (``mirbad_master._api_errors``). This module maps
each code to the client's own exception (the table is in :mod:`mirbad_client.exceptions`); anything
else is an :class:`~mirbad_client.exceptions.AdminApiError` with the status and code.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

import httpx
from pydantic import ValidationError

from mirbad_protocol import AgentErrorBody

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

# The master's messages quote ids with repr(): "node 'gpu-1' ...", "no model with id 'qwen'".
_QUOTED: Final = r"(?P<q>'[^']*'|\"[^\"]*\")"
_NODE: Final = re.compile(r"node " + _QUOTED)
_ID: Final = re.compile(r"with id " + _QUOTED)
_SERVED_NAME_TAKEN: Final = re.compile(
    r"(?P<name>'.*'|\".*\") is already served by model (?P<owner>'.*'|\".*\")$"
)


@dataclass(frozen=True)
class Refusal:
    """One error answer of the admin API, read.

    Attributes:
        status: the HTTP status.
        code: the envelope's code (``None`` without an envelope).
        message: the envelope's message, or the start of the body.
        field: the envelope's field.
        subject: the id the request was about (a model, key or node id), named by a 404.
        retry_after: the ``Retry-After`` header.
    """

    status: int
    code: str | None
    message: str
    field: str | None = None
    subject: str = ""
    retry_after: str | None = None

    @property
    def node_id(self) -> str:
        """The node the message names, or ``""``."""
        return _quoted(_NODE, self.message)

    @property
    def unknown_id(self) -> str:
        """The unknown id a 404 names (``no model with id 'x'``), else the request's subject."""
        return _quoted(_ID, self.message) or self.subject


def _node(kind: type[AdminApiError]) -> Callable[[Refusal], AdminApiError]:
    return lambda r: kind(r.status, r.code, r.message, r.field, node_id=r.node_id)


def _served_name_taken(refusal: Refusal) -> AdminApiError:
    named = _SERVED_NAME_TAKEN.search(refusal.message)
    if named is None:
        return AdminApiError(refusal.status, refusal.code, refusal.message, refusal.field)
    name, owner = _unquote(named.group("name")), _unquote(named.group("owner"))
    return ServedNameTakenError(refusal.status, refusal.code, refusal.message, name, owner)


def _invalid_field(refusal: Refusal) -> AdminApiError:
    field = refusal.field or "(document)"
    return InvalidRequestError(refusal.status, refusal.code, refusal.message, field)


def _auth(refusal: Refusal) -> AdminApiError:
    seconds = refusal.retry_after
    retry = int(seconds) if seconds is not None and seconds.isdigit() else None
    return AdminAuthError(refusal.status, refusal.code, refusal.message, retry)


_BY_CODE: Final[Mapping[str, Callable[[Refusal], AdminApiError]]] = {
    "model_not_found": lambda r: NoSuchModelError(r.status, r.code, r.message, model_id=r.unknown_id),
    "key_not_found": lambda r: NoSuchApiKeyError(r.status, r.code, r.message, r.unknown_id),
    "node_not_found": lambda r: NoSuchNodeError(r.status, r.code, r.message, node_id=r.unknown_id),
    "admission_refused": _node(AdmissionRefusedError),
    "start_conflict": _node(StartBlockedError),
    "start_lane_busy": _node(StartBlockedError),
    "node_conflict": _node(StartRefusedError),
    "served_name_taken": _served_name_taken,
    "node_exists": lambda r: NodeExistsError(r.status, r.code, r.message, node_id=r.node_id or r.subject),
    "spec_rejected": _node(LaunchSpecRejectedError),
    "node_unreachable": _node(NodeOfflineError),
    "node_timeout": _node(NodeTimedOutError),
    "bad_gateway": _node(NodeBadAnswerError),
    "log_stream_failed": _node(LogFollowError),
    "node_refused": _node(NodeRefusedError),
}
_BY_STATUS: Final[Mapping[int, Callable[[Refusal], AdminApiError]]] = {
    400: _invalid_field,
    401: _auth,
    429: _auth,
}


def admin_error(refusal: Refusal) -> AdminApiError:
    """The exception an error answer of the admin API stands for (see the module's table)."""
    by_status = _BY_STATUS.get(refusal.status)
    if by_status is not None:
        return by_status(refusal)
    by_code = _BY_CODE.get(refusal.code or "")
    if by_code is not None:
        return by_code(refusal)
    return AdminApiError(refusal.status, refusal.code, refusal.message, refusal.field)


def read_refusal(answer: httpx.Response, subject: str = "") -> Refusal:
    """Read an error answer (its body already read) into a :class:`Refusal`."""
    retry_after = answer.headers.get("retry-after")
    try:
        error = AgentErrorBody.model_validate_json(answer.content).error
    except ValidationError:
        text = answer.text.strip()[:200] or answer.reason_phrase
        message = f"HTTP {answer.status_code}: {text}"
        return Refusal(answer.status_code, None, message, None, subject, retry_after)
    return Refusal(answer.status_code, error.code, error.message, error.field, subject, retry_after)


def connection_error(base_url: str, exc: httpx.HTTPError) -> AdminConnectionError:
    """The exception for an exchange with the master that failed below HTTP."""
    if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
        return AdminConnectionError(base_url, f"the master at {base_url} did not answer in time")
    reason = str(exc) or type(exc).__name__
    return AdminConnectionError(base_url, f"cannot reach the master at {base_url}: {reason}")


def stream_error(message: str) -> LogFollowError:
    """The exception for a followed log the master ended with an ``error`` event."""
    return LogFollowError(502, "log_stream_failed", message, node_id=_quoted(_NODE, message))


def _quoted(pattern: re.Pattern[str], message: str) -> str:
    named = pattern.search(message)
    return _unquote(named.group("q")) if named else ""


def _unquote(text: str) -> str:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text.strip("'\"")
    return value if isinstance(value, str) else text
