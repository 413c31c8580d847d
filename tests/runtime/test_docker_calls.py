"""The blocking Docker operations of the container driver, against a real dockerd."""

from __future__ import annotations

import threading
from typing import Any

import docker
import pytest
from tests._support.docker_image import RUN_LABEL

from mirbad_runtime._docker_calls import remove_container

pytestmark = pytest.mark.docker


def test_a_removal_another_caller_started_is_waited_for(docker_client: Any, image: str) -> None:
    container = docker_client.containers.run(
        image,
        ["/usr/bin/python3", "-c", "import time; time.sleep(600)"],
        detach=True,
        labels={RUN_LABEL: "docker-calls"},
    )
    gone: list[bool] = []

    def remove() -> None:
        # Two callers at once: one removes, the other is told 409 "removal in progress" and waits.
        remove_container(docker_client, container.id)
        try:
            docker_client.api.inspect_container(container.id)
        except docker.errors.NotFound:
            gone.append(True)
        else:
            gone.append(False)

    callers = [threading.Thread(target=remove) for _ in range(2)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(timeout=60)

    assert gone == [True, True]
