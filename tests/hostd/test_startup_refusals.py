"""hostd refuses to start on an insecure or malformed deny list, whitelist or seed (real modes and owners)."""

from __future__ import annotations

import json
import os
import pwd
from collections.abc import Callable
from pathlib import Path

import pytest
from tests._support.hostd import HostdLayout, refused_start, running_hostd

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="ownership checks need root to chown to nobody")


UNKNOWN_FIELD = {"name": "a", "unit": "a.service", "risk": ["x"]}  # the field is "risks"


def _nobody(path: Path) -> None:
    entry = pwd.getpwnam("nobody")
    os.chown(path, entry.pw_uid, entry.pw_gid)


def _deny(layout: HostdLayout, text: str) -> Path:
    layout.deny_file.write_text(text)
    return layout.deny_file


def _whitelist(layout: HostdLayout) -> Path:
    # A first start writes it; the test then spoils it.
    with running_hostd(layout):
        pass
    return layout.whitelist


@pytest.mark.parametrize(
    ("spoil", "reason"),
    [
        (lambda layout: _deny(layout, '{"patterns": ["nginx*"]}').chmod(0o664), "has mode 0664"),
        (lambda layout: _deny(layout, '{"patterns": ["nginx*"]}').chmod(0o646), "has mode 0646"),
        (lambda layout: _deny(layout, "{not json"), "malformed"),
        (lambda layout: _deny(layout, '{"patterns": "nginx*"}'), "malformed"),
        (lambda layout: _deny(layout, '{"patterns": ["nginx*"], "remove": ["ssh*"]}'), "malformed"),
        (lambda layout: _deny(layout, '{"patterns": [""]}'), "malformed"),
        (lambda layout: _whitelist(layout).chmod(0o640), "has mode 0640"),
        (lambda layout: _whitelist(layout).chmod(0o602), "has mode 0602"),
        (lambda layout: _whitelist(layout).write_text("[1, 2"), "malformed"),
        (lambda layout: _whitelist(layout).write_text('{"services": [{"unit": "x.service"}]}'), "malformed"),
        (lambda layout: (_whitelist(layout), layout.state_dir.chmod(0o755)), "has mode 0755"),
        (lambda layout: layout.seed.chmod(0o666), "has mode 0666"),
        # issue 31 item 13: whoever may write the deny file's folder may delete the file.
        (lambda layout: layout.deny_file.parent.chmod(0o777), "has mode 0777"),
        (lambda layout: layout.deny_file.parent.chmod(0o775), "has mode 0775"),
        (
            lambda layout: layout.seed.write_text(
                '{"services": [{"name": "a", "unit": "a.service", "risk": 1}]}'
            ),
            "malformed",
        ),
    ],
)
def test_hostd_refuses_to_start(
    layout: HostdLayout, spoil: Callable[[HostdLayout], object], reason: str
) -> None:
    spoil(layout)
    status, output = refused_start(layout)
    assert status == 2, output
    assert "mirbad-hostd: error:" in output
    assert reason in output
    assert not layout.socket.exists()


@needs_root
@pytest.mark.parametrize("target", ["deny", "deny_dir", "whitelist", "state_dir", "seed"])
def test_hostd_refuses_files_root_does_not_own(layout: HostdLayout, target: str) -> None:
    if target == "deny":
        path = _deny(layout, '{"patterns": ["nginx*"]}')
    elif target == "deny_dir":
        path = layout.deny_file.parent
    elif target == "seed":
        path = layout.seed
    else:
        path = _whitelist(layout) if target == "whitelist" else (_whitelist(layout).parent)
    _nobody(path)
    status, output = refused_start(layout)
    assert status == 2, output
    assert f"{path}: is owned by uid {pwd.getpwnam('nobody').pw_uid}, not root" in output


def test_the_deny_file_adds_patterns(layout: HostdLayout) -> None:
    _deny(layout, json.dumps({"patterns": ["nginx*"]}))
    with running_hostd(layout) as hostd:
        action = hostd.client.post("/whitelist", json={"unit": "nginx", "confirm": "nginx"})
        patterns = hostd.client.get("/services", params={"include": "all"}).json()["denyPatterns"]
    assert action.status_code == 403
    assert action.json()["error"]["pattern"] == "nginx*"
    assert patterns[-1] == "nginx*"
    assert "ssh*" in patterns


def test_a_denied_entry_put_in_the_whitelist_by_hand_is_dropped_at_load(layout: HostdLayout) -> None:
    path = _whitelist(layout)
    document = json.loads(path.read_text())
    document["services"].append({"name": "dockerd", "unit": "docker.service"})
    path.write_text(json.dumps(document))
    with running_hostd(layout) as hostd:
        action = hostd.client.post("/services/dockerd/stop")
        log = hostd.log()
    assert action.status_code == 403
    assert "dropped dockerd (docker.service)" in log
    assert "docker.service" not in path.read_text()
    assert layout.actions_run() == []
