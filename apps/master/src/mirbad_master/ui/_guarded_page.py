"""One decorator for every signed-in page: the sign-in check, then the page's frame, then its body.

A page's body is an ``async`` function whose first parameter is the request; its other parameters are
the page's path and query parameters, read by NiceGUI (and FastAPI under it) from the body's own
signature, which :func:`functools.wraps` hands on. A request that is not signed in gets the redirect to
the login page and never reaches the body.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, TypeAlias

from fastapi import Request
from fastapi.responses import Response
from nicegui import ui

from ._layout import frame
from ._portal import Portal

__all__ = ["PageBody", "guarded_page"]

_P = ParamSpec("_P")

PageBody: TypeAlias = Callable[Concatenate[Request, _P], Awaitable[None]]
"""A page's body: the request first, then the page's own parameters."""


def guarded_page(portal: Portal, path: str, *, section: str) -> Callable[[PageBody[_P]], PageBody[_P]]:
    """Serve the decorated body at ``path`` for the signed-in administrator, framed under ``section``.

    Args:
        portal: the portal whose sign-in the page checks.
        path: the page's route (NiceGUI's, with ``{parameters}``).
        section: the navigation entry the frame marks as current (``/models`` for a model's pages).
    """

    def decorate(body: PageBody[_P]) -> PageBody[_P]:
        @functools.wraps(body)
        async def page(request: Request, *args: Any, **kwargs: Any) -> Response | None:
            if (refused := await portal.guard(request)) is not None:
                return refused
            with frame(portal, request, section):
                await body(request, *args, **kwargs)
            return None

        ui.page(path)(page)
        return body

    return decorate
