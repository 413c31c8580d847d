"""Who may call ``/api``: the administrator, by password (scripts) or by the portal's session cookie.

:func:`admin_guard` is the dependency every protected route runs first; it records the caller as the
audit actor in ``request.state``. :func:`session_router` signs the portal in and out. Every password
given (Bearer or sign-in) is throttled by address and account; one sent with a live session cookie is
never refused, so guessing elsewhere cannot lock a signed-in administrator out.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer

from mirbad_protocol import WireModel

from ._admin_auth import ADMIN_USER, SESSION_COOKIE, SESSION_LIFETIME_S, AdminAuth
from ._api_errors import user_input
from ._sign_in_gate import SIGNED_IN_BY_GATE
from .exceptions import WrongPasswordError

__all__ = ["SignIn", "actor_of", "admin_guard", "client_address", "session_router", "set_session_cookie"]

_bearer_scheme = HTTPBearer(auto_error=False, description="The administrator password")
_cookie_scheme = APIKeyCookie(name=SESSION_COOKIE, auto_error=False, description="The portal's session")
_ACTOR = f"user:{ADMIN_USER}"


class SignIn(WireModel):
    """The body of ``POST /api/session``."""

    password: str


def admin_guard(auth: AdminAuth) -> Callable[..., Awaitable[None]]:
    """The dependency that admits the administrator and refuses everyone else (401, or 429).

    Raises (from the dependency):
        WrongPasswordError: no credentials, a wrong password or an ended session.
        TooManyAttemptsError: this client sent too many wrong passwords lately.
    """

    async def require_admin(
        request: Request,
        bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)],
        session: Annotated[str | None, Depends(_cookie_scheme)],
    ) -> None:
        if getattr(request.state, SIGNED_IN_BY_GATE, False):
            # The sign-in gate in front of the app checked these credentials already (one throttled
            # check per request, not two).
            request.state.actor = _ACTOR
            return
        if bearer is not None:
            signed_in = await auth.has_session(session)
            await auth.check_password(bearer.credentials, client_address(request), signed_in=signed_in)
        elif session:
            await auth.check_session(session)
        else:
            raise WrongPasswordError(
                "sign in first: send 'Authorization: Bearer <administrator password>' or the session cookie"
            )
        request.state.actor = _ACTOR

    return require_admin


def actor_of(request: Request) -> str:
    """The audit actor :func:`admin_guard` recorded for this request."""
    actor = getattr(request.state, "actor", None)
    return actor if isinstance(actor, str) else _ACTOR


def client_address(request: Request) -> str:
    """The address failed attempts are counted under.

    uvicorn takes it from ``X-Forwarded-For`` only when the peer is one of the master's configured
    trusted proxies (``--trusted-proxy``; none by default), so a client cannot choose it.
    """
    return request.client.host if request.client is not None else "unknown"


def session_router(auth: AdminAuth) -> APIRouter:
    """``POST /session`` (sign in, sets the cookie) and ``DELETE /session`` (sign out)."""
    router = APIRouter(tags=["session"])

    @router.post("/session", status_code=204, summary="Sign in to the portal (sets the session cookie)")
    async def sign_in(body: Annotated[SignIn, user_input(SignIn)], request: Request) -> Response:
        signed_in = await auth.has_session(request.cookies.get(SESSION_COOKIE))
        token = await auth.sign_in(body.password, client_address(request), signed_in=signed_in)
        answer = Response(status_code=204)
        set_session_cookie(answer, token, request)
        return answer

    @router.delete("/session", status_code=204, summary="Sign out of the portal")
    async def sign_out(request: Request) -> Response:
        token = request.cookies.get(SESSION_COOKIE)
        if token:
            auth.sign_out(token)
        answer = Response(status_code=204)
        answer.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
        return answer

    return router


def set_session_cookie(response: Response, token: str, request: Request) -> None:
    """Give the browser its session: HttpOnly, SameSite=Strict, Secure whenever the page came over TLS."""
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=int(SESSION_LIFETIME_S),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
