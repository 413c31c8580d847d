"""Sign-in before the body: an ``/api`` request that may carry a body is refused before it is read.

FastAPI reads (and parses) a route's body parameters before its dependencies run, so the sign-in
dependency (:func:`~mirbad_master._api_session.admin_guard`) came too late to spare the master a large
or never-ending body from someone without a password (issue 31, item 2). This layer, in front of the
app, checks the same credentials with the same :class:`AdminAuth` (a Bearer password, throttled as
always, or the session cookie) for every ``/api`` request but GET, HEAD and OPTIONS (which no route
reads a body of); signing in and out (``/api/session``) stays open. A refusal is the admin API's
envelope, 401 ``unauthorized`` (or 429 ``too_many_attempts``), answered without a byte of the body
read. A request it admits is marked, so the route's dependency does not check the password twice.
"""

from __future__ import annotations

from typing import Final

from fastapi.security.utils import get_authorization_scheme_param
from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ._admin_auth import SESSION_COOKIE, AdminAuth
from ._api_errors import refusal_response
from .exceptions import NotSignedInError, WrongPasswordError

__all__ = ["SIGNED_IN_BY_GATE", "SignInGate"]

SIGNED_IN_BY_GATE: Final = "mirbad_signed_in"
"""The key of the request state (``scope["state"]``) this layer sets on a request it admitted."""

_BODILESS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
_OPEN: Final = "/api/session"  # signing in needs no sign-in; signing out always succeeds
_API: Final = "/api/"


class SignInGate:
    """ASGI middleware refusing unauthenticated ``/api`` writes before their body is read.

    Args:
        app: the master's app.
        auth: the administrator's password and sessions (the same object the routes check with).
    """

    def __init__(self, app: ASGIApp, auth: AdminAuth) -> None:
        self._app = app
        self._auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on once signed in, or refuse it without reading its body."""
        if scope["type"] == "http" and _gated(scope):
            try:
                await self._check(scope)
            except NotSignedInError as exc:
                await _refusal(exc)(scope, receive, send)
                return
            scope.setdefault("state", {})[SIGNED_IN_BY_GATE] = True
        await self._app(scope, receive, send)

    async def _check(self, scope: Scope) -> None:
        # The same order as admin_guard: a Bearer password when one is given, else the cookie.
        headers = Headers(scope=scope)
        scheme, credentials = get_authorization_scheme_param(headers.get("authorization"))
        session = cookie_parser(headers.get("cookie", "")).get(SESSION_COOKIE)
        if scheme.lower() == "bearer" and credentials:
            signed_in = await self._auth.has_session(session)
            client = scope.get("client")
            address = client[0] if client else "unknown"
            await self._auth.check_password(credentials, address, signed_in=signed_in)
        elif session:
            await self._auth.check_session(session)
        else:
            raise WrongPasswordError(
                "sign in first: send 'Authorization: Bearer <administrator password>' or the session cookie"
            )


def _gated(scope: Scope) -> bool:
    path: str = scope["path"]
    return path.startswith(_API) and path != _OPEN and scope["method"] not in _BODILESS


def _refusal(exc: NotSignedInError) -> JSONResponse:
    """The answer the route's own refusal would have been, on a connection that ends with it."""
    # Nothing of the body was read: the connection cannot be reused for another request.
    return refusal_response(exc, headers={"Connection": "close"})
