"""The container driver against a real dockerd, running the fake vLLM in the locally built test image."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from tests._support.asgi_server import free_port
from tests._support.docker_image import RUN_LABEL
from tests._support.polling import wait_for_state
from tests.fakes.fake_vllm import START_LINE

from mirbad_protocol import ContainerLaunch, GpuSelection, ModelState
from mirbad_runtime import MODEL_LABEL, ContainerDriver, ContainerDriverConfig, GpuOwner, container_name
from mirbad_runtime._container_spec import create_arguments
from mirbad_runtime._docker_calls import ensure_network
from mirbad_runtime.exceptions import ImagePullError, LaunchRejectedError, ModelNotFoundError

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

WAIT_S = 30


@pytest.fixture(scope="module")
def run_id() -> str:
    """Tags every container and network of this module, so cleanup never touches anyone else's."""
    return secrets.token_hex(3)


@pytest.fixture
def config(tmp_path: Path, docker_client: Any, run_id: str) -> Iterator[ContainerDriverConfig]:
    (tmp_path / "models").mkdir()
    (tmp_path / "cache").mkdir()
    network = f"mirbad-test-{run_id}"
    # A port the OS just handed out is unlikely to be taken; the driver skips busy ones anyway.
    start = free_port()
    yield ContainerDriverConfig(
        models_host_path=tmp_path / "models",
        cache_host_path=tmp_path / "cache",
        network=network,
        port_range_start=start,
        port_range_end=min(start + 50, 65535),
        gpus=False,
        stop_timeout_s=5,
    )
    for container in docker_client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_id}"}):
        container.remove(force=True)
    for stale in docker_client.networks.list(names=[network]):
        stale.remove()


def _spec(image: str, run_id: str, name: str, **changes: Any) -> ContainerLaunch:
    model_id = f"t{run_id}-{name}"
    fields: dict[str, Any] = {
        "model_id": model_id,
        "served_name": f"{model_id}-served",
        "runtime": "vllm",
        "image": image,
        "argv": ["--model", f"/models/{name}", "--served-model-name", f"{model_id}-served"],
        "model_path": name,
        "budget_gib": 4.5,
        "labels": {RUN_LABEL: run_id},
        "config_hash": "0123456789abcdef",
        **changes,
    }
    return ContainerLaunch(**fields)


_wait_for = partial(wait_for_state, timeout_s=WAIT_S, poll_s=0.1)


def _containers(docker_client: Any, model_id: str) -> list[Any]:
    return list(docker_client.containers.list(all=True, filters={"label": f"{MODEL_LABEL}={model_id}"}))


async def test_start_serves_until_stop_removes_the_container(
    config: ContainerDriverConfig, image: str, run_id: str, docker_client: Any
) -> None:
    spec = _spec(image, run_id, "ready")
    async with ContainerDriver(config) as driver:
        first = await driver.start(spec)
        ready = await _wait_for(driver, spec.model_id, ModelState.READY)
        upstream = await driver.upstream_url(spec.model_id)
        async with httpx.AsyncClient(trust_env=False, timeout=10) as http:
            models = (await http.get(upstream + "v1/models")).json()
        logs = await driver.logs(spec.model_id)
        with anyio.fail_after(WAIT_S):
            followed = await _lines_until(driver, spec.model_id, START_LINE)
        [container] = _containers(docker_client, spec.model_id)

        await driver.stop(spec.model_id)

        assert (await driver.status(spec.model_id)).state is ModelState.STOPPED
        assert _containers(docker_client, spec.model_id) == []
    assert first.state in (ModelState.STARTING, ModelState.READY)
    assert (ready.served_name, ready.port, ready.config_hash, ready.budget_gib) == (
        spec.served_name,
        config.port_range_start,
        spec.config_hash,
        4.5,
    )
    assert upstream == f"http://127.0.0.1:{config.port_range_start}/"
    assert [model["id"] for model in models["data"]] == [spec.served_name]
    assert any(START_LINE in line for line in logs)
    assert START_LINE in followed[-1]
    _assert_container_shape(container.attrs, spec, config)


async def _lines_until(driver: ContainerDriver, model_id: str, until: str) -> list[str]:
    lines: list[str] = []
    async with contextlib.aclosing(driver.follow_logs(model_id, tail=50)) as stream:
        async for line in stream:
            lines.append(line)
            if until in line:
                break
    return lines


def _assert_container_shape(
    attrs: dict[str, Any], spec: ContainerLaunch, config: ContainerDriverConfig
) -> None:
    host = attrs["HostConfig"]
    assert attrs["Name"] == f"/ss-{spec.model_id}"
    assert attrs["Config"]["Cmd"] == spec.argv
    assert attrs["Config"]["Labels"][RUN_LABEL] == spec.labels[RUN_LABEL]
    assert attrs["Config"]["Labels"]["mirbad.port"] == str(config.port_range_start)
    assert host["PortBindings"] == {
        "8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(config.port_range_start)}]
    }
    assert host["RestartPolicy"]["Name"] == "no"
    assert host["IpcMode"] == "host"
    assert sorted(host["Binds"]) == sorted(
        [f"{config.models_host_path}:/models:ro", f"{config.cache_host_path}:/root/.cache:rw"]
    )
    assert f"ss-{spec.model_id}" in attrs["NetworkSettings"]["Networks"][config.network]["Aliases"]


async def test_a_start_that_dies_is_failed_with_the_log_tail(
    config: ContainerDriverConfig, image: str, run_id: str, docker_client: Any
) -> None:
    spec = _spec(image, run_id, "dies", env={"FAKE_VLLM_FAIL": "CUDA out of memory"})
    async with ContainerDriver(config) as driver:
        await driver.start(spec)
        failed = await _wait_for(driver, spec.model_id, ModelState.FAILED)
        # dockerd copies a container's output to its log asynchronously, so on a loaded machine the
        # first Failed read can come before the last lines are in; state is read afresh each time.
        with anyio.move_on_after(2 * WAIT_S):
            while not (failed.error or "").endswith("CUDA out of memory"):
                await anyio.sleep(0.2)
                failed = await driver.status(spec.model_id)
        await driver.stop(spec.model_id)
        remaining = _containers(docker_client, spec.model_id)

    assert failed.error is not None
    lines = failed.error.splitlines()
    assert lines[-1] == "ERROR fake-vllm: CUDA out of memory", failed.error
    assert lines[0] == "the container exited with code 1"
    assert len(lines) == 1 + 20
    assert "step 30/30" in failed.error
    assert "step 11/30" not in failed.error
    assert remaining == []


async def test_a_new_driver_adopts_the_running_container(
    config: ContainerDriverConfig, image: str, run_id: str, docker_client: Any
) -> None:
    spec = _spec(image, run_id, "adopted")
    async with ContainerDriver(config) as first_agent:
        started = await first_agent.start(spec)
        await _wait_for(first_agent, spec.model_id, ModelState.READY)

    async with ContainerDriver(config) as restarted_agent:
        adopted = {status.id: status for status in await restarted_agent.adopt()}
        again = await restarted_agent.start(spec)
        count = len(_containers(docker_client, spec.model_id))
        await restarted_agent.stop(spec.model_id)

    assert adopted[spec.model_id].state is ModelState.READY
    assert adopted[spec.model_id].served_name == spec.served_name
    assert (again.state, again.port) == (ModelState.READY, started.port)
    assert count == 1


async def test_a_new_driver_reads_the_gpus_back_from_the_device_request(
    config: ContainerDriverConfig, image: str, run_id: str, docker_client: Any
) -> None:
    # Created with the exact arguments a GPU node's driver sends, never started: this dockerd has no
    # NVIDIA runtime, but it keeps the device request, and that is what an agent restart reads back.
    spec = _spec(image, run_id, "ongpu", gpus=GpuSelection(mode="uuids", uuids=["GPU-1", "GPU-3"]))
    ensure_network(docker_client, config.network)
    docker_client.containers.create(
        **create_arguments(spec, replace(config, gpus=True), config.port_range_start)
    )

    async with ContainerDriver(config) as restarted_agent:
        adopted = {status.id: status for status in await restarted_agent.adopt()}
        await restarted_agent.stop(spec.model_id)

    assert adopted[spec.model_id].gpus == spec.gpus
    assert _containers(docker_client, spec.model_id) == []


async def test_an_agent_on_another_network_neither_adopts_nor_stops_the_model(
    config: ContainerDriverConfig, image: str, run_id: str, docker_client: Any
) -> None:
    # Two agents on one dockerd (parallel test runs, a second fleet): each owns its own network's models.
    spec = _spec(image, run_id, "owned")
    other = replace(config, network=f"{config.network}-other")
    async with ContainerDriver(config) as owner:
        await owner.start(spec)
        await _wait_for(owner, spec.model_id, ModelState.READY)
        async with ContainerDriver(other) as stranger:
            adopted = [status.id for status in await stranger.adopt()]
            seen = await stranger.status(spec.model_id)
            await stranger.stop(spec.model_id)
        still = await owner.status(spec.model_id)
        await owner.stop(spec.model_id)
    for stale in docker_client.networks.list(names=[other.network]):
        stale.remove()

    assert spec.model_id not in adopted
    assert seen.state is ModelState.STOPPED
    assert still.state is ModelState.READY


async def test_a_foreign_container_on_the_range_start_pushes_the_port_up(
    config: ContainerDriverConfig, image: str, run_id: str, docker_client: Any
) -> None:
    start = config.port_range_start
    docker_client.containers.run(
        image,
        ["--model", "foreign"],
        detach=True,
        name=f"foreign-{run_id}",
        labels={RUN_LABEL: run_id},
        ports={"8000/tcp": ("127.0.0.1", start)},
    )
    spec = _spec(image, run_id, "pushed")
    async with ContainerDriver(config) as driver:
        status = await driver.start(spec)
        # Stopping before the fake installs its SIGTERM handler would cost the whole stop timeout.
        await _wait_for(driver, spec.model_id, ModelState.READY)
        await driver.stop(spec.model_id)

    assert status.port is not None
    assert status.port > start


async def test_a_container_docker_cannot_start_is_rejected_and_removed(
    config: ContainerDriverConfig, image: str, run_id: str, docker_client: Any
) -> None:
    spec = _spec(image, run_id, "noexec")
    async with ContainerDriver(replace(config, entrypoint=("/no/such/program",))) as driver:
        with pytest.raises(LaunchRejectedError, match="could not start"):
            await driver.start(spec)

    assert _containers(docker_client, spec.model_id) == []


async def test_a_missing_image_that_cannot_be_pulled_names_the_image(
    config: ContainerDriverConfig, run_id: str
) -> None:
    # Nothing listens on port 9 of loopback, so the pull fails at once and offline.
    image = f"127.0.0.1:9/mirbad-tests/missing-{run_id}:1"
    async with ContainerDriver(config) as driver:
        with pytest.raises(ImagePullError) as raised:
            await driver.start(_spec(image, run_id, "nopull"))

    assert raised.value.image == image
    assert image in str(raised.value)


async def test_a_model_without_container_is_stopped_and_has_no_logs(config: ContainerDriverConfig) -> None:
    async with ContainerDriver(config) as driver:
        status = await driver.status("never-started")
        await driver.stop("never-started")
        with pytest.raises(ModelNotFoundError):
            await driver.logs("never-started")
        with pytest.raises(ModelNotFoundError):
            await driver.upstream_url("never-started")

    assert status.state is ModelState.STOPPED


async def test_a_running_container_reports_its_memory_usage(
    config: ContainerDriverConfig, image: str, run_id: str, docker_client: Any
) -> None:
    spec = _spec(image, run_id, "memory")
    async with ContainerDriver(config) as driver:
        await driver.start(spec)
        await _wait_for(driver, spec.model_id, ModelState.READY)
        measured = await driver.memory_bytes(spec.model_id)
        owner = await driver.gpu_owner(spec.model_id)
        container_id = docker_client.containers.get(container_name(spec.model_id)).id
        await driver.stop(spec.model_id)
        after = await driver.memory_bytes(spec.model_id)
        owner_after = await driver.gpu_owner(spec.model_id)

    # The fake vLLM is a Python process: a few MiB at least.
    assert measured is not None
    assert measured > 1024**2
    assert after is None
    # Its GPU processes are found by the full container id their cgroups name.
    assert (owner, owner_after) == (GpuOwner(container_id=container_id), None)
