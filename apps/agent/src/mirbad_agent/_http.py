"""Request and response plumbing shared by the agent's routes: bounded JSON bodies, typed query values."""

from __future__ import annotations

from datetime import datetime
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse

from mirbad_protocol import WireModel
from mirbad_protocol.agent import MAX_REQUEST_BODY_BYTES, AgentErrorCode
from mirbad_router import read_body

from .exceptions import RequestRefusedError

__all__ = ["query_bool", "query_datetime", "query_int", "read_wire", "wire_response"]

_M = TypeVar("_M", bound=WireModel)
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


def wire_response(model: WireModel, status_code: int = 200) -> JSONResponse:
    """A JSON response with the model's wire form (camelCase, defaults omitted)."""
    return JSONResponse(model.to_wire(), status_code=status_code)


async def read_wire(request: Request, model: type[_M]) -> _M:
    """The request's JSON body as ``model``.

    Raises:
        RequestRefusedError: no body (400).
        RequestTooLargeError: a body over :data:`~mirbad_protocol.agent.MAX_REQUEST_BODY_BYTES` (413).
        InvalidFieldError: the body is not valid JSON or breaks the model (400, naming the field).
    """
    body = await read_body(request, limit=MAX_REQUEST_BODY_BYTES)
    if not body.strip():
        raise RequestRefusedError(AgentErrorCode.INVALID_REQUEST, "a JSON body is required")
    return model.from_wire_json(body)


def query_bool(request: Request, name: str, default: bool = False) -> bool:
    """A ``true``/``false`` (``1``/``0``, ``yes``/``no``, ``on``/``off``) query parameter."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE or value in _FALSE:
        return value in _TRUE
    raise _bad_query(name, f"{raw!r} is not true or false")


def query_int(request: Request, name: str, default: int, *, minimum: int, maximum: int) -> int:
    """An integer query parameter within ``minimum``..``maximum``."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _bad_query(name, f"{raw!r} is not an integer") from None
    if not minimum <= value <= maximum:
        raise _bad_query(name, f"must be between {minimum} and {maximum}")
    return value


def query_datetime(request: Request, name: str) -> datetime | None:
    """An ISO 8601 time with its offset (``2026-11-30T12:00:00Z``), or None when absent."""
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise _bad_query(name, f"{raw!r} is not an ISO 8601 time") from None
    if value.tzinfo is None:
        raise _bad_query(name, "the time needs a UTC offset (Z or +hh:mm)")
    return value


def _bad_query(name: str, reason: str) -> RequestRefusedError:
    return RequestRefusedError(AgentErrorCode.INVALID_REQUEST, f"{name}: {reason}", field=name)
