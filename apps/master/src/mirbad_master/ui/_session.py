"""Signing in to the portal: the login form's POST, signing out (POST), and the check every page runs first.

The login page is a plain HTML form posting to ``/login``, so the session cookie is set by an ordinary
HTTP answer (HttpOnly: the page's scripts never see it) and signing in works without a websocket. The
cookie is the one ``/api`` accepts (:data:`SESSION_COOKIE`), so the portal and the API share a session.
Wrong passwords are throttled per address and per account by :class:`AdminAuth`, which compares
the password in constant time.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import quote, urlencode

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response

from mirbad_master._admin_auth import (
    SESSION_COOKIE,
    AdminAuth,
)
from mirbad_master._api_session import client_address, set_session_cookie
from mirbad_master.exceptions import NotSignedInError, TooManyAttemptsError

__all__ = ["LOGIN_PATH", "LOGOUT_PATH", "install_session_routes", "login_redirect", "safe_next", "signed_in"]

LOGIN_PATH: Final = "/login"
"""The login page (GET) and its form's target (POST)."""
LOGOUT_PATH: Final = "/logout"
"""``POST``: signs out and goes back to the login page (a GET changes nothing: a link cannot sign out)."""


def safe_next(value: str | None) -> str:
    """Where to go after signing in: a path on this site only (never ``//host`` or a full URL)."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return "/" if value.startswith((LOGIN_PATH, LOGOUT_PATH)) else value


def login_redirect(request: Request) -> RedirectResponse:
    """Send a visitor without a session to the login page, remembering the page they wanted."""
    wanted = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    target = LOGIN_PATH if wanted == "/" else f"{LOGIN_PATH}?next={quote(wanted, safe='')}"
    return RedirectResponse(target, status_code=303)


async def signed_in(request: Request, auth: AdminAuth) -> bool:
    """Whether ``request`` carries a live session cookie."""
    token = request.cookies.get(SESSION_COOKIE)
    if not token:
        return False
    try:
        await auth.check_session(token)
    except NotSignedInError:
        return False
    return True


def install_session_routes(app: FastAPI, auth: AdminAuth) -> None:
    """Add ``POST /login`` and ``POST /logout`` to ``app`` (before the portal's catch-all mount).

    Both are checked for their origin by the master's :class:`~mirbad_master._origin_guard.OriginGuard`.
    """

    @app.post(LOGIN_PATH, include_in_schema=False)
    async def sign_in(request: Request) -> Response:
        form = await request.form()
        password = form.get("password")
        target = safe_next(str(form.get("next") or ""))
        given = password if isinstance(password, str) else ""
        signed_in = await auth.has_session(request.cookies.get(SESSION_COOKIE))
        try:
            token = await auth.sign_in(given, client_address(request), signed_in=signed_in)
        except TooManyAttemptsError as exc:
            return _back_to_login(target, error="locked", retry=str(exc.retry_after_s))
        except NotSignedInError:
            return _back_to_login(target, error="wrong")
        answer = RedirectResponse(target, status_code=303)
        set_session_cookie(answer, token, request)
        return answer

    @app.get(LOGOUT_PATH, include_in_schema=False)
    async def sign_out_by_link() -> Response:
        # An old bookmark or a link on another page: it goes home, the session stays (POST signs out).
        return RedirectResponse("/", status_code=303)

    @app.post(LOGOUT_PATH, include_in_schema=False)
    async def sign_out(request: Request) -> Response:
        token = request.cookies.get(SESSION_COOKIE)
        if token:
            auth.sign_out(token)
        answer = RedirectResponse(LOGIN_PATH, status_code=303)
        answer.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
        return answer


def _back_to_login(target: str, **query: str) -> RedirectResponse:
    if target != "/":
        query["next"] = target
    return RedirectResponse(f"{LOGIN_PATH}?{urlencode(query)}", status_code=303)
