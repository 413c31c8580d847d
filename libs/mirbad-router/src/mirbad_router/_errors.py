"""Every error the router answers, in the OpenAI error shape, so OpenAI clients raise their usual errors.

The router's HTTP mapping lives here: one function per refusal, each with its status, ``code`` and
``type``, and ``Retry-After`` where waiting helps.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit

from starlette.responses import JSONResponse

from mirbad_protocol import ModelState
from mirbad_protocol.openai import openai_error

from ._limits import LimitExceeded
from .exceptions import UnsafeProxyPathError, UpstreamConnectError, UpstreamError, UpstreamTimeoutError

__all__ = ["NOT_READY_RETRY_AFTER_S"]

NOT_READY_RETRY_AFTER_S = 30
"""The ``Retry-After`` of a 503 for a model that is known but not Ready."""

# Messages pass on text from the fleet (a node's error, a refused start); a URL in one would tell a /v1
# client where the agents and model servers listen.
# A URL ends before the punctuation that follows it in a sentence.
_URL: Final = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"<>]*[^\s'\"<>.,:;)]", re.IGNORECASE)
_HIDDEN_ADDRESS: Final = "<internal address>"
# Where OpenAI-compatible servers, FastAPI and the agent put the words of an error.
_MESSAGE_FIELDS: Final = ("message", "error", "detail")


def hide_addresses(text: str) -> str:
    """``text`` with every URL in it replaced by ``<internal address>``."""
    return _URL.sub(_HIDDEN_ADDRESS, text)


def hide_addresses_in_error_body(body: bytes) -> bytes:
    """An upstream's JSON error body with the URLs in its messages hidden (the body itself otherwise).

    The agent's own refusals name the model server's URL on the node, and the router passes upstream
    errors on to /v1 clients as they are; only the human-readable fields are touched.
    """
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return body
    if not isinstance(payload, dict):
        return body
    inner = payload.get("error")
    targets = [payload, inner] if isinstance(inner, dict) else [payload]
    changed = False
    for target in targets:
        for name in _MESSAGE_FIELDS:
            value = target.get(name)
            if isinstance(value, str) and (hidden := hide_addresses(value)) != value:
                target[name], changed = hidden, True
    return json.dumps(payload).encode() if changed else body


def error_response(
    status: int,
    message: str,
    *,
    code: str | None,
    type: str = "invalid_request_error",
    param: str | None = None,
    retry_after: int | str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """A JSON error in the OpenAI shape, with ``Retry-After`` when given."""
    all_headers = dict(headers or {})
    if retry_after is not None:
        all_headers["Retry-After"] = str(retry_after)
    body = openai_error(hide_addresses(message), code=code, type=type, param=param)
    return JSONResponse(body, status_code=status, headers=all_headers)


def maintenance(message: str, retry_after_s: int) -> JSONResponse:
    """503 ``maintenance``: a job holds the models."""
    return error_response(
        503, message, code="maintenance", type="server_error", retry_after=max(1, retry_after_s)
    )


def unauthorized(message: str) -> JSONResponse:
    """401 ``invalid_api_key``: no key, an unknown key or an expired one (the message says which)."""
    return error_response(401, message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})


def invalid_body(message: str, param: str | None = None) -> JSONResponse:
    """400: a body that is neither JSON nor multipart/form-data, or holds unencodable text (``param``)."""
    return error_response(400, message, code="invalid_request_body", param=param)


def unsafe_path(error: UnsafeProxyPathError) -> JSONResponse:
    """400 ``invalid_path``: a path that could leave the upstream's ``v1/`` prefix is never forwarded."""
    return error_response(
        400,
        f"The request path is refused: it has {error.reason}, which no /v1 endpoint has.",
        code="invalid_path",
    )


def routing_refused(
    method: str, path: str, status: int, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """405 ``method_not_allowed`` (with Starlette's ``Allow``) or another status no route could take."""
    if status == 405:
        allowed = (headers or {}).get("Allow", "")
        message = f"The method {method} is not allowed on {path}; use {allowed}."
        code = "method_not_allowed"
    else:
        message, code = f"{method} {path} cannot be served here (HTTP {status}).", "invalid_request"
    return error_response(status, message, code=code, headers=dict(headers or {}))


def missing_model() -> JSONResponse:
    """400: no ``model`` field."""
    return error_response(
        400,
        "The request has no 'model' field: name the model to use.",
        code="missing_required_parameter",
        param="model",
    )


def too_large(message: str) -> JSONResponse:
    """413 ``request_too_large``."""
    return error_response(413, message, code="request_too_large")


def model_not_found(served_name: str) -> JSONResponse:
    """404 ``model_not_found``, also for a model the key may not use (so keys cannot probe for names)."""
    return error_response(
        404,
        f"The model '{served_name}' does not exist or this API key may not use it.",
        code="model_not_found",
        param="model",
    )


def not_ready(served_name: str, state: ModelState, error: str | None = None) -> JSONResponse:
    """503 ``model_not_ready`` naming the model's state, with ``Retry-After: 30``."""
    detail = f"{state.value}: {error}" if error else state.value
    return error_response(
        503,
        f"The model '{served_name}' is not ready (state {detail}); retry later.",
        code="model_not_ready",
        type="server_error",
        retry_after=NOT_READY_RETRY_AFTER_S,
    )


def start_timed_out(served_name: str, state: ModelState, waited_s: float) -> JSONResponse:
    """503 ``model_not_ready``: the model started on request but was not Ready in time."""
    return error_response(
        503,
        f"The model '{served_name}' was started for this request but is still {state.value} "
        f"after {waited_s:g} s; retry later.",
        code="model_not_ready",
        type="server_error",
        retry_after=NOT_READY_RETRY_AFTER_S,
    )


def start_deferred(served_name: str, reason: str) -> JSONResponse:
    """503 ``model_not_ready``: the model cannot be started yet (the reason says until when)."""
    return error_response(
        503,
        f"The model '{served_name}' cannot be started yet: {reason.rstrip('.')}; retry later.",
        code="model_not_ready",
        type="server_error",
        retry_after=NOT_READY_RETRY_AFTER_S,
    )


def start_refused(served_name: str, reason: str) -> JSONResponse:
    """503 ``model_start_failed``: starting the model on request was refused or failed."""
    return error_response(
        503,
        f"The model '{served_name}' could not be started: {reason}",
        code="model_start_failed",
        type="server_error",
        retry_after=NOT_READY_RETRY_AFTER_S,
    )


def rate_limited(key_name: str, refusal: LimitExceeded) -> JSONResponse:
    """429 ``rate_limit_exceeded``, ``type`` ``requests`` or ``tokens`` as OpenAI sends it.

    A request that needs more tokens than the key's whole limit is told so, without a ``Retry-After``:
    waiting never admits it.
    """
    if refusal.needed is not None:
        return error_response(
            429,
            f"Request too large for API key '{key_name}': it needs about {refusal.needed} tokens "
            f"(its prompt and at least one output token), over the key's limit of {refusal.limit} "
            "tokens per minute. Shorten the prompt.",
            code="rate_limit_exceeded",
            type=refusal.kind,
        )
    return error_response(
        429,
        f"Rate limit reached for API key '{key_name}': {refusal.limit} {refusal.kind} per minute. "
        f"Retry in {refusal.retry_after_header} s.",
        code="rate_limit_exceeded",
        type=refusal.kind,
        retry_after=refusal.retry_after_header,
    )


def upstream_failed(served_name: str, error: UpstreamError) -> JSONResponse:
    """502 when the model cannot be reached or answers nothing usable; 504 when it stays silent."""
    status = 504 if isinstance(error, UpstreamTimeoutError) else 502
    code = "upstream_unreachable" if isinstance(error, UpstreamConnectError) else "upstream_failed"
    # httpx's reasons can name the host (a TLS name mismatch does): it goes too.
    detail = error.without_url
    host = urlsplit(error.url).hostname
    if host:
        detail = detail.replace(host, _HIDDEN_ADDRESS)
    return error_response(
        status, f"The model '{served_name}' did not answer: {detail}", code=code, type="server_error"
    )
