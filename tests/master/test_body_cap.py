"""The body cap outside ``/v1`` (issue 24, item 15): 413 in the admin envelope, announced or streamed.

Over a real socket to the master's own server, with the cap set low (``max_api_body_bytes``): a body
whose ``Content-Length`` is over the cap is refused before any of it is sent, a chunked one the moment
it passes the cap; a body under the cap is served, and ``/v1`` keeps the router's own cap.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest
from tests._support.master_server import serve_master_server
from tests.master._stack import Master, running_master

from mirbad_master._app import create_master_app, v1_first
from mirbad_master._settings import MasterSettings

pytestmark = pytest.mark.anyio

WAIT_S = 20
CAP = 4096


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Master, str]]:
    async with running_master(tmp_path, max_api_body_bytes=CAP) as master:
        app = v1_first(create_master_app(master.services, master.auth))
        async with serve_master_server(app) as (host, port):
            yield master, f"http://{host}:{port}"


async def answer_to(base: str, request: bytes) -> tuple[int, bytes]:
    """Send ``request`` (maybe only part of what it announces) and read the whole answer."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    received = b""
    with anyio.fail_after(WAIT_S):
        async with await anyio.connect_tcp(host, int(port)) as sock:
            await sock.send(request)
            while True:
                head, found, body = received.partition(b"\r\n\r\n")
                if found:
                    lines = head.decode("latin-1").split("\r\n")
                    length = next(
                        int(line.split(":")[1]) for line in lines if line.lower().startswith("content-length")
                    )
                    if len(body) >= length:
                        return int(lines[0].split()[1]), body
                received += await sock.receive()


def head(password: str, *lines: str) -> bytes:
    fixed = ["POST /api/keys HTTP/1.1", "Host: master", f"Authorization: Bearer {password}"]
    return ("\r\n".join([*fixed, "Content-Type: application/json", *lines]) + "\r\n\r\n").encode()


def test_the_default_is_the_usual_servers_thirty_million_bytes() -> None:
    assert MasterSettings().max_api_body_bytes == 30_000_000


async def test_an_announced_body_over_the_cap_is_refused_before_it_is_sent(
    served: tuple[Master, str],
) -> None:
    master, base = served
    status, body = await answer_to(base, head(master.password, f"Content-Length: {CAP + 1}"))

    assert status == 413
    error = json.loads(body)["error"]
    assert error["code"] == "request_too_large"
    assert str(CAP) in error["message"]


async def test_a_chunked_body_is_refused_when_it_passes_the_cap(served: tuple[Master, str]) -> None:
    master, base = served
    chunk = b'{"name": "' + b"a" * 1000
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(5))  # over CAP, never ended

    status, body = await answer_to(base, head(master.password, "Transfer-Encoding: chunked") + chunks)

    assert status == 413
    assert json.loads(body)["error"]["code"] == "request_too_large"


async def test_a_body_under_the_cap_is_served_and_v1_keeps_its_own_cap(served: tuple[Master, str]) -> None:
    master, base = served
    async with httpx.AsyncClient(base_url=base) as http:
        created = await http.post(
            "/api/keys", json={"name": "ci"}, headers={"Authorization": f"Bearer {master.password}"}
        )
        big_v1 = await http.post("/v1/chat/completions", json={"model": "x", "padding": "a" * (2 * CAP)})

    assert created.status_code == 201, created.text
    assert big_v1.status_code != 413
