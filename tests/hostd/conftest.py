"""A hostd layout with a realistic set of units: whitelisted, plain, denied and every skipped kind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests._support.hostd import HostdLayout, hostd_layout, unit


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[HostdLayout]:
    with hostd_layout(tmp_path) as made:
        made.units = {
            "system": [
                unit("smartd.service", memory=30 * 1024 * 1024),
                unit("nginx.service", memory=200 * 1024 * 1024),
                unit("ssh.service"),
                unit("apache2.service"),
                unit("httpd.service", file_state="alias", alias_of="apache2.service", listed=False),
                unit("worker@.service", file_state="disabled", listed=False),
                unit("worker@1.service", file_state=None, fragment="/lib/systemd/system/worker@.service"),
                unit("hidden.service", load="masked", file_state="masked", active="inactive", sub="dead"),
                unit(
                    "run-u42.service",
                    file_state="transient",
                    fragment="/run/systemd/transient/run-u42.service",
                ),
                unit("gone.service", load="not-found", file_state=None, fragment="", active="inactive"),
                unit("nofile.service", file_state=None, fragment=""),
                unit("idle.service", active="inactive", sub="dead", file_state="disabled", memory=None),
            ],
            "user:alice": [
                unit(
                    "syncthing.service",
                    cgroup="/user.slice/user-1000.slice/user@1000.service/app.slice/syncthing.service",
                )
            ],
        }
        made.write_seed(
            [
                {"name": "smartd", "unit": "smartd.service", "displayName": "SMART disks", "protected": True},
                {"name": "syncthing", "unit": "syncthing.service", "scope": "user", "user": "alice"},
                {"name": "ssh", "unit": "ssh.service"},
            ]
        )
        made.write_fixtures()
        yield made
