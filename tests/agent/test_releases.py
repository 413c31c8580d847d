"""The agent's release routes: llama-server builds, vLLM images and image pulls (through the real dockerd).

Pulls go to the stand-in registry on loopback (tests/_support/registry.py), whose layer download can
be held halfway: a pull is seen in progress and cancelled without depending on how fast anything is.
"""

from __future__ import annotations

import contextlib
import stat
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import docker
import httpx
import pytest
from tests._support.registry import StandInRegistry, running_registry

from mirbad_agent import AgentServices, NodeRuntimes, create_app
from mirbad_protocol.agent import FeatureFlag
from mirbad_protocol.releases import ImageList, ImagePull, LlamaServerBuildList
from mirbad_runtime import CatalogedExecutable, ExecutableCatalog, MemoryProbe, NodeImages, sha256_of_file

pytestmark = pytest.mark.anyio
BASE = "http://agent/agent/v1"
WAIT_S = 60.0


def _stand_in_llama_server(path: Path, output: str, code: int = 0) -> Path:
    path.write_text(f"#!/bin/sh\ncat >&2 <<'EOF'\n{output}\nEOF\nexit {code}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _entry(path: Path, version: str) -> CatalogedExecutable:
    return CatalogedExecutable(name="llama-server", version=version, path=path, sha256=sha256_of_file(path))


@contextlib.asynccontextmanager
async def _agent(
    *, catalog: ExecutableCatalog | None = None, images: NodeImages | None = None
) -> AsyncIterator[tuple[httpx.AsyncClient, AgentServices]]:
    services = AgentServices(
        runtimes=NodeRuntimes([]),
        memory=MemoryProbe(linux=False, fake_total_gib=16.0),
        node_name="node-1",
        version="0.0.test",
        catalog=catalog,
        images=images,
    )
    transport = httpx.ASGITransport(app=create_app(services, background=False))
    async with services, httpx.AsyncClient(transport=transport, base_url=BASE, timeout=WAIT_S) as client:
        if images is None:
            yield client, services
            return
        async with anyio.create_task_group() as group:
            await group.start(images.run)
            yield client, services
            group.cancel_scope.cancel()


def _error(response: httpx.Response) -> tuple[int, str, str | None]:
    error = response.json()["error"]
    return response.status_code, error["code"], error.get("field")


async def test_each_catalogued_llama_server_with_what_it_reports(tmp_path: Path) -> None:
    built_with = "built with cc (Debian 12.2.0) for x86_64-linux-gnu"
    good = _stand_in_llama_server(tmp_path / "llama-server", f"version: 6123 (a1b2c3d)\n{built_with}")
    broken = _stand_in_llama_server(tmp_path / "old", "error while loading libllama.so", code=127)
    other = _stand_in_llama_server(tmp_path / "mlx", "version: 1")
    gone = tmp_path / "gone"
    gone.write_text("")
    entries = [_entry(good, "b6123"), _entry(broken, "b5000"), _entry(gone, "b1")]
    entries.append(CatalogedExecutable(name="mlx_lm.server", version="1", path=other, sha256="0" * 64))
    gone.unlink()
    async with _agent(catalog=ExecutableCatalog(entries)) as (client, services):
        builds = LlamaServerBuildList.from_wire((await client.get("/releases/llama-server")).json()).builds
        assert FeatureFlag.LLAMA_SERVER_BUILDS in services.info().features
        assert FeatureFlag.IMAGES_PULL not in services.info().features
    by_version = {build.version: build for build in builds}
    paths = {version: build.path for version, build in by_version.items()}
    assert paths == {"b6123": str(good), "b5000": str(broken), "b1": str(gone)}
    builds = [by_version["b6123"], by_version["b5000"], by_version["b1"]]
    assert builds[0].reported == "6123 (a1b2c3d)"
    assert builds[0].built_with == built_with
    assert builds[0].error is None
    assert builds[0].sha256 == sha256_of_file(good)
    assert builds[1].reported is None
    assert builds[1].error == "--version exited 127: error while loading libllama.so"
    assert builds[2].error is not None
    assert builds[2].error.startswith("cannot run it")


async def test_a_node_without_a_catalogue_or_docker() -> None:
    async with _agent() as (client, _):
        assert (await client.get("/releases/llama-server")).json() == {}
        for answer in (await client.get("/images"), await client.post("/images/pulls", json={"image": "a"})):
            assert _error(answer) == (404, "route_not_found", None)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"image": "Vllm/Upper:case"}, (422, "invalid_image_reference", "image")),
        ({"image": "vllm//double"}, (422, "invalid_image_reference", "image")),
        ({"image": "vllm:bad tag"}, (422, "invalid_image_reference", "image")),
        ({"image": ""}, (422, "invalid_image_reference", "image")),
        ({"image": 3}, (400, "invalid_request", "image")),
        ({}, (400, "invalid_request", "image")),
        ({"image": "vllm/vllm-openai", "tag": "x"}, (400, "invalid_request", "tag")),
    ],
)
async def test_a_pull_of_a_reference_that_does_not_parse_is_refused(
    body: dict[str, Any], expected: tuple[int, str, str | None]
) -> None:
    # An endpoint nothing listens on: the request is refused before Docker would be asked.
    async with _agent(images=NodeImages("tcp://127.0.0.1:9", timeout_s=2)) as (client, _):
        assert _error(await client.post("/images/pulls", json=body)) == expected
        assert _error(await client.get("/images/pulls/pull-nope")) == (404, "pull_not_found", None)


# ------------------------------------------------------------------ through the real dockerd


@pytest.fixture
def registry(docker_client: Any) -> Iterator[StandInRegistry]:
    repository = f"mirbad-pull-test-vllm-{uuid.uuid4().hex[:8]}"
    with running_registry(repository, "v1") as served:
        try:
            yield served
        finally:
            with contextlib.suppress(docker.errors.ImageNotFound):
                docker_client.images.remove(served.reference, force=True)


async def _until(client: httpx.AsyncClient, pull_id: str, done: Callable[[ImagePull], bool]) -> ImagePull:
    with anyio.fail_after(WAIT_S):
        while True:
            job = ImagePull.from_wire((await client.get(f"/images/pulls/{pull_id}")).json())
            if done(job):
                return job
            await anyio.sleep(0.1)


@pytest.mark.docker
async def test_a_pull_through_the_stand_in_registry_with_its_progress(
    registry: StandInRegistry, docker_client: Any
) -> None:
    registry.hold()
    async with _agent(images=NodeImages()) as (client, services):
        assert FeatureFlag.IMAGES_PULL in services.info().features
        started = await client.post("/images/pulls", json={"image": registry.reference})
        assert started.status_code == 202, started.text
        pull_id = ImagePull.from_wire(started.json()).id
        halfway = await _until(client, pull_id, lambda job: job.current_bytes > 0)
        assert halfway.state == "running"
        assert halfway.fraction is not None
        assert 0 < halfway.fraction < 1
        assert halfway.total_bytes == len(registry.image.layer)
        again = await client.post("/images/pulls", json={"image": registry.reference})
        assert _error(again) == (409, "pull_conflict", None)
        other_tag = registry.reference.removesuffix(":v1") + ":latest"
        other = await client.post("/images/pulls", json={"image": other_tag})
        assert other.status_code == 202  # another image (the registry lacks it: it fails on its own)
        registry.release()
        done = await _until(client, pull_id, lambda job: job.state != "running")
        assert (done.state, done.error, done.fraction) == ("completed", None, 1.0), done
        assert done.status is not None
        assert "Downloaded newer image" in done.status
        assert done.layers
        assert done.layers[0].status == "Pull complete"
        images = ImageList.from_wire((await client.get("/images")).json()).images
        listed = next(image for image in images if registry.reference in image.tags)
        assert listed.size_bytes > 0
        assert listed.created is not None
        assert not listed.in_use
        pulls = (await client.get("/images/pulls")).json()["pulls"]
        assert [p["id"] for p in pulls] == [other.json()["id"], pull_id]  # newest first
    assert docker_client.images.get(registry.reference).id == listed.id


@pytest.mark.docker
async def test_a_cancelled_pull_stops_and_the_image_can_be_pulled_again(registry: StandInRegistry) -> None:
    registry.hold()
    async with _agent(images=NodeImages()) as (client, _):
        pull_id = (await client.post("/images/pulls", json={"image": registry.reference})).json()["id"]
        await _until(client, pull_id, lambda job: job.current_bytes > 0)
        cancelled = ImagePull.from_wire((await client.post(f"/images/pulls/{pull_id}/cancel")).json())
        assert (cancelled.state, cancelled.error) == ("cancelled", "cancelled by request")
        assert (await client.get(f"/images/pulls/{pull_id}")).json()["state"] == "cancelled"
        # The same image may be pulled again at once: the cancelled job no longer holds it.
        registry.release()
        second = (await client.post("/images/pulls", json={"image": registry.reference})).json()["id"]
        assert (await _until(client, second, lambda job: job.state != "running")).state == "completed"


@pytest.mark.docker
async def test_a_pull_of_an_image_the_registry_lacks_fails_with_dockers_reason(
    registry: StandInRegistry,
) -> None:
    missing = registry.reference.replace(":v1", ":v2")
    async with _agent(images=NodeImages()) as (client, _):
        pull_id = (await client.post("/images/pulls", json={"image": missing})).json()["id"]
        failed = await _until(client, pull_id, lambda job: job.state != "running")
    assert failed.state == "failed"
    assert failed.error is not None
    assert "v2" in failed.error


@pytest.mark.docker
async def test_a_pull_docker_sends_nothing_for_fails_at_the_stall_timeout(registry: StandInRegistry) -> None:
    registry.hold()  # dockerd waits on the layer's second half, and so sends no progress
    async with _agent(images=NodeImages(stall_timeout_s=1)) as (client, _):
        pull_id = (await client.post("/images/pulls", json={"image": registry.reference})).json()["id"]
        failed = await _until(client, pull_id, lambda job: job.state != "running")
    assert (failed.state, failed.error) == (
        "failed",
        f"could not pull image {registry.reference}: Docker sent no progress for 1 s",
    )


@pytest.mark.docker
async def test_a_bare_name_and_its_latest_tag_are_one_pull(docker_client: Any) -> None:
    with running_registry(f"mirbad-pull-test-vllm-{uuid.uuid4().hex[:8]}", "latest") as served:
        served.hold()
        bare = served.reference.removesuffix(":latest")
        try:
            async with _agent(images=NodeImages()) as (client, _):
                pull_id = (await client.post("/images/pulls", json={"image": bare})).json()["id"]
                await _until(client, pull_id, lambda job: job.current_bytes > 0)
                again = await client.post("/images/pulls", json={"image": served.reference})
                assert _error(again) == (409, "pull_conflict", None)
                served.release()
                assert (
                    await _until(client, pull_id, lambda job: job.state != "running")
                ).state == "completed"
        finally:
            with contextlib.suppress(docker.errors.ImageNotFound):
                docker_client.images.remove(served.reference, force=True)
