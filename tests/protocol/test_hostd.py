"""The agent-hostd contract: golden wire payloads, unit-name rules and the user-input bodies."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion

from mirbad_protocol import InvalidFieldError
from mirbad_protocol.hostd import (
    MAX_UNIT_NAME_LENGTH,
    DiscoveredService,
    DiscoveryError,
    GpuProcess,
    HostdActionResult,
    HostdErrorCode,
    HostServiceStatus,
    ServiceList,
    WhitelistAdd,
    WhitelistEntry,
    WhitelistUpdate,
    hostd_error_body,
    unit_name,
)

SMARTD = WhitelistEntry(name="smartd", unit="smartd.service", display_name="SMART disks", protected=True)


def test_service_list_wire(snapshot_json: SnapshotAssertion) -> None:
    listing = ServiceList(
        services=[
            HostServiceStatus(
                entry=SMARTD,
                load_state="loaded",
                active_state="active",
                sub_state="running",
                unit_file_state="enabled",
                autostart=True,
                memory_bytes=31457280,
                gpu_memory_mib=512.0,
                active_since=1764500000,
            )
        ],
        discovered=[
            DiscoveredService(unit="ssh.service", load_state="loaded", denied=True, deny_pattern="ssh*"),
            DiscoveredService(
                unit="syncthing.service", scope="user", user="alice", managed=True, name="sync"
            ),
        ],
        discovery_errors=[DiscoveryError(scope="user", user="bob", message="Failed to connect to bus")],
        deny_patterns=["ssh*"],
    )
    assert listing.to_wire() == snapshot_json
    assert ServiceList.from_wire(listing.to_wire()) == listing


def test_gpu_process_action_and_error_wire(snapshot_json: SnapshotAssertion) -> None:
    payloads = [
        GpuProcess(pid=7, name="python3", used_mib=40000.0, container_id="ab" * 32).to_wire(),
        GpuProcess(pid=8, name="smartd", used_mib=1.0, unit="smartd.service", display_name="SMART").to_wire(),
        HostdActionResult(name="smartd", unit="smartd.service", action="stop", result="ok").to_wire(),
        hostd_error_body(HostdErrorCode.DENIED, "ssh.service is denied", pattern="ssh*"),
        hostd_error_body(HostdErrorCode.INVALID_REQUEST, "bad", field="unit"),
    ]
    assert payloads == snapshot_json


def test_every_code_has_a_status() -> None:
    assert {code.http_status for code in HostdErrorCode} >= {403, 404, 409, 422, 502, 503}


@pytest.mark.parametrize("name", ["a/b", "a b", "x;y", "$(id)", "`id`", "a|b", "a&b", "x\\y", "-rf", "", "é"])
def test_bad_unit_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="unit name"):
        unit_name(name)


def test_a_bare_name_gets_its_suffix_and_length_is_bounded() -> None:
    assert unit_name("smartd") == "smartd.service"
    assert unit_name("getty@tty1.service") == "getty@tty1.service"
    with pytest.raises(ValueError, match="at most 256"):
        unit_name("a" * (MAX_UNIT_NAME_LENGTH + 1))


@given(st.text(max_size=300))
def test_an_accepted_unit_name_is_one_harmless_argument(text: str) -> None:
    try:
        name = unit_name(text)
    except ValueError:
        return
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9:_.@-]*\.service", name)
    assert len(text) <= MAX_UNIT_NAME_LENGTH


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"unit": "nginx", "confirm": "nginx", "password": "x"}, "password"),
        ({"unit": "nginx", "confirm": "nginx", "scope": "global"}, "scope"),
        ({"unit": "a/b", "confirm": "a"}, "unit"),
        ({"unit": "nginx"}, "confirm"),
        ({"unit": "nginx", "confirm": "nginx", "displayName": "a\nforged line"}, "displayName"),
        ({"unit": "nginx", "confirm": "nginx", "user": "Bad User"}, "user"),
    ],
)
def test_whitelist_add_refuses_bad_fields_by_name(body: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidFieldError) as refused:
        WhitelistAdd.from_user_input(body)
    assert refused.value.field == field


def test_whitelist_update_refuses_unknown_fields() -> None:
    with pytest.raises(InvalidFieldError) as refused:
        WhitelistUpdate.from_user_input({"protectd": False})
    assert refused.value.field == "protectd"
    assert "protected" in refused.value.reason
