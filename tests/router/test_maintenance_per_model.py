"""Maintenance of single models (a job holding one node): 503 once the key is checked, others serve.

The key check comes first even then (issue 31, item 2): the held-model gate reads the body, and a
caller without a key must not make the router read one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import anyio
import httpx
import openai
import pytest
from tests.router._stack import KEY, WAIT_S, Stack, chat, router_stack

pytestmark = pytest.mark.anyio


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    async with router_stack() as stack:
        stack.add_model("elsewhere")
        yield stack


async def test_a_held_model_is_refused_after_the_key_check(stack: Stack) -> None:
    stack.gate.hold("tiny", "a benchmark of 'tiny' is running on node 'gpu-1'", 42)
    async with httpx.AsyncClient(base_url=stack.base_url) as http:
        keyless = await http.post("/v1/chat/completions", json={"model": "TINY", "messages": []})
        other_keyless = await http.post("/v1/chat/completions", json={"model": "elsewhere", "messages": []})
    async with stack.client() as client:
        with pytest.raises(openai.InternalServerError) as held:
            await chat(client)
        served = await chat(client, model="elsewhere")
        listed = [model.id async for model in client.models.list()]
        stack.gate.release("tiny")
        after = await chat(client)

    assert keyless.status_code == 401
    assert other_keyless.status_code == 401
    assert held.value.code == "maintenance"
    assert "benchmark of 'tiny'" in held.value.message
    assert served.choices[0].message.content
    assert sorted(listed) == ["elsewhere", "tiny"]
    assert after.choices[0].message.content


async def test_while_a_model_is_held_other_requests_keep_their_refusals_in_order(stack: Stack) -> None:
    stack.gate.hold("tiny", "held", 5)
    async with httpx.AsyncClient(base_url=stack.base_url) as http:
        unsafe = await http.post("/v1/%2e%2e/props", json={"model": "elsewhere"})
        no_model = await http.post(
            "/v1/chat/completions", json={"messages": []}, headers={"Authorization": f"Bearer {KEY}"}
        )
        json_type = {"content-type": "application/json"}
        broken = await http.post("/v1/chat/completions", content=b"{nope", headers=json_type)

    assert unsafe.status_code == 401  # the key check still comes before the path check
    assert broken.status_code == 401  # and before the body's own refusals
    assert no_model.status_code == 400
    assert no_model.json()["error"]["code"] == "missing_required_parameter"


async def test_a_keyless_request_for_a_held_model_is_refused_before_its_body_is_read(stack: Stack) -> None:
    """Headers announcing 10 MB and a few bytes of them: the 401 comes without the rest being sent."""
    stack.gate.hold("tiny", "held", 5)
    address = urlsplit(stack.base_url)
    assert address.hostname is not None
    assert address.port is not None
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: router\r\nContent-Type: application/json\r\n"
        "Content-Length: 10000000\r\n\r\n"
    )
    answer = b""
    with anyio.fail_after(WAIT_S):
        async with await anyio.connect_tcp(address.hostname, address.port) as sock:
            await sock.send(head.encode() + b'{"model": "tiny", "messages": [')
            while b"\r\n\r\n" not in answer:
                answer += await sock.receive()

    assert answer.startswith(b"HTTP/1.1 401 ")
