"""An image is *in use* only by this agent's model containers, not another fleet's on the same dockerd.

Each agent owns the model containers on its own Docker network (the container driver lists and adopts
only those); the Releases page's "in use" column counts the same containers. Real dockerd; every
network and container of the test carries its run id.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from typing import Any

import anyio
import docker
import pytest
from tests._support.docker_image import RUN_LABEL

from mirbad_runtime import MODEL_LABEL, NodeImages

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

WAIT_S = 60.0


@pytest.fixture
def run_id(docker_client: Any) -> Iterator[str]:
    run_id = f"images-{secrets.token_hex(4)}"
    yield run_id
    for container in docker_client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_id}"}):
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)
    for network in docker_client.networks.list(filters={"label": f"{RUN_LABEL}={run_id}"}):
        with contextlib.suppress(docker.errors.NotFound):
            network.remove()


def model_container(client: Any, image: str, run_id: str, network: str) -> None:
    """A model container of ``network``'s fleet (created, never started: a stopped model counts too)."""
    client.networks.create(network, labels={RUN_LABEL: run_id})
    client.containers.create(
        image, labels={MODEL_LABEL: "m", RUN_LABEL: run_id}, network=network, name=f"{network}-m"
    )


async def in_use(images: NodeImages, image_id: str) -> bool | None:
    with anyio.fail_after(WAIT_S):
        listed = await images.images()
    return next((entry.in_use for entry in listed if entry.id == image_id), None)


async def test_only_the_agents_own_model_containers_put_an_image_in_use(
    docker_client: Any, image: str, run_id: str
) -> None:
    mine, theirs = f"{run_id}-mine", f"{run_id}-theirs"
    image_id = docker_client.images.get(image).id
    images = NodeImages(timeout_s=WAIT_S, network=mine)
    try:
        model_container(docker_client, image, run_id, theirs)
        # The test image is a vLLM image by its name, so it is listed whether in use or not.
        only_theirs = await in_use(images, image_id)
        model_container(docker_client, image, run_id, mine)
        with_mine = await in_use(images, image_id)
    finally:
        await images.aclose()

    assert only_theirs is False
    assert with_mine is True
