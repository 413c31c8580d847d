"""What ``mirbad up`` claims before it starts anything: ports named with their flags, one run per data dir."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests._support.asgi_server import free_port

from mirbad_master._up_preflight import bind_port, claim_data_dir, probe_port
from mirbad_master.cli import main
from mirbad_master.exceptions import DataDirInUseError, ServeError


@pytest.fixture
def taken() -> Iterator[int]:
    """A loopback port another process (here: this test) listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


@pytest.mark.parametrize(
    ("setting", "flag", "variable"),
    [
        ("port", "--port", "MIRBAD_PORT"),
        ("enroll_port", "--enroll-port", "MIRBAD_ENROLL_PORT"),
        ("agent_port", "--agent-port", "MIRBAD_AGENT_PORT"),
    ],
)
def test_a_taken_port_names_its_flag(taken: int, setting: str, flag: str, variable: str) -> None:
    with pytest.raises(ServeError) as raised:
        probe_port("127.0.0.1", taken, "the thing", setting)

    message = str(raised.value)
    assert f"127.0.0.1:{taken}" in message
    assert f"{flag} (or {variable})" in message


def test_a_free_port_is_bound() -> None:
    with bind_port("127.0.0.1", 0, "the portal", "port") as listener:
        assert listener.getsockname()[1] > 0


@pytest.mark.skipif(sys.platform == "win32", reason="an fcntl lock")
def test_one_mirbad_up_per_data_directory(tmp_path: Path) -> None:
    refused = pytest.raises(DataDirInUseError, match=rf"in use by another `mirbad up` \(pid {os.getpid()}\)")
    with claim_data_dir(tmp_path / "data"), refused, claim_data_dir(tmp_path / "data"):
        pass
    with claim_data_dir(tmp_path / "data"):  # released at the end of the first
        pass


def test_a_second_mirbad_up_on_a_taken_port_fails_before_starting_anything(
    taken: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    enroll = free_port()
    status = main(["up", "--data-dir", str(data), "--port", str(taken), "--enroll-port", str(enroll)])

    error = capsys.readouterr().err
    assert status == 1
    assert f"cannot listen on 127.0.0.1:{taken} for the portal, /api and /v1" in error
    assert "--port (or MIRBAD_PORT)" in error
    # Nothing made or started, not even the first run's password (it would be lost, never shown).
    assert sorted(path.name for path in data.iterdir()) == ["up.lock"]
