"""DockerGateway: docker-py on a worker thread, with deadlines and errors in mirbad_runtime's terms."""

from __future__ import annotations

import gc
import socket
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

from mirbad_runtime import probe_docker_socket
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


def _stale_socket(folder: Path) -> Path:
    """A socket file nothing listens on any more (dockerd gone, its socket left behind)."""
    path = folder / "stale.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
    return path


@pytest.mark.filterwarnings("error::ResourceWarning")
@pytest.mark.parametrize("which", ["missing", "stale"])
async def test_an_unreachable_docker_socket_is_unavailable_and_leaks_no_socket(
    tmp_path: Path, which: str
) -> None:
    # docker-py's unix connection left its socket unclosed on every failed connect (a ResourceWarning).
    path = tmp_path / "docker.sock" if which == "missing" else _stale_socket(tmp_path)
    gateway = DockerGateway(f"unix://{path}", 5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        for _ in range(2):
            with pytest.raises(RuntimeUnavailableError, match="Docker could not list containers"):
                await gateway.call("list containers", lambda client: client.api.containers())
        await gateway.aclose()
        gc.collect()
    assert [str(warning.message) for warning in caught if issubclass(warning.category, ResourceWarning)] == []


def test_the_probe_leaves_other_endpoints_and_a_listening_socket_alone(tmp_path: Path) -> None:
    probe_docker_socket("tcp://127.0.0.1:2375", 1)
    path = tmp_path / "docker.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(1)
        probe_docker_socket(f"unix://{path}", 1)
    with pytest.raises(FileNotFoundError):
        probe_docker_socket(f"unix://{tmp_path / 'none.sock'}", 1)


async def test_a_hand_written_client_is_not_probed(tmp_path: Path) -> None:
    gateway = DockerGateway(f"unix://{tmp_path / 'none.sock'}", 5, _Client())  # type: ignore[arg-type]
    assert await gateway.call("look", lambda _client: "answered") == "answered"
