"""The agent's fence in its app: commands below the highest epoch refused, reads always allowed.

The agent app with a fake driver, called in-process; the fence file is real (tests/agent/
test_fence_real.py drives a real ``mirbad-agent serve`` process over mutual TLS).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mirbad_agent import (
    FENCE_FILE_NAME,
    AgentServices,
    ComposedDriver,
    EpochFence,
    NodeRuntimes,
    create_app,
    is_command,
)
from mirbad_agent.exceptions import FencedError
from mirbad_protocol.agent import (
    MASTER_EPOCH_HEADER,
    MASTER_ID_HEADER,
    ROUTE_FENCE,
    ROUTE_GGUF_INSPECT,
    ROUTE_MEMORY,
    ROUTE_MODEL,
    ROUTE_MODEL_FILES,
    ROUTE_MODEL_STOP,
    ROUTE_MODELS,
    ROUTE_RUNTIMES,
    MasterFence,
    ProcessRuntimeInfo,
    agent_path,
    fence_headers,
    proxy_path,
)
from mirbad_runtime import MemoryProbe
from mirbad_runtime.testing import FakeDriver

pytestmark = pytest.mark.anyio

STOP = agent_path(ROUTE_MODEL_STOP, model_id="tiny")
OLD = fence_headers(MasterFence(instance_id="m-old", epoch=3))
NEW = fence_headers(MasterFence(instance_id="m-new", epoch=4))


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with _Agent(tmp_path) as client:
        yield client


class _Agent:
    """The agent app over ``state`` (its fence file), with a client to it."""

    def __init__(self, state: Path) -> None:
        driver = FakeDriver(port_range_start=8500)
        self.services = AgentServices(
            runtimes=NodeRuntimes([ComposedDriver(driver, (ProcessRuntimeInfo(runtime="llamacpp"),))]),
            memory=MemoryProbe(linux=False, fake_total_gib=16.0),
            node_name="node-1",
            version="0.0.test",
            fence=EpochFence(state),
        )
        transport = httpx.ASGITransport(app=create_app(self.services, background=False))
        self.client = httpx.AsyncClient(transport=transport, base_url="https://node-1")

    async def __aenter__(self) -> httpx.AsyncClient:
        return self.client

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()
        await self.services.aclose()


def _refusal(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    return error


async def test_the_first_epoch_is_taken_and_an_older_one_refused_naming_both(
    agent: httpx.AsyncClient, tmp_path: Path
) -> None:
    assert (await agent.post(STOP, headers=OLD)).status_code == 200
    assert json.loads((tmp_path / FENCE_FILE_NAME).read_text()) == {"instanceId": "m-old", "epoch": 3}
    assert (await agent.post(STOP, headers=NEW)).status_code == 200

    refused = await agent.post(STOP, headers=OLD)

    assert refused.status_code == 409
    error = _refusal(refused)
    assert (error["code"], error["epoch"], error["requestEpoch"]) == ("fenced", 4, 3)
    assert "epoch 4" in error["message"]
    assert "epoch 3" in error["message"]
    assert json.loads((tmp_path / FENCE_FILE_NAME).read_text()) == {"instanceId": "m-new", "epoch": 4}


async def test_reads_stay_allowed_for_a_fenced_master(agent: httpx.AsyncClient) -> None:
    assert (await agent.post(STOP, headers=NEW)).status_code == 200

    for route in (ROUTE_RUNTIMES, ROUTE_MODELS, ROUTE_MEMORY, ROUTE_MODEL):
        path = agent_path(route, model_id="tiny")
        assert (await agent.get(path, headers=OLD)).status_code == 200, path
    files = await agent.post(agent_path(ROUTE_MODEL_FILES), json={"paths": ["x.gguf"]}, headers=OLD)
    assert files.status_code == 200


async def test_another_master_at_the_same_epoch_is_fenced(agent: httpx.AsyncClient) -> None:
    assert (await agent.post(STOP, headers=NEW)).status_code == 200
    twin = fence_headers(MasterFence(instance_id="m-twin", epoch=4))

    refused = await agent.post(STOP, headers=twin)

    assert refused.status_code == 409
    assert _refusal(refused)["code"] == "fenced"
    assert "m-new" in _refusal(refused)["message"]


async def test_a_command_without_a_fence_passes_only_until_a_master_named_one(
    agent: httpx.AsyncClient,
) -> None:
    assert (await agent.post(STOP)).status_code == 200
    assert (await agent.post(STOP, headers=OLD)).status_code == 200

    refused = await agent.post(STOP)

    assert refused.status_code == 409
    error = _refusal(refused)
    assert (error["code"], error["epoch"], error.get("requestEpoch")) == ("fenced", 3, None)


@pytest.mark.parametrize(
    ("headers", "field"),
    [
        ({MASTER_ID_HEADER: "m-1"}, MASTER_EPOCH_HEADER),
        ({MASTER_EPOCH_HEADER: "1"}, MASTER_ID_HEADER),
        ({MASTER_ID_HEADER: "m-1", MASTER_EPOCH_HEADER: "-1"}, MASTER_EPOCH_HEADER),
        ({MASTER_ID_HEADER: "m-1", MASTER_EPOCH_HEADER: "one"}, MASTER_EPOCH_HEADER),
    ],
)
async def test_a_malformed_fence_is_400_naming_the_header(
    agent: httpx.AsyncClient, headers: dict[str, str], field: str
) -> None:
    refused = await agent.post(STOP, headers=headers)

    assert refused.status_code == 400
    assert (_refusal(refused)["code"], _refusal(refused)["field"]) == ("invalid_request", field)


async def test_the_fence_outlives_the_agent(tmp_path: Path) -> None:
    async with _Agent(tmp_path) as first:
        assert (await first.post(STOP, headers=NEW)).status_code == 200
    async with _Agent(tmp_path) as second:
        refused = await second.post(STOP, headers=OLD)
        assert (refused.status_code, _refusal(refused)["epoch"]) == (409, 4)
        assert (await second.post(STOP, headers=NEW)).status_code == 200


async def test_an_unreadable_fence_file_refuses_commands_and_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / FENCE_FILE_NAME).write_text("{not json")
    async with _Agent(tmp_path) as agent:
        refused = await agent.post(STOP, headers=NEW)
        assert (refused.status_code, _refusal(refused)["code"]) == (507, "insufficient_storage")
        assert (await agent.get("/agent/v1/models", headers=NEW)).status_code == 200
    assert (tmp_path / FENCE_FILE_NAME).read_text() == "{not json"


@pytest.mark.parametrize(
    ("method", "path", "command"),
    [
        ("GET", "/agent/v1/models", False),
        ("HEAD", "/agent/v1/models", False),
        ("POST", agent_path(ROUTE_GGUF_INSPECT), False),
        ("POST", agent_path(ROUTE_MODEL_FILES), False),
        ("POST", proxy_path("tiny", "v1/chat/completions"), False),
        ("POST", STOP, True),
        ("POST", "/agent/v1/downloads", True),
        ("DELETE", "/agent/v1/downloads/d-1", True),
        ("PUT", "/agent/v1/host/backup-mount", True),
        ("PATCH", "/agent/v1/host/whitelist/x", True),
    ],
)
def test_commands_are_the_changes_and_the_reads_by_post_are_not(
    method: str, path: str, command: bool
) -> None:
    assert is_command(method, path) is command


async def test_the_fence_route_reads_the_master_followed_and_a_post_claims_the_node(
    agent: httpx.AsyncClient,
) -> None:
    path = agent_path(ROUTE_FENCE)
    assert (await agent.get(path)).json() == {}

    claimed = await agent.post(path, headers=NEW)
    refused = await agent.post(path, headers=OLD)
    read = await agent.get(path, headers=OLD)

    assert claimed.json() == {"instanceId": "m-new", "epoch": 4}
    assert (refused.status_code, _refusal(refused)["code"]) == (409, "fenced")
    assert read.json() == {"instanceId": "m-new", "epoch": 4}


_CLAIMS = st.lists(
    st.none() | st.builds(MasterFence, instance_id=st.sampled_from(["m-a", "m-b"]), epoch=st.integers(0, 4)),
    max_size=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(claims=_CLAIMS)
def test_the_fence_only_rises_and_admits_exactly_the_master_at_or_above_it(
    tmp_path_factory: pytest.TempPathFactory, claims: list[MasterFence | None]
) -> None:
    folder = tmp_path_factory.mktemp("fence")

    async def run() -> None:
        fence = EpochFence(folder)
        held: MasterFence | None = None
        for claim in claims:
            if held is None:
                admitted = True
            elif claim is None:
                admitted = False
            else:
                admitted = claim.epoch > held.epoch or claim == held
            if admitted:
                await fence.admit(claim)
                held = claim if claim is not None else held
            else:
                with pytest.raises(FencedError) as refused:
                    await fence.admit(claim)
                assert held is not None
                assert refused.value.epoch == held.epoch
                assert refused.value.request_epoch == (claim.epoch if claim is not None else None)
            assert await fence.current() == held
        # What a restarted agent reads back is what the last one held.
        assert await EpochFence(folder).current() == held

    anyio.run(run)
