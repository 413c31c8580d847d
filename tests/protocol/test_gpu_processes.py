"""nvidia-smi's compute-apps rows and the cgroup owner of a process (real sample lines and properties)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_protocol import ComputeAppsFormatError
from mirbad_protocol.support import ComputeApp, cgroup_owner, read_compute_apps

ID = "0123456789abcdef" * 4

# Real /proc/<pid>/cgroup files, as kernels print them.
V2_SYSTEMD_DRIVER = f"0::/system.slice/docker-{ID}.scope\n"
V1_CGROUPFS_DRIVER = (
    f"12:pids:/docker/{ID}\n"
    f"11:memory:/docker/{ID}\n"
    f"4:cpu,cpuacct:/docker/{ID}\n"
    f"1:name=systemd:/docker/{ID}\n"
    "0::/system.slice/containerd.service\n"
)
V1_SYSTEMD_DRIVER = (
    f"10:devices:/system.slice/docker-{ID}.scope\n1:name=systemd:/system.slice/docker-{ID}.scope\n"
)
V2_NESTED = f"0::/system.slice/docker-{ID}.scope/init.scope\n"
HOST_SERVICE = "0::/system.slice/mirbad-agent.service\n"
USER_SESSION = "0::/user.slice/user-1000.slice/session-4.scope\n"


@pytest.mark.parametrize(
    ("text", "container", "unit"),
    [
        (V2_SYSTEMD_DRIVER, ID, None),
        (V1_CGROUPFS_DRIVER, ID, None),
        (V1_SYSTEMD_DRIVER, ID, None),
        (V2_NESTED, ID, None),
        (HOST_SERVICE, None, "mirbad-agent.service"),
        (USER_SESSION, None, None),
        (f"0::/system.slice/docker-{ID[:-1]}.scope\n", None, None),  # 63 digits: no container id
        (f"0::/docker/{ID.upper()}\n", None, None),  # Docker's ids are lower-case hex
        ("", None, None),
    ],
)
def test_the_owner_of_real_cgroup_files(text: str, container: str | None, unit: str | None) -> None:
    owner = cgroup_owner(text)
    assert (owner.container_id, owner.unit) == (container, unit)


HEX_IDS = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
PATH_PARTS = st.lists(st.from_regex(r"[a-z0-9@._-]{1,12}", fullmatch=True), max_size=3)


@given(container=HEX_IDS, above=PATH_PARTS, below=PATH_PARTS, v1=st.booleans(), driver=st.booleans())
def test_a_container_id_is_found_at_any_depth_in_either_form(
    container: str, above: list[str], below: list[str], v1: bool, driver: bool
) -> None:
    leaf = f"docker-{container}.scope" if driver else f"docker/{container}"
    path = "/" + "/".join([*above, leaf, *below])
    text = f"3:memory:{path}\n" if v1 else f"0::{path}\n"
    assert cgroup_owner(text).container_id == container


@given(st.text())
def test_any_text_reads_as_an_owner_or_none(text: str) -> None:
    owner = cgroup_owner(text)
    assert owner.container_id is None or len(owner.container_id) == 64
    assert owner.unit is None or owner.unit.endswith(".service")


def test_compute_apps_rows_keep_names_and_unknown_memory() -> None:
    text = "1234, /usr/bin/python3, 40536\n77, llama-server, [N/A]\n99, weird, name, 12\n\n"
    assert read_compute_apps(text) == [
        ComputeApp(1234, "/usr/bin/python3", 40536.0),
        ComputeApp(77, "llama-server", None),
        ComputeApp(99, "weird, name", 12.0),
    ]


@pytest.mark.parametrize("row", ["x, a, 1", "12, 1", "No running processes found"])
def test_unreadable_compute_rows_raise(row: str) -> None:
    with pytest.raises(ComputeAppsFormatError):
        read_compute_apps(row)


@given(st.text())
def test_compute_app_parsing_never_crashes(text: str) -> None:
    with contextlib.suppress(ComputeAppsFormatError):
        for app in read_compute_apps(text):
            assert app.used_mib is None or app.used_mib >= 0
