"""The request body cap of the master's app: ``/api`` and the portal, everything but ``/v1``.

``/v1`` has its own, larger cap in the router; every other endpoint keeps the usual server default of
30,000,000 bytes (the ``max_api_body_bytes`` setting; issue 24, item 15). A body announced larger by
its ``Content-Length`` is refused before a byte of it is read; a chunked (or understated) body is
counted as it streams in, and refused the moment it passes the cap, whatever the route made of the
cut-off body. The refusal is the admin API's envelope: 413 ``request_too_large``. A route that reads
and caps its own body (a backup upload to restore: 64 MiB, refused with 422 naming why) is named in
``own_caps`` and passed through uncounted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mirbad_protocol.admin import AdminErrorCode

from ._api_errors import error_response

__all__ = ["BodyCap"]

_V1: Final = "/v1/"


class _BodyTooLargeError(Exception):
    """Raised into the app by ``receive`` once the body passed the cap (the app's answer is dropped)."""


class BodyCap:
    """ASGI middleware answering 413 for request bodies over ``max_bytes`` (``/v1`` excepted).

    Args:
        app: the master's app.
        max_bytes: the largest body accepted.
        own_caps: path prefixes of routes that cap their bodies themselves.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, own_caps: Sequence[str] = ()) -> None:
        self._app = app
        self._max = max_bytes
        self._own_caps = tuple(own_caps)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on with its body counted, or refuse it as too large."""
        path = scope.get("path", "")
        if scope["type"] != "http" or path.startswith(_V1) or self._caps_its_own(path):
            await self._app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self._max:
            await self._too_large()(scope, receive, send)
            return
        received = 0
        over = False
        started = False

        async def counted() -> Message:
            nonlocal received, over
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self._max:
                    over = True
                    raise _BodyTooLargeError
            return message

        async def answer(message: Message) -> None:
            nonlocal started
            if over and not started:
                return  # whatever the route said about the cut-off body, the 413 below replaces it
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self._app(scope, counted, answer)
        except Exception:
            if not over:
                raise
        if over and not started:
            await self._too_large()(scope, receive, send)

    def _caps_its_own(self, path: str) -> bool:
        return any(path == prefix or path.startswith(f"{prefix}/") for prefix in self._own_caps)

    def _too_large(self) -> JSONResponse:
        return error_response(
            413,
            AdminErrorCode.REQUEST_TOO_LARGE,
            f"the request body is larger than {self._max} bytes (max_api_body_bytes)",
            # The rest of the body is never read: the connection cannot carry another request.
            headers={"Connection": "close"},
        )
