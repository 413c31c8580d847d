"""The agent's model proxy: ``/agent/v1/proxy/{model_id}/{path}`` forwarded to the model's own server.

The master sends every /v1 request for a model to the agent of the model's node; the agent looks up
where the model listens (a loopback port, or its container on the Docker network) and which headers it
needs (llama-server's per-instance bearer key), then forwards with the streaming core of
:mod:`mirbad_router`: bodies up to 64 MiB, responses relayed chunk by chunk, a client that leaves
cancelling the model's request.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

import httpx
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mirbad_protocol import MirbadError
from mirbad_protocol.agent import MAX_PROXY_BODY_BYTES, ROUTE_PROXY, AgentErrorCode
from mirbad_router import (
    RequestTooLargeError,
    UpstreamError,
    UpstreamTimeoutError,
    forward,
    join_upstream_url,
)

from ._errors import agent_error_response
from ._proxy_paths import checked_path, raw_tail
from .exceptions import ProxyPathError

__all__ = ["PROXY_METHODS", "RETRY_AFTER_S", "ModelServer", "ModelServerLookup", "proxy_route"]

_log = logging.getLogger(__name__)

PROXY_METHODS: Final = ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")
"""The methods the proxy forwards (Starlette answers HEAD through GET)."""
RETRY_AFTER_S: Final = 30
"""The Retry-After of a 503 for a model that has no running server on this node."""


@dataclass(frozen=True)
class ModelServer:
    """Where a running model's own HTTP server is reached, and what every request to it must carry.

    Attributes:
        base_url: the server's base URL (``http://127.0.0.1:41234/`` or ``http://ss-qwen:8000/``).
        headers: headers added to each forwarded request, replacing the caller's of the same name
            (``Authorization: Bearer <instance key>`` for llama-server).
    """

    base_url: str
    headers: Mapping[str, str] = field(default_factory=dict)


class ModelServerLookup(Protocol):
    """Finds a model's own server: ``None`` when the model is known but its server is not Ready.

    An unknown model raises :class:`LookupError` (such as mirbad_runtime's ``ModelNotFoundError``);
    the proxy answers it with 404 ``model_not_found``.
    """

    def __call__(self, model_id: str, /) -> Awaitable[ModelServer | None]:
        """Return the server of ``model_id``, or ``None`` if it has no running server."""
        ...


RunningCheck = Callable[[str], Awaitable[bool]]
"""Whether a known model is Ready on this node (asked only after its server could not be reached)."""


def proxy_route(
    lookup: ModelServerLookup,
    client: httpx.AsyncClient,
    *,
    idle_timeout_s: float | None = None,
    running: RunningCheck | None = None,
) -> Route:
    """The proxy route, to be mounted under ``/agent/v1``.

    Answers: 400 ``invalid_request`` (field ``path``) for a path outside the model server's ``/v1/``
    or one that could climb out of it (see :func:`~mirbad_agent.checked_path`); 404
    ``model_not_found`` for an unknown model; 503 ``model_not_running`` with Retry-After
    when it is known but not Ready (stopped, failed, still loading); 413 ``request_too_large`` for
    a body over 64 MiB; 502
    ``upstream_unreachable`` when the model's server refuses or breaks the connection; 504
    ``upstream_timeout`` when it stays silent for ``idle_timeout_s`` before answering. Anything else is
    the model's own response, streamed as it comes; a model that then stays silent for
    ``idle_timeout_s`` (a wedged engine) ends an event stream with an OpenAI error event and any other
    body cut short (see :class:`mirbad_router.UpstreamRelay`), and its request is closed.

    Args:
        lookup: where each model listens (see :class:`ModelServerLookup`).
        client: the shared upstream client (``mirbad_router``'s ``create_upstream_client``).
        idle_timeout_s: end a request whose model stays silent this long (``None``: never); the
            agent's ``proxy_idle_timeout_s``.
        running: asked when the model's server cannot be reached: a model that is not Ready (an
            exited container, a Failed process, one still loading) is then 503 ``model_not_running``
            rather than 502. Asked only then, so a request to a running model costs no status read.
    """

    async def endpoint(request: Request) -> Response:
        model_id: str = request.path_params["model_id"]
        try:
            # Checked before the lookup: a refused path learns nothing about the node's models.
            path = checked_path(raw_tail(request))
        except ProxyPathError as exc:
            return agent_error_response(exc.code, exc.message, field=exc.field)
        try:
            upstream = await lookup(model_id)
        except LookupError as exc:
            message = (
                str(exc) if isinstance(exc, MirbadError) else f"model {model_id} is not known on this node"
            )
            return agent_error_response(AgentErrorCode.MODEL_NOT_FOUND, message)
        if upstream is None:
            return _not_running(model_id)
        url = join_upstream_url(upstream.base_url, path, request.url.query)

        async def failed(exc: UpstreamError) -> Response:
            _log.warning("proxy: %s", exc)
            if isinstance(exc, UpstreamTimeoutError):
                return agent_error_response(AgentErrorCode.UPSTREAM_TIMEOUT, str(exc))
            # Not a timeout: the server refused or broke the connection before any answer.
            if running is not None and not await running(model_id):
                return _not_running(model_id)
            return agent_error_response(AgentErrorCode.UPSTREAM_UNREACHABLE, str(exc))

        try:
            return await forward(
                request,
                url,
                client,
                on_failure=failed,
                headers=upstream.headers,
                idle_timeout_s=idle_timeout_s,
                limit=MAX_PROXY_BODY_BYTES,
            )
        except RequestTooLargeError as exc:
            return agent_error_response(AgentErrorCode.REQUEST_TOO_LARGE, str(exc))

    return Route(ROUTE_PROXY, endpoint, methods=list(PROXY_METHODS), name="proxy")


def _not_running(model_id: str) -> Response:
    message = f"model {model_id} is not running on this node"
    retry = {"Retry-After": str(RETRY_AFTER_S)}
    return agent_error_response(AgentErrorCode.MODEL_NOT_RUNNING, message, headers=retry)
