"""Containers as host services through the agent's routes, against the real dockerd.

Each test starts throwaway containers from the local test image, named and labelled with its own run
id: the dockerd is shared by parallel tests, so listings are filtered to this run's containers.
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
from tests._support.docker_image import RUN_LABEL

from mirbad_agent import AgentServices, NodeRuntimes, create_app
from mirbad_protocol.agent import DOWNLOAD_LABEL, ContainerService, ContainerServiceList, FeatureFlag
from mirbad_runtime import ContainerServices, MemoryProbe

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

BASE = "http://agent/agent/v1"
# The image's entrypoint is the fake vLLM; a plain sleeper stands in for a database or a backup agent.
# The image holds the host's interpreter at its own (resolved) path.
PYTHON = str(Path(sys.executable).resolve())
# It leaves on SIGTERM: as PID 1 it would otherwise ignore it, and every stop would wait for the kill.
SLEEPER = ["-c", "import signal, sys, time; signal.signal(15, lambda *_: sys.exit(0)); time.sleep(600)"]


@pytest.fixture
def run_id() -> str:
    return f"hs-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def throwaway(docker_client: Any, image: str, run_id: str) -> Iterator[dict[str, str]]:
    """A plain service container, a model container and a download container of this run."""
    made: dict[str, str] = {}

    def run(suffix: str, labels: dict[str, str], restart: str | None = None) -> None:
        name = f"{run_id}-{suffix}"
        options: dict[str, Any] = {"restart_policy": {"Name": restart}} if restart else {}
        docker_client.containers.run(
            image,
            SLEEPER,
            entrypoint=[PYTHON],
            name=name,
            detach=True,
            labels={RUN_LABEL: run_id, **labels},
            **options,
        )
        made[suffix] = name

    try:
        run("db", {}, restart="always")
        run("model", {"mirbad.model": "qwen"})
        run("download", {DOWNLOAD_LABEL: "job-1"})
        yield made
    finally:
        for container in docker_client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_id}"}):
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)


@pytest.fixture
async def agent() -> AsyncIterator[httpx.AsyncClient]:
    services = AgentServices(
        runtimes=NodeRuntimes([]),
        memory=MemoryProbe(linux=False, fake_total_gib=16.0),
        node_name="node-1",
        version="0.0.test",
        host_containers=ContainerServices(),
    )
    transport = httpx.ASGITransport(app=create_app(services, background=False))
    async with services, httpx.AsyncClient(transport=transport, base_url=BASE, timeout=90) as client:
        yield client


async def _ours(client: httpx.AsyncClient, run_id: str) -> dict[str, ContainerService]:
    response = await client.get("/host/containers")
    assert response.status_code == 200, response.text
    listing = ContainerServiceList.from_wire(response.json())
    return {c.name: c for c in listing.containers if c.name.startswith(run_id)}


def _error(response: httpx.Response) -> tuple[int, str, str | None]:
    error = response.json()["error"]
    return response.status_code, error["code"], error.get("field")


async def test_the_listing_leaves_out_model_and_download_containers(
    agent: httpx.AsyncClient, throwaway: dict[str, str], run_id: str
) -> None:
    ours = await _ours(agent, run_id)
    assert list(ours) == [throwaway["db"]]
    db = ours[throwaway["db"]]
    assert (db.state, db.restart_policy.name, db.autostart) == ("running", "always", True)
    assert db.memory_bytes is not None
    assert db.memory_bytes > 0
    assert FeatureFlag.HOST_CONTAINERS.value in (await agent.get("/runtimes")).json()["features"]


async def test_stop_start_restart_and_the_restart_policy(
    agent: httpx.AsyncClient, throwaway: dict[str, str], run_id: str
) -> None:
    name = throwaway["db"]
    stopped = await agent.post(f"/host/containers/{name}/stop")
    assert stopped.status_code == 202
    assert stopped.json() == {"name": name, "action": "stop", "result": "ok"}
    db = (await _ours(agent, run_id))[name]
    assert (db.state, db.memory_bytes) == ("exited", None)
    assert (await agent.post(f"/host/containers/{name}/start")).status_code == 202
    assert (await _ours(agent, run_id))[name].state == "running"
    assert (await agent.post(f"/host/containers/{name}/restart")).status_code == 202
    assert (await _ours(agent, run_id))[name].state == "running"

    off = await agent.put(f"/host/containers/{name}/restart-policy", json={"name": "no"})
    assert ContainerService.from_wire(off.json()).autostart is False
    on = await agent.put(
        f"/host/containers/{name}/restart-policy", json={"name": "on-failure", "maximumRetryCount": 3}
    )
    policy = ContainerService.from_wire(on.json()).restart_policy
    assert (policy.name, policy.maximum_retry_count) == ("on-failure", 3)
    assert (await _ours(agent, run_id))[name].restart_policy == policy


async def test_mirbads_own_containers_and_bad_input_are_refused(
    agent: httpx.AsyncClient, throwaway: dict[str, str], docker_client: Any
) -> None:
    for kind in ("model", "download"):
        name = throwaway[kind]
        assert _error(await agent.post(f"/host/containers/{name}/stop")) == (404, "service_not_found", None)
        policy = await agent.put(f"/host/containers/{name}/restart-policy", json={"name": "always"})
        assert _error(policy) == (404, "service_not_found", None)
        assert docker_client.containers.get(name).status == "running"
    missing = await agent.post("/host/containers/no-such-container-here/start")
    assert _error(missing) == (404, "service_not_found", None)
    # An id prefix is not a name: Docker would resolve it, the agent does not.
    prefix = docker_client.containers.get(throwaway["db"]).id[:12]
    assert _error(await agent.post(f"/host/containers/{prefix}/stop"))[1] == "service_not_found"
    assert _error(await agent.post(f"/host/containers/{throwaway['db']}/explode"))[:2] == (
        404,
        "route_not_found",
    )
    assert _error(await agent.post("/host/containers/a%20b/stop")) == (400, "invalid_request", "name")
    bad_policy = await agent.put(f"/host/containers/{throwaway['db']}/restart-policy", json={"name": "x"})
    assert _error(bad_policy)[:2] == (400, "invalid_request")


async def test_a_node_without_docker_has_no_container_routes() -> None:
    services = AgentServices(
        runtimes=NodeRuntimes([]), memory=MemoryProbe(linux=False), node_name="n", version="0"
    )
    transport = httpx.ASGITransport(app=create_app(services, background=False))
    async with services, httpx.AsyncClient(transport=transport, base_url=BASE) as client:
        assert _error(await client.get("/host/containers"))[:2] == (404, "route_not_found")
        assert FeatureFlag.HOST_CONTAINERS.value not in (await client.get("/runtimes")).json()["features"]
