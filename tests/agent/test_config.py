"""The agent's settings: a TOML or JSON file, overridden by flags, refused loudly when wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirbad_agent import AgentConfigError, AgentSettings, load_settings

SHA = "a" * 64


def test_a_toml_file_with_paths_relative_to_its_folder(tmp_path: Path) -> None:
    config = tmp_path / "etc" / "agent.toml"
    config.parent.mkdir()
    config.write_text(
        f"""
node_name = "spark-1"
state_dir = "state"
model_roots = ["models", "/srv/more"]
memory_reserve_gib = 8

[docker]
enabled = true
cache_host_path = "cache"

[process]
port_range_start = 9000
port_range_end = 9099

[[executables]]
name = "llama-server"
version = "b6000"
path = "bin/llama-server"
sha256 = "{SHA}"
"""
    )
    settings = load_settings(config)
    folder = config.parent.absolute()
    assert settings.node_name == "spark-1"
    assert settings.state_dir == folder / "state"
    assert settings.credentials_dir == folder / "state"
    assert settings.model_roots == [folder / "models", Path("/srv/more")]
    assert settings.cache_host_path == folder / "cache"
    assert settings.models_host_path == folder / "models"
    assert settings.executables[0].path == folder / "bin" / "llama-server"
    assert (settings.port, settings.memory_reserve_gib, settings.docker.enabled) == (9443, 8, True)


def test_flags_win_over_the_file(tmp_path: Path) -> None:
    config = tmp_path / "agent.json"
    config.write_text(json.dumps({"port": 9555, "docker": {"enabled": True, "network": "fleet"}}))
    settings = load_settings(config, {"port": 9666, "docker": {"enabled": False}})
    assert (settings.port, settings.docker.enabled, settings.docker.network) == (9666, False, "fleet")


def test_defaults_without_a_file() -> None:
    settings = load_settings()
    assert (settings.host, settings.port, settings.model_roots) == ("0.0.0.0", 9443, [])
    assert settings.state_dir.name == "mirbad-agent"
    assert settings.models_host_path is None
    assert settings.cache_host_path == settings.state_dir / "cache"


def test_the_proxy_idle_timeout_is_on_by_default() -> None:
    # Generous: a long prefill, or a non-streamed answer, sends nothing for minutes.
    assert load_settings().proxy_idle_timeout_s == 600


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"prot": 1}, "prot: Extra inputs are not permitted"),
        ({"port": 70000}, "port: Input should be less than or equal to 65535"),
        ({"docker": {"port_range_start": 9000, "port_range_end": 8000}}, "docker.port_range_start"),
        (
            {"docker": {"enabled": True}, "process": {"port_range_start": 8400, "port_range_end": 8600}},
            "ranges overlap",
        ),
        (
            {"executables": [{"name": "x", "version": "1", "path": "/x", "sha256": SHA}] * 2},
            "x 1 is listed more than once",
        ),
        (
            {"executables": [{"name": "x", "version": "1", "path": "/x", "sha256": "nope"}]},
            "executables.0.sha256",
        ),
        ({"downloads": {"plan_timeout_s": 300}}, "downloads.plan_timeout_s"),
        ({"downloads": {"min_bytes_per_second": 0}}, "downloads.min_bytes_per_second"),
        ({"proxy_idle_timeout_s": 0}, "proxy_idle_timeout_s: Input should be greater than 0"),
        ({"proxy_idle_timeout_s": -1}, "proxy_idle_timeout_s: Input should be greater than 0"),
        ({"proxy_idle_timeout_s": None}, "proxy_idle_timeout_s: Input should be a valid number"),
    ],
)
def test_bad_settings_are_named(tmp_path: Path, content: dict[str, object], message: str) -> None:
    config = tmp_path / "agent.json"
    config.write_text(json.dumps(content))
    with pytest.raises(AgentConfigError) as caught:
        load_settings(config)
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"{config}: ")
    assert "\n" not in str(caught.value)


def test_unreadable_files(tmp_path: Path) -> None:
    broken = tmp_path / "agent.toml"
    broken.write_text("port = ")
    listed = tmp_path / "agent.json"
    listed.write_text("[]")
    with pytest.raises(AgentConfigError, match="not valid toml"):
        load_settings(broken)
    with pytest.raises(AgentConfigError, match="must be an object"):
        load_settings(listed)
    with pytest.raises(AgentConfigError, match="cannot read the settings file"):
        load_settings(tmp_path / "missing.json")


def test_settings_are_frozen() -> None:
    with pytest.raises(ValueError, match="frozen"):
        AgentSettings().port = 1  # type: ignore[misc]
