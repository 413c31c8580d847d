"""DockerGateway: docker-py on a worker thread, with deadlines and errors in mirbad_runtime's terms."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from mirbad_runtime._docker_gateway import DockerGateway
from mirbad_runtime.exceptions import LaunchRejectedError, RuntimeUnavailableError

pytestmark = pytest.mark.anyio


class _Client:
    """Stands in for a docker-py client: the gateway only hands it to the work and closes it."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


async def test_work_runs_off_the_event_loop_with_the_client() -> None:
    client = _Client()
    gateway = DockerGateway(None, 5, client)  # type: ignore[arg-type]
    loop_thread = threading.get_ident()

    given, worker_thread = await gateway.call("look", lambda given: (id(given), threading.get_ident()))
    await gateway.aclose()

    assert given == id(client)
    assert worker_thread != loop_thread
    assert client.closed


async def test_a_call_past_its_deadline_is_runtime_unavailable() -> None:
    release = threading.Event()
    gateway = DockerGateway(None, 5, _Client())  # type: ignore[arg-type]

    with pytest.raises(RuntimeUnavailableError, match=r"did not list containers within 0\.05 s"):
        await gateway.call("list containers", lambda _client: release.wait(5), timeout_s=0.05)
    release.set()


async def test_driver_errors_pass_through_and_docker_errors_are_translated() -> None:
    gateway = DockerGateway(None, 5, _Client())  # type: ignore[arg-type]

    def refuse(_client: Any) -> None:
        raise LaunchRejectedError("no")

    def broken_pipe(_client: Any) -> None:
        raise ConnectionError("socket closed")

    with pytest.raises(LaunchRejectedError):
        await gateway.call("start", refuse)
    with pytest.raises(RuntimeUnavailableError, match="could not inspect: socket closed"):
        await gateway.call("inspect", broken_pipe)
