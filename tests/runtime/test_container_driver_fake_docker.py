"""The container driver over a hand-written docker-py client, for failures a real dockerd will not stage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mirbad_runtime import ContainerDriver, ContainerDriverConfig
from mirbad_runtime.exceptions import RuntimeUnavailableError

pytestmark = pytest.mark.anyio


class _Container:
    def __init__(self, model_id: str) -> None:
        labels = {"mirbad.model": model_id, "mirbad.served-name": model_id, "mirbad.port": "8101"}
        # An exited container: its status read fetches its log tail from Docker.
        self.attrs = {"Id": f"id-{model_id}", "Config": {"Labels": labels}, "State": {"Status": "exited"}}


class _Containers:
    def __init__(self, model_ids: list[str]) -> None:
        self.model_ids = model_ids

    def list(self, **_filters: Any) -> list[_Container]:
        return [_Container(model_id) for model_id in self.model_ids]


class _Api:
    def logs(self, container_id: str, **_options: Any) -> bytes:
        raise ConnectionError(f"socket closed while reading the logs of {container_id}")


class LogsFailingDocker:
    """Lists the given exited containers, then loses its connection on every log read."""

    def __init__(self, model_ids: list[str]) -> None:
        self.containers = _Containers(model_ids)
        self.api = _Api()

    def close(self) -> None:
        """Nothing to close."""


def _driver(tmp_path: Path, docker: LogsFailingDocker) -> ContainerDriver:
    config = ContainerDriverConfig(models_host_path=tmp_path, cache_host_path=tmp_path, docker_timeout_s=5)
    return ContainerDriver(config, docker_client=docker)  # type: ignore[arg-type]


async def test_docker_failing_inside_a_listing_raises_the_documented_error_itself(tmp_path: Path) -> None:
    driver = _driver(tmp_path, LogsFailingDocker(["a"]))
    with pytest.raises(RuntimeUnavailableError, match="logs of id-a"):
        await driver.list_statuses()
    await driver.aclose()


async def test_docker_failing_for_every_container_raises_one_error(tmp_path: Path) -> None:
    driver = _driver(tmp_path, LogsFailingDocker(["a", "b"]))
    with pytest.raises(RuntimeUnavailableError) as raised:
        await driver.list_statuses()
    await driver.aclose()
    # The first failure cancels the other reads; one that failed before it was cancelled is a note
    # (how many do is a race: tests/protocol/test_task_groups.py pins the notes themselves).
    assert all("RuntimeUnavailableError" in note for note in getattr(raised.value, "__notes__", []))
