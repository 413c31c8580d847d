"""Signing in to the portal: the login form's POST, the cookie, the attempt limit, signing out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response

from mirbad_master._admin_auth import SESSION_COOKIE, AdminAuth
from mirbad_master._origin_guard import OriginGuard
from mirbad_master.exceptions import WrongPasswordError
from mirbad_master.ui._login import login_message
from mirbad_master.ui._session import install_session_routes, login_redirect, safe_next, signed_in

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def portal(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, str, AdminAuth]]:
    auth = AdminAuth(tmp_path)
    password = auth.reset_password()
    app = FastAPI()
    app.add_middleware(OriginGuard)
    install_session_routes(app, auth)

    @app.get("/whoami")
    async def whoami(request: Request) -> Response:
        if not await signed_in(request, auth):
            return login_redirect(request)
        return PlainTextResponse("admin")

    transport = httpx.ASGITransport(app=app)
    # The browser names the page's origin on every form post.
    origin = {"Origin": "http://portal"}
    async with httpx.AsyncClient(transport=transport, base_url="http://portal", headers=origin) as client:
        yield client, password, auth


def query_of(response: httpx.Response) -> dict[str, list[str]]:
    return parse_qs(urlsplit(response.headers["location"]).query)


async def test_the_right_password_sets_an_http_only_strict_cookie_and_goes_where_asked(
    tmp_path: Path,
) -> None:
    async with portal(tmp_path) as (client, password, _):
        before = await client.get("/whoami?x=1")
        answer = await client.post("/login", data={"password": password, "next": "/whoami"})
        after = await client.get("/whoami")

    assert before.status_code == 303
    assert before.headers["location"] == "/login?next=%2Fwhoami%3Fx%3D1"
    assert answer.status_code == 303
    assert answer.headers["location"] == "/whoami"
    cookie = answer.headers["set-cookie"].lower()
    assert cookie.startswith(f"{SESSION_COOKIE}=")
    assert "httponly" in cookie
    assert "samesite=strict" in cookie
    assert after.text == "admin"


async def test_a_wrong_password_goes_back_to_the_form_and_the_sixth_in_a_minute_is_locked(
    tmp_path: Path,
) -> None:
    async with portal(tmp_path) as (client, password, _):
        wrong = [await client.post("/login", data={"password": "nope", "next": "/x"}) for _ in range(5)]
        locked = await client.post("/login", data={"password": password})

    assert all(query_of(answer) == {"error": ["wrong"], "next": ["/x"]} for answer in wrong)
    assert query_of(locked)["error"] == ["locked"]
    assert 0 < int(query_of(locked)["retry"][0]) <= 60
    assert SESSION_COOKIE not in locked.headers.get("set-cookie", "")


async def test_a_signed_in_browser_signs_in_again_while_its_address_is_locked(tmp_path: Path) -> None:
    async with portal(tmp_path) as (client, password, _):
        await client.post("/login", data={"password": password})
        session = client.cookies[SESSION_COOKIE]
        client.cookies.clear()  # someone else at the same address guesses
        guesses = [await client.post("/login", data={"password": "nope"}) for _ in range(6)]
        stranger = await client.post("/login", data={"password": password})
        client.cookies.set(SESSION_COOKIE, session)
        again = await client.post("/login", data={"password": password, "next": "/whoami"})

    assert query_of(guesses[-1])["error"] == ["locked"]
    assert again.headers["location"] == "/whoami"  # a live session: judged by nothing but its password
    assert query_of(stranger)["error"] == ["locked"]


async def test_signing_out_ends_the_session(tmp_path: Path) -> None:
    async with portal(tmp_path) as (client, password, auth):
        await client.post("/login", data={"password": password})
        token = client.cookies[SESSION_COOKIE]
        answer = await client.post("/logout")
        after = await client.get("/whoami")

    assert answer.headers["location"] == "/login"
    assert after.status_code == 303
    with pytest.raises(WrongPasswordError, match="sign in again"):
        await auth.check_session(token)


@pytest.mark.parametrize(
    ("wanted", "target"),
    [
        (None, "/"),
        ("", "/"),
        ("/models?tags=chat", "/models?tags=chat"),
        ("//evil.example/x", "/"),
        ("https://evil.example/", "/"),
        ("/\\evil", "/"),
        ("/login?next=/x", "/"),
        ("/logout", "/"),
    ],
)
def test_only_paths_of_this_site_are_followed_after_signing_in(wanted: str | None, target: str) -> None:
    assert safe_next(wanted) == target


def test_the_login_page_says_why_an_attempt_was_refused() -> None:
    assert login_message(None, None) is None
    assert login_message("wrong", None) == "That is not the administrator password."
    assert login_message("locked", "42") == "Too many wrong passwords; try again in 42 s."
    assert login_message("locked", "<script>") is not None
    assert "<script>" not in (login_message("locked", "<script>") or "")
