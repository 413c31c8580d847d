"""``mirbad-agent``: errors a user can fix are one line and exit status 2."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from tests._support.agent_fleet import create_fleet

from mirbad_agent.cli import main


def test_a_bad_settings_file_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--config", str(tmp_path / "missing.toml")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("mirbad-agent: error: cannot read the settings file")
    assert error.count("\n") == 1


def test_serving_without_credentials_says_to_enroll(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--state-dir", str(tmp_path), "--no-docker"]) == 2
    error = capsys.readouterr().err
    assert "no agent certificate" in error
    assert "mirbad-agent enroll --master URL --token TOKEN" in error
    assert error.count("\n") == 1


def test_a_taken_port_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    create_fleet().save_agent(tmp_path / "state")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        status = main(
            ["serve", "--state-dir", str(tmp_path / "state"), "--host", "127.0.0.1", "--port", str(port),
             "--no-docker", "--no-process-host"]
        )  # fmt: skip
    error = capsys.readouterr().err
    assert status == 2
    assert f"cannot listen on 127.0.0.1:{port}" in error


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["serve", "--port", "many"])
    assert caught.value.code == 2
    with pytest.raises(SystemExit) as missing_command:
        main([])
    assert missing_command.value.code == 2
