"""The parsers of systemctl's and nvidia-smi's output and of /proc/<pid>/cgroup."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_hostd import Manager, cgroup_owner, parse_compute_apps, parse_show, parse_table_json, unit_state
from mirbad_hostd.exceptions import GpuQueryError, SystemctlError

# What systemd 252 prints for `show -p ... --timestamp=unix a.service b.service` (one block per unit).
SHOW = """\
MemoryCurrent=31457280
ControlGroup=/system.slice/smartd.service
Id=smartd.service
Description=Self Monitoring and Reporting Technology (SMART) Daemon
LoadState=loaded
ActiveState=active
SubState=running
FragmentPath=/lib/systemd/system/smartmontools.service
UnitFileState=enabled
ActiveEnterTimestamp=@1764500000

MemoryCurrent=[not set]
ControlGroup=
Id=idle.service
Description=idle daemon
LoadState=loaded
ActiveState=inactive
SubState=dead
FragmentPath=/lib/systemd/system/idle.service
UnitFileState=disabled
ActiveEnterTimestamp=
"""


def test_show_blocks_read_as_unit_states() -> None:
    first, second = (unit_state(b["Id"], Manager(), b) for b in parse_show(SHOW))
    assert (first.memory_bytes, first.active_since, first.unit_file_state) == (
        31457280,
        1764500000,
        "enabled",
    )
    assert first.control_group == "/system.slice/smartd.service"
    assert (second.memory_bytes, second.active_since, second.active_state) == (None, None, "inactive")


def test_a_value_with_an_equals_sign_keeps_it() -> None:
    (block,) = parse_show("Description=a=b\n")
    assert block == {"Description": "a=b"}


def test_unset_memory_reads_as_none() -> None:
    assert unit_state("a", Manager(), {"MemoryCurrent": str(2**64 - 1)}).memory_bytes is None


def test_table_json_keeps_string_cells_only() -> None:
    text = '[{"unit_file":"a.service","state":"enabled","preset":null},{"unit":"b.service","load":"loaded"}]'
    assert parse_table_json(text) == [
        {"unit_file": "a.service", "state": "enabled"},
        {"unit": "b.service", "load": "loaded"},
    ]


@pytest.mark.parametrize("text", ["", "not json", "{}", "[1]"])
def test_a_table_that_is_not_a_json_array_of_objects_raises(text: str) -> None:
    with pytest.raises(SystemctlError):
        parse_table_json(text)


@given(st.text())
def test_show_parsing_never_crashes(text: str) -> None:
    for block in parse_show(text):
        unit_state("x", Manager(), block)


def test_compute_apps_rows() -> None:
    text = "1234, /usr/bin/python3, 40536\n99, weird, name, [N/A]\n\n"
    assert parse_compute_apps(text) == [(1234, "/usr/bin/python3", 40536.0), (99, "weird, name", 0.0)]


@pytest.mark.parametrize("row", ["x, a, 1", "12, 1", "No running processes found"])
def test_unreadable_compute_rows_raise(row: str) -> None:
    with pytest.raises(GpuQueryError):
        parse_compute_apps(row)


@given(st.text())
def test_compute_app_parsing_never_crashes(text: str) -> None:
    with contextlib.suppress(GpuQueryError):
        parse_compute_apps(text)


HEX = "ab" * 32


@pytest.mark.parametrize(
    ("text", "container", "unit"),
    [
        (f"0::/system.slice/docker-{HEX}.scope\n", HEX, None),
        (f"12:memory:/docker/{HEX}\n1:name=systemd:/docker/{HEX}\n", HEX, None),
        (f"0::/system.slice/docker-{HEX}.scope/init.scope\n", HEX, None),
        ("0::/system.slice/ollama.service\n", None, "ollama.service"),
        (
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service\n",
            None,
            "jupyter.service",
        ),
        ("1:name=systemd:/system.slice/cron.service\n", None, "cron.service"),
        ("0::/user.slice/user-1000.slice/session-3.scope\n", None, None),
        (f"0::/system.slice/docker-{HEX[:-2]}.scope\n", None, None),
        ("", None, None),
    ],
)
def test_cgroup_owner(text: str, container: str | None, unit: str | None) -> None:
    owner = cgroup_owner(text)
    assert (owner.container_id, owner.unit) == (container, unit)
