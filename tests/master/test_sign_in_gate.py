"""Sign-in before the body (issue 31, item 2): ``/api`` refuses a stranger before reading what it sends.

FastAPI reads a route's body before the sign-in dependency runs, so a stranger could make the master
read (and parse) a large or endless body. Over a real socket to the master's own server, a request
announces 10 MB, sends a few bytes of it and must get its 401 at once; the same with a chunked body
that never ends. Signed-in callers (password or session cookie) and signing in itself are unchanged.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest
from starlette.types import Message
from tests._support.master_server import serve_master_server
from tests.master._stack import Master, running_master

from mirbad_master._app import create_master_app, v1_first

pytestmark = pytest.mark.anyio

WAIT_S = 20
TINY = {"id": "tiny", "servedName": "tiny", "modelPath": "tiny", "memoryBudgetGiB": 1}


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Master, str, int]]:
    async with running_master(tmp_path) as master:
        app = v1_first(create_master_app(master.services, master.auth))
        async with serve_master_server(app) as (host, port):
            yield master, host, port


async def first_answer(host: str, port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` (a head and part of a body, never all of it) and read the answer that comes."""
    received = b""
    with anyio.fail_after(WAIT_S):
        async with await anyio.connect_tcp(host, port) as sock:
            await sock.send(request)
            while True:
                head, _, body = received.partition(b"\r\n\r\n")
                if _ and b"content-length" in head.lower():
                    lines = head.decode("latin-1").split("\r\n")
                    headers = dict(line.split(": ", 1) for line in lines[1:])
                    headers = {name.lower(): value for name, value in headers.items()}
                    if len(body) >= int(headers["content-length"]):
                        return int(lines[0].split()[1]), headers, body
                received += await sock.receive()


def head(method: str, path: str, *lines: str) -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: master\r\n" + "".join(f"{line}\r\n" for line in lines) + "\r\n"
    ).encode()


async def test_a_stranger_gets_401_before_sending_a_large_body(served: tuple[Master, str, int]) -> None:
    _, host, port = served
    request = head("POST", "/api/models", "Content-Type: application/json", "Content-Length: 10000000")
    status, headers, body = await first_answer(host, port, request + b'{"id": "tiny", "x": "')

    assert status == 401
    assert headers["www-authenticate"] == 'Bearer realm="mirbad"'
    assert json.loads(body)["error"]["code"] == "unauthorized"


async def test_a_stranger_gets_401_before_an_endless_chunked_body(served: tuple[Master, str, int]) -> None:
    _, host, port = served
    request = head("PUT", "/api/models/tiny", "Content-Type: application/json", "Transfer-Encoding: chunked")
    status, _, body = await first_answer(host, port, request + b'5\r\n{"id"\r\n')

    assert status == 401
    assert json.loads(body)["error"]["code"] == "unauthorized"


async def test_a_wrong_password_is_refused_before_the_body_too(served: tuple[Master, str, int]) -> None:
    _, host, port = served
    request = head("POST", "/api/keys", "Authorization: Bearer wrong", "Content-Length: 10000000")
    status, _, body = await first_answer(host, port, request + b"{")

    assert status == 401
    assert "wrong" in json.loads(body)["error"]["message"]


async def test_signed_in_callers_and_signing_in_are_unchanged(served: tuple[Master, str, int]) -> None:
    master, host, port = served
    base = f"http://{host}:{port}"
    async with httpx.AsyncClient(base_url=base, headers={"Origin": base}) as browser:
        by_password = await browser.post(
            "/api/models", json=TINY, headers={"Authorization": f"Bearer {master.password}"}
        )
        refused = await browser.delete("/api/models/tiny")
        signed_in = await browser.post("/api/session", json={"password": master.password})
        by_cookie = await browser.delete("/api/models/tiny")
        signed_out = await browser.delete("/api/session")
        listed = await browser.get("/api/models", headers={"Authorization": f"Bearer {master.password}"})

    assert by_password.status_code == 201, by_password.text
    assert refused.status_code == 401
    assert signed_in.status_code == 204
    assert by_cookie.status_code == 204, by_cookie.text
    assert signed_out.status_code == 204
    assert "tiny" not in [model["definition"]["id"] for model in listed.json()]


async def test_the_gate_never_asks_for_a_strangers_body(served: tuple[Master, str, int]) -> None:
    """Called as an ASGI app: a stranger's write is answered without ``receive`` being called once."""
    master, _, _ = served
    app = create_master_app(master.services, master.auth)
    asked: list[str] = []
    sent: list[Message] = []

    async def receive() -> Message:
        asked.append("body")
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/models",
        "raw_path": b"/api/models",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"master"), (b"content-length", b"10000000")],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8080),
    }
    with anyio.fail_after(WAIT_S):
        await app(scope, receive, send)

    assert asked == []
    assert sent[0]["status"] == 401
