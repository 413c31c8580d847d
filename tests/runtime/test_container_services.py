"""The host-container listing over a hand-written docker-py client: its stats side by side, its one bound."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from mirbad_runtime import STATS_CONCURRENCY, ContainerServices
from mirbad_runtime.exceptions import RuntimeUnavailableError

pytestmark = pytest.mark.anyio

WAIT_S = 30.0
MIB = 1024 * 1024


class _Api:
    """Running containers ``c0``..; each stats call waits at a barrier of ``meet`` callers."""

    def __init__(self, count: int, meet: int) -> None:
        self.count = count
        self._barrier = threading.Barrier(meet, timeout=WAIT_S)
        self._lock = threading.Lock()
        self._inside = 0
        self.most_at_once = 0
        self.hanging = False
        self.release = threading.Event()

    def containers(self, **_filters: Any) -> list[dict[str, Any]]:
        if self.hanging:
            self.release.wait(WAIT_S)  # dockerd that does not answer, until the test lets it go
        return [{"Id": f"c{index}", "Names": [f"/c{index}"], "Labels": {}} for index in range(self.count)]

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        return {
            "Id": container_id,
            "Name": f"/{container_id}",
            "Config": {"Image": "db:1", "Labels": {}},
            "State": {"Status": "running", "Running": True, "StartedAt": "2026-01-01T00:00:00Z"},
            "HostConfig": {"RestartPolicy": {"Name": "always"}},
        }

    def stats(self, container_id: str, **_options: Any) -> dict[str, Any]:
        with self._lock:
            self._inside += 1
            self.most_at_once = max(self.most_at_once, self._inside)
        try:
            # Read one after the other, the first caller waits here alone and the barrier breaks.
            self._barrier.wait()
        finally:
            with self._lock:
                self._inside -= 1
        used = (int(container_id.removeprefix("c")) + 1) * MIB
        return {"memory_stats": {"usage": used, "stats": {"inactive_file": 0}}}


class FakeDocker:
    """The part of docker-py's client the listing uses."""

    def __init__(self, api: _Api) -> None:
        self.api = api

    def close(self) -> None:
        """Nothing to close."""


async def test_the_listing_reads_its_containers_stats_side_by_side_within_the_bound() -> None:
    api = _Api(count=3 * STATS_CONCURRENCY, meet=STATS_CONCURRENCY)
    services = ContainerServices(docker_client=FakeDocker(api))  # type: ignore[arg-type]
    try:
        listing = await services.containers()
    finally:
        await services.aclose()

    assert api.most_at_once == STATS_CONCURRENCY
    memory = {service.name: service.memory_bytes for service in listing.containers}
    assert memory == {f"c{index}": (index + 1) * MIB for index in range(3 * STATS_CONCURRENCY)}


async def test_a_smaller_concurrency_is_kept() -> None:
    api = _Api(count=6, meet=2)
    services = ContainerServices(docker_client=FakeDocker(api), stats_concurrency=2)  # type: ignore[arg-type]
    try:
        listing = await services.containers()
    finally:
        await services.aclose()
    assert api.most_at_once == 2
    assert len(listing.containers) == 6


async def test_the_listing_is_bound_by_the_one_docker_timeout() -> None:
    # It had its own 60 s bound beside the agent's docker.timeout_s for every other Docker call.
    api = _Api(count=1, meet=1)
    api.hanging = True
    services = ContainerServices(timeout_s=0.2, docker_client=FakeDocker(api))  # type: ignore[arg-type]
    try:
        with pytest.raises(RuntimeUnavailableError, match=r"did not list containers within 0\.2 s"):
            await services.containers()
    finally:
        api.release.set()
        await services.aclose()
    assert services.timeout_s == 0.2
