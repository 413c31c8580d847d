"""Maintenance of single models (a job holding one node): 503 before the key check, others serve."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import openai
import pytest
from tests.router._stack import KEY, Stack, chat, router_stack

pytestmark = pytest.mark.anyio


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    async with router_stack() as stack:
        stack.add_model("elsewhere")
        yield stack


async def test_a_held_model_is_refused_before_the_key_check(stack: Stack) -> None:
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

    assert keyless.status_code == 503
    assert keyless.headers["retry-after"] == "42"
    assert keyless.json()["error"]["code"] == "maintenance"
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
