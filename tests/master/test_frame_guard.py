"""Clickjacking: every answer of the master's app but ``/v1`` forbids being framed (issue 31 item 15).

Requests go through httpx to the real master app as ``mirbad up`` serves it (``v1_first`` in front);
tests/browser/test_frame_guard.py shows Chromium refusing to frame the portal.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from tests.master._stack import Master, running_master

from mirbad_master._frame_guard import FRAME_HEADERS, FrameGuard

pytestmark = pytest.mark.anyio


@pytest.fixture
async def master(tmp_path: Path) -> AsyncIterator[Master]:
    async with running_master(tmp_path) as running:
        yield running


def framing_refused(answer: httpx.Response) -> bool:
    return answer.headers.get("x-frame-options") == "DENY" and "frame-ancestors 'none'" in (
        answer.headers.get_list("content-security-policy")
    )


async def test_every_answer_but_v1_forbids_frames(master: Master) -> None:
    answers = [
        await master.anonymous.get("/"),
        await master.anonymous.get("/healthz"),
        await master.anonymous.get("/metrics"),
        await master.anonymous.get("/api/docs"),
        await master.anonymous.get("/api/models"),  # 401
        await master.admin.get("/api/models"),
        await master.admin.get("/api/models/nothing"),  # 404 in the envelope
        await master.anonymous.get("/nowhere"),  # 404 of the app
        await master.anonymous.post("/api/models", json={}, headers={"Origin": "http://elsewhere"}),
    ]
    for answer in answers:
        assert framing_refused(answer), (answer.request.url, answer.status_code, answer.headers)
    models = await master.admin.get("/v1/models")
    assert "x-frame-options" not in models.headers  # /v1 answers machines; it skips the app's layers


async def test_a_policy_of_the_response_is_kept_beside_ours() -> None:
    async def page(_: object) -> Response:
        return Response("<p>", headers={"Content-Security-Policy": "default-src 'self'"})

    async def stream(_: object) -> Response:
        return StreamingResponse(iter([b"a", b"b"]))

    app = FrameGuard(Starlette(routes=[Route("/page", page), Route("/stream", stream)]))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        own = await client.get("/page")
        streamed = await client.get("/stream")
    assert own.headers.get_list("content-security-policy") == ["default-src 'self'", "frame-ancestors 'none'"]
    assert framing_refused(streamed)
    assert streamed.text == "ab"
    assert dict(FRAME_HEADERS)["X-Frame-Options"] == "DENY"
