"""Clickjacking: no page of another origin may show the portal in a frame.

A page on another port of the same host could frame ``/models`` invisibly and have the administrator
click Stop through it (the session cookie rides along: every port of one host is the same site). So
every response of the master's app, pages and ``/api`` alike, says that no one may frame it, in both
spellings browsers read: the old ``X-Frame-Options`` and CSP's ``frame-ancestors``. ``/v1`` answers
machines, not browsers, and goes past this layer (see :func:`mirbad_master.v1_first`).
"""

from __future__ import annotations

from typing import Final

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["FRAME_HEADERS", "FrameGuard"]

FRAME_HEADERS: Final[tuple[tuple[str, str], ...]] = (
    ("X-Frame-Options", "DENY"),
    ("Content-Security-Policy", "frame-ancestors 'none'"),
)
"""The headers every response of the portal and the admin API carries."""


class FrameGuard:
    """ASGI middleware adding :data:`FRAME_HEADERS` to every HTTP response.

    A response that sets a Content-Security-Policy of its own keeps it: a second header is added
    beside it, and a browser enforces both.

    Args:
        app: the master's app.
    """

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, adding the headers to its response's start."""
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def send_framed(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in FRAME_HEADERS:
                    if name == "X-Frame-Options":
                        headers[name] = value
                    else:
                        headers.append(name, value)
            await send(message)

        await self._app(scope, receive, send_framed)
