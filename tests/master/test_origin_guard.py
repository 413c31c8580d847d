"""Cross-site request forgery: the session cookie does nothing state-changing for another origin.

The attack this stops: a page on another port of the same host (the same *site*, so SameSite=Strict
lets the cookie through) posting to the master. Requests go through httpx to the real master app; the
portal's websocket handshake goes over a real socket to NiceGUI's real socket.io app on a real server
(unguarded, it answers a foreign origin with 101). In a browser the same page would send its own
``Origin`` by itself (Chromium does on every cross-origin fetch, form post and websocket); the browser
tier does not repeat these checks.
"""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nicegui.nicegui import sio_app
from starlette.applications import Starlette
from starlette.routing import Mount
from tests._support.master_server import serve_master_server
from tests.master._stack import Master, running_master

from mirbad_master._admin_auth import SESSION_COOKIE
from mirbad_master._app import create_master_app
from mirbad_master._origin_guard import OriginGuard, same_origin
from mirbad_master.ui._session import install_session_routes

pytestmark = pytest.mark.anyio

OURS = "http://master"
NEXT_PORT = "http://master:19091"  # the same site, another origin: SameSite=Strict does not help
TINY = {"id": "tiny", "servedName": "tiny", "modelPath": "tiny", "memoryBudgetGiB": 1}


async def signed_in_browser(master: Master) -> httpx.AsyncClient:
    """The anonymous client, signed in with the session cookie (as the portal's browser is)."""
    answer = await master.anonymous.post("/api/session", json={"password": master.password})
    assert answer.status_code == 204, answer.text
    return master.anonymous


def refused(answer: httpx.Response) -> bool:
    return answer.status_code == 403 and answer.json()["error"]["code"] == "cross_origin"


async def test_a_page_on_another_port_cannot_stop_a_model_with_the_cookie(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        await master.admin.post("/api/models", json=TINY)
        await master.admin.post("/api/models/tiny/start")
        browser = await signed_in_browser(master)
        forged = await browser.post("/api/models/tiny/stop", headers={"Origin": NEXT_PORT})
        by_referer = await browser.post(
            "/api/models/tiny/stop", headers={"Origin": "", "Referer": f"{NEXT_PORT}/attack.html"}
        )
        state = (await master.admin.get("/api/models/tiny")).json()["status"]["state"]
        own = await browser.post("/api/models/tiny/stop", headers={"Origin": OURS})

    assert refused(forged)
    assert "Bearer" in forged.json()["error"]["message"]
    assert refused(by_referer)
    assert state == "Ready"
    assert own.status_code == 200, own.text


async def test_a_cookie_call_naming_no_origin_is_refused_and_a_referer_of_ours_is_enough(
    tmp_path: Path,
) -> None:
    async with running_master(tmp_path) as master:
        browser = await signed_in_browser(master)
        nameless = await browser.post("/api/keys", json={"name": "x"}, headers={"Origin": ""})
        referred = await browser.post(
            "/api/keys", json={"name": "y"}, headers={"Origin": "", "Referer": f"{OURS}/access"}
        )
        null = await browser.delete("/api/session", headers={"Origin": "null"})
        reading = await browser.get("/api/keys", headers={"Origin": NEXT_PORT})

    assert refused(nameless)
    assert referred.status_code == 201
    assert refused(null)
    assert reading.status_code == 200  # a read changes nothing (and its answer is the browser's to withhold)


async def test_bearer_calls_need_no_origin(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        foreign = await master.admin.post("/api/models", json=TINY, headers={"Origin": NEXT_PORT})
        scripted = await master.admin.delete("/api/models/tiny")

    assert foreign.status_code == 201
    assert scripted.status_code == 204


@asynccontextmanager
async def portal_forms(tmp_path: Path) -> AsyncIterator[tuple[Master, httpx.AsyncClient]]:
    async with running_master(tmp_path) as master:
        app = create_master_app(
            master.services, master.auth, ui=lambda app, _services, auth: install_session_routes(app, auth)
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=OURS) as client:
            yield master, client


async def test_the_login_form_only_takes_posts_from_its_own_page(tmp_path: Path) -> None:
    async with portal_forms(tmp_path) as (master, client):
        form = {"password": master.password}
        forged = await client.post("/login", data=form, headers={"Origin": NEXT_PORT})
        nameless = await client.post("/login", data=form)
        own = await client.post("/login", data=form, headers={"Origin": OURS})

    assert refused(forged)
    assert refused(nameless)
    assert SESSION_COOKIE not in forged.headers.get("set-cookie", "")
    assert own.status_code == 303
    assert own.headers["set-cookie"].startswith(SESSION_COOKIE)


async def test_signing_out_is_a_post_from_our_own_page_and_a_get_changes_nothing(tmp_path: Path) -> None:
    async with portal_forms(tmp_path) as (master, client):
        token = await master.auth.sign_in(master.password, "browser")
        client.cookies.set(SESSION_COOKIE, token)
        by_link = await client.get("/logout")
        alive_after_get = await master.auth.has_session(token)
        forged = await client.post("/logout", headers={"Origin": NEXT_PORT})
        alive_after_forgery = await master.auth.has_session(token)
        own = await client.post("/logout", headers={"Origin": OURS})
        alive_after_own = await master.auth.has_session(token)

    assert (by_link.status_code, by_link.headers["location"]) == (303, "/")
    assert alive_after_get
    assert refused(forged)
    assert alive_after_forgery
    assert own.status_code == 303
    assert not alive_after_own


# ---------------------------------------------------------------- the portal's websocket


@asynccontextmanager
async def socket_server() -> AsyncIterator[tuple[str, int]]:
    # NiceGUI's own socket.io app (it accepts any origin: cors_allowed_origins="*"), behind the guard.
    app = OriginGuard(Starlette(routes=[Mount("/_nicegui_ws", app=sio_app)]))
    async with serve_master_server(app) as address:
        yield address


async def handshake(host: str, port: int, **headers: str) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        "GET /_nicegui_ws/socket.io/?EIO=4&transport=websocket HTTP/1.1",
        f"Host: {host}:{port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        f"Cookie: {SESSION_COOKIE}=stolen-by-the-browser",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    async with await anyio.connect_tcp(host, port) as stream:
        await stream.send(("\r\n".join(lines) + "\r\n\r\n").encode())
        with anyio.fail_after(10):
            return await stream.receive()


async def test_the_portal_websocket_refuses_a_foreign_origin() -> None:
    async with socket_server() as (host, port):
        foreign = await handshake(host, port, Origin=f"http://{host}:19091")
        own = await handshake(host, port, Origin=f"http://{host}:{port}")

    assert foreign.startswith(b"HTTP/1.1 403")
    assert own.startswith(b"HTTP/1.1 101")


async def test_socket_io_long_polling_refuses_a_foreign_origin(tmp_path: Path) -> None:
    async with portal_forms(tmp_path) as (_master, client):
        polling = "/_nicegui_ws/socket.io/?EIO=4&transport=polling"
        foreign = await client.get(polling, headers={"Origin": NEXT_PORT})

    assert refused(foreign)


# ---------------------------------------------------------------- the comparison


hosts = st.sampled_from(["127.0.0.1", "localhost", "master.lan", "[::1]", "10.1.2.3"])
ports = st.integers(min_value=1, max_value=65535)


@given(scheme=st.sampled_from(["http", "https"]), host=hosts, port=ports, other=ports)
def test_an_origin_matches_only_its_own_scheme_host_and_port(
    scheme: str, host: str, port: int, other: int
) -> None:
    assert same_origin(f"{scheme}://{host}:{port}", scheme, f"{host}:{port}")
    assert same_origin(f"{scheme.upper()}://{host.upper()}:{port}/some/page?q=1", scheme, f"{host}:{port}")
    if other != port:
        assert not same_origin(f"{scheme}://{host}:{other}", scheme, f"{host}:{port}")
    flipped = "https" if scheme == "http" else "http"
    assert not same_origin(f"{flipped}://{host}:{port}", scheme, f"{host}:{port}")
    assert not same_origin(f"{scheme}://{host}.evil.example:{port}", scheme, f"{host}:{port}")


@pytest.mark.parametrize(
    ("claimed", "host", "expected"),
    [
        ("http://master", "master:80", True),
        ("https://master", "master", False),  # the request came over http
        ("http://master:80", "master", True),
        ("null", "master", False),
        ("", "master", False),
        ("http://master:99999", "master", False),
        ("http://mas ter", "master", False),
    ],
)
def test_default_ports_and_nonsense(claimed: str, host: str, expected: bool) -> None:
    assert same_origin(claimed, "http", host) is expected
