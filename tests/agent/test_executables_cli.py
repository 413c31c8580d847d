"""``mirbad-agent executables add``: catalogue a binary without computing its SHA-256 by hand (issue 8)."""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_agent import load_settings, toml_string
from mirbad_agent.cli import main

COMMENTED = """# the operator's own notes stay where they are
node_name = "gpu-1"   # named by hand

[process]
port_range_start = 8600
"""


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    path = tmp_path / "bin" / "llama-server"
    path.parent.mkdir()
    path.write_bytes(b"#!/bin/sh\necho a stand-in llama-server\n")
    path.chmod(0o755)
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_add_writes_a_new_settings_file_the_agent_then_reads(
    tmp_path: Path, binary: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "etc" / "agent.toml"
    config.parent.mkdir()

    status = main(["executables", "add", str(binary), "--version", "b6000", "--config", str(config)])

    [entry] = load_settings(config).executables
    assert status == 0
    assert (entry.name, entry.version, entry.path, entry.sha256) == (
        "llama-server",
        "b6000",
        binary,
        digest(binary),
    )
    assert f"added llama-server b6000 ({binary}) to {config}" in capsys.readouterr().out
    assert config.stat().st_mode & 0o777 == 0o600


def test_add_keeps_the_comments_and_values_of_a_toml_file(tmp_path: Path, binary: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text(COMMENTED)
    config.chmod(0o640)

    assert (
        main(["executables", "add", str(binary), "--name", "llama-server-cuda", "--config", str(config)]) == 0
    )

    settings = load_settings(config)
    assert config.read_text().startswith(COMMENTED)
    assert (settings.node_name, settings.process.port_range_start) == ("gpu-1", 8600)
    assert [(entry.name, entry.version) for entry in settings.executables] == [("llama-server-cuda", "local")]
    assert config.stat().st_mode & 0o777 == 0o640
    assert list(tmp_path.glob("*.tmp")) == []


def test_add_appends_to_a_json_file(tmp_path: Path, binary: Path) -> None:
    config = tmp_path / "agent.json"
    config.write_text(json.dumps({"node_name": "gpu-2"}))

    assert main(["executables", "add", str(binary), "--config", str(config)]) == 0
    assert main(["executables", "add", str(binary), "--version", "b2", "--config", str(config)]) == 0

    settings = load_settings(config)
    assert settings.node_name == "gpu-2"
    assert [entry.version for entry in settings.executables] == ["local", "b2"]


def test_a_duplicate_is_refused_and_the_file_left_alone(
    tmp_path: Path, binary: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "agent.toml"
    assert main(["executables", "add", str(binary), "--version", "b1", "--config", str(config)]) == 0
    before = config.read_bytes()

    status = main(
        [
            "executables",
            "add",
            str(binary),
            "--name",
            "LLAMA-SERVER",
            "--version",
            "b1",
            "--config",
            str(config),
        ]
    )

    error = capsys.readouterr().err
    assert status == 2
    assert config.read_bytes() == before
    assert "llama-server b1 is already in the catalogue" in error
    assert "--version" in error
    assert error.count("\n") == 1


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda folder: folder / "missing", "no such file"),
        (lambda folder: folder, "is not a file"),
    ],
)
def test_a_path_that_is_no_binary_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object, says: str
) -> None:
    config = tmp_path / "agent.toml"
    target = make(tmp_path)  # type: ignore[operator]
    assert main(["executables", "add", str(target), "--config", str(config)]) == 2
    assert says in capsys.readouterr().err
    assert not config.exists()


def test_a_file_that_cannot_be_run_is_refused(
    tmp_path: Path, binary: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary.chmod(0o644)
    assert main(["executables", "add", str(binary), "--config", str(tmp_path / "agent.toml")]) == 2
    assert "is not executable" in capsys.readouterr().err


def test_an_invalid_name_is_refused_naming_the_field(
    tmp_path: Path, binary: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "agent.toml"
    assert main(["executables", "add", str(binary), "--name", "llama server", "--config", str(config)]) == 2
    assert "--name" in capsys.readouterr().err
    assert not config.exists()


def test_without_a_config_the_state_folders_settings_file_is_used(
    tmp_path: Path, binary: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"

    assert main(["executables", "add", str(binary), "--state-dir", str(state)]) == 0
    (state / "agent.toml").write_text("bogus_key = 1\n" + (state / "agent.toml").read_text())
    # serve reads the same file when no --config names another: its error proves it did.
    assert main(["serve", "--state-dir", str(state), "--no-docker"]) == 2

    error = capsys.readouterr().err
    assert f"{state / 'agent.toml'}: bogus_key" in error


def test_an_inline_executables_array_is_left_for_the_operator(
    tmp_path: Path, binary: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "agent.toml"
    config.write_text("executables = []\n")
    assert main(["executables", "add", str(binary), "--config", str(config)]) == 2
    assert "add it by hand" in capsys.readouterr().err
    assert config.read_text() == "executables = []\n"


@given(st.text())
def test_any_text_survives_as_a_toml_string(value: str) -> None:
    assert tomllib.loads(f"value = {toml_string(value)}")["value"] == value
