"""The master's settings: flags over MIRBAD_* variables over defaults, errors naming their source."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirbad_master._fleet_of_one import _limits
from mirbad_master._settings import DEFAULT_PORT, MasterSettings, default_data_dir, load_master_settings
from mirbad_orchestration.stores import DEFAULT_AUDIT_FILE_BYTES
from mirbad_orchestration.supervision import HealthSettings
from mirbad_protocol import InvalidFieldError


def test_defaults() -> None:
    settings = load_master_settings({})

    assert settings.data_dir == default_data_dir().absolute()
    assert (settings.host, settings.port) == ("127.0.0.1", DEFAULT_PORT)
    assert settings.base_url == f"http://127.0.0.1:{DEFAULT_PORT}"
    assert settings.agent_models == [settings.data_dir / "models"]
    health = settings.health_settings({})
    assert (health.poll_interval, health.crash_backoff, health.crash_restart_limit) == (5.0, (10, 30, 60), 3)


def test_flags_win_over_the_environment(tmp_path: Path) -> None:
    environ = {
        "MIRBAD_DATA_DIR": str(tmp_path / "env"),
        "MIRBAD_PORT": "9000",
        "MIRBAD_HEALTH_POLL_S": "0.5",
        "MIRBAD_CRASH_BACKOFF_S": "1, 2",
    }
    settings = load_master_settings(environ, {"data_dir": tmp_path / "flag", "port": None})

    assert settings.data_dir == tmp_path / "flag"
    assert settings.port == 9000
    health = settings.health_settings({})
    assert (health.poll_interval, health.crash_backoff, health.ready_check_interval) == (0.5, (1, 2), 0.5)


def test_errors_name_the_variable_or_the_flag() -> None:
    with pytest.raises(InvalidFieldError) as from_env:
        load_master_settings({"MIRBAD_PORT": "http"})
    with pytest.raises(InvalidFieldError) as from_flag:
        load_master_settings({}, {"port": 0})

    assert from_env.value.field == "MIRBAD_PORT"
    assert from_flag.value.field == "--port"


def test_urls_for_a_master_listening_everywhere() -> None:
    settings = MasterSettings(host="0.0.0.0", port=8081, enroll_port=8444)

    assert settings.base_url == "http://127.0.0.1:8081"
    assert settings.enroll_url.startswith("https://")
    assert settings.enroll_url.endswith(":8444")
    assert "0.0.0.0" not in settings.enroll_url


def test_trusted_proxies_are_addresses_or_networks() -> None:
    settings = load_master_settings({"MIRBAD_TRUSTED_PROXIES": "10.0.0.1, 192.168.0.0/16"})
    flagged = load_master_settings({}, {"trusted_proxies": ["::1"]})
    with pytest.raises(InvalidFieldError) as refused:
        load_master_settings({"MIRBAD_TRUSTED_PROXIES": "10.0.0.1,proxy.lan"})

    assert settings.trusted_proxies == ("10.0.0.1", "192.168.0.0/16")
    assert flagged.trusted_proxies == ("::1",)
    assert MasterSettings().trusted_proxies == ()
    assert refused.value.field == "MIRBAD_TRUSTED_PROXIES"
    assert "proxy.lan" in refused.value.reason


def test_the_health_defaults_are_the_health_monitors_own(tmp_path: Path) -> None:
    # One place for each number: a default changed in HealthSettings is the master's default too.
    assert MasterSettings(data_dir=tmp_path).health_settings({}) == HealthSettings()


def test_the_connection_guard_settings_reach_every_listener() -> None:
    settings = load_master_settings(
        {"MIRBAD_MAX_HEADER_BYTES": "16384", "MIRBAD_HANDSHAKE_TIMEOUT_S": "2"}, {"body_min_rate": 4096.0}
    )
    main, enroll = _limits(settings), _limits(settings, 64)

    for limits in (main, enroll):
        assert (limits.max_header_bytes, limits.handshake_timeout_s, limits.body_min_rate) == (16384, 2, 4096)
    assert enroll.max_connections == 64
    defaults = load_master_settings({})
    assert (defaults.max_header_bytes, defaults.handshake_timeout_s) == (64 * 1024, 5.0)
    with pytest.raises(InvalidFieldError) as tiny:
        load_master_settings({"MIRBAD_MAX_HEADER_BYTES": "10"})
    assert tiny.value.field == "MIRBAD_MAX_HEADER_BYTES"


def test_the_backup_settings_come_from_the_environment(tmp_path: Path) -> None:
    off = load_master_settings({}).backup_settings()
    environ = {
        "MIRBAD_BACKUP_DIR": str(tmp_path),
        "MIRBAD_BACKUP_KEEP": "3",
        "MIRBAD_BACKUP_INCLUDE_CA": "false",
    }
    on = load_master_settings(environ).backup_settings()

    assert (off.directory, off.keep, off.include_ca) == (None, 7, True)
    assert (on.directory, on.keep, on.include_ca) == (tmp_path, 3, False)
    with pytest.raises(InvalidFieldError) as zero:
        load_master_settings({"MIRBAD_BACKUP_KEEP": "0"})
    assert zero.value.field == "MIRBAD_BACKUP_KEEP"


def test_the_audit_logs_rotation_size_is_a_setting() -> None:
    assert load_master_settings({}).audit_max_file_bytes == DEFAULT_AUDIT_FILE_BYTES
    assert load_master_settings({"MIRBAD_AUDIT_MAX_FILE_BYTES": "65536"}).audit_max_file_bytes == 65536
    with pytest.raises(InvalidFieldError) as refused:
        load_master_settings({"MIRBAD_AUDIT_MAX_FILE_BYTES": "100"})
    assert refused.value.field == "MIRBAD_AUDIT_MAX_FILE_BYTES"
