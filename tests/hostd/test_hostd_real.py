"""hostd as a real process on a real unix socket, against the stand-in systemctl and nvidia-smi."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from urllib.parse import quote

import pytest
from tests._support.hostd import CONTAINER_ID, ROOT_LEVEL_UNITS, HostdLayout, running_hostd, unit

from mirbad_hostd import BUILT_IN_DENY_PATTERNS, GPU_QUERY_ARGS, TEMPLATE_INSTANCE_PATTERN


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_socket_and_state_files_have_the_modes_of_the_security_model(layout: HostdLayout) -> None:
    with running_hostd(layout) as hostd:
        assert _mode(layout.socket.parent) == 0o750
        assert _mode(layout.socket) == 0o660
        assert stat.S_ISSOCK(layout.socket.stat().st_mode)
        assert layout.socket.stat().st_gid == os.getegid()
        assert _mode(layout.state_dir) == 0o700
        assert _mode(layout.whitelist) == 0o600
    assert hostd.process.returncode == 0  # SIGTERM is a graceful stop
    assert not layout.socket.exists()


def test_services_lists_the_whitelist_with_state_memory_and_gpu(layout: HostdLayout) -> None:
    layout.gpu_apps = [{"pid": 200, "name": "/usr/sbin/smartd", "used": 512}]
    layout.write_fixtures()
    layout.write_cgroup(200, "0::/system.slice/smartd.service\n")
    with running_hostd(layout) as hostd:
        body = hostd.client.get("/services").json()
        log = hostd.log()
    by_name = {service["entry"]["name"]: service for service in body["services"]}
    assert sorted(by_name) == ["smartd", "syncthing"]  # ssh: denied, dropped from the seed
    smartd = by_name["smartd"]
    assert smartd["entry"]["displayName"] == "SMART disks"
    assert (smartd["activeState"], smartd["subState"], smartd["autostart"]) == ("active", "running", True)
    assert smartd["memoryBytes"] == 30 * 1024 * 1024
    assert smartd["gpuMemoryMiB"] == 512
    assert smartd["activeSince"] == 1764500000
    assert by_name["syncthing"]["activeState"] == "active"
    assert "discovered" not in body
    assert "dropped ssh (ssh.service)" in log
    assert "'ssh*'" in log
    shows = [argv for argv in layout.systemctl_calls() if "show" in argv]
    assert ["--user", "--machine=alice@"] in [argv[:2] for argv in shows]
    assert all("--timestamp=unix" in argv for argv in shows)


def test_include_all_discovers_manageable_units_and_marks_denied_ones(layout: HostdLayout) -> None:
    with running_hostd(layout) as hostd:
        body = hostd.client.get("/services", params={"include": "all"}).json()
    found = {(d.get("scope", "system"), d["unit"]): d for d in body["discovered"]}
    assert sorted(unit for _, unit in found) == [
        "apache2.service",
        "idle.service",
        "nginx.service",
        "smartd.service",
        "ssh.service",
        "syncthing.service",
        "worker@1.service",
    ]
    assert found["system", "smartd.service"]["managed"] is True
    assert found["system", "smartd.service"]["name"] == "smartd"
    assert found["system", "ssh.service"]["denied"] is True
    assert found["system", "ssh.service"]["denyPattern"] == "ssh*"
    # worker@.service is not whitelisted, so its instances are offered as denied, not addable.
    assert found["system", "worker@1.service"]["denyPattern"] == TEMPLATE_INSTANCE_PATTERN
    assert found["user", "syncthing.service"]["user"] == "alice"
    assert body["discovered"][0]["unit"] == "nginx.service"  # largest RAM + GPU first
    assert body["discoveryErrors"] == []
    assert body["denyPatterns"][: len(BUILT_IN_DENY_PATTERNS)] == list(BUILT_IN_DENY_PATTERNS)
    listings = [argv for argv in layout.systemctl_calls() if "list-units" in argv]
    assert ["--system", "list-units", "--type=service", "--all", "-o", "json", "--no-pager"] in listings


def test_a_user_manager_that_fails_is_a_discovery_error_not_a_failure(layout: HostdLayout) -> None:
    layout.write_seed([], discover_users=["alice", "bob"])
    layout.write_fixtures(failing=("user:bob",))
    with running_hostd(layout) as hostd:
        body = hostd.client.get("/services", params={"include": "all"}).json()
    assert [(e["scope"], e["user"]) for e in body["discoveryErrors"]] == [("user", "bob")]
    assert "No medium found" in body["discoveryErrors"][0]["message"]


def test_start_and_stop_run_systemctl_by_argv_with_no_block(layout: HostdLayout) -> None:
    with running_hostd(layout) as hostd:
        stopped = hostd.client.post("/services/smartd/stop", params={"confirm": "smartd"})
        state = hostd.client.get("/services").json()["services"][0]
        started = hostd.client.post("/services/smartd/start")
        log = hostd.log()
    assert stopped.status_code == 202
    assert stopped.json() == {"name": "smartd", "unit": "smartd.service", "action": "stop", "result": "ok"}
    assert (state["activeState"], state["subState"]) == ("inactive", "dead")
    assert started.status_code == 202
    assert layout.actions_run() == [
        ["--system", "--no-block", "stop", "--", "smartd.service"],
        ["--system", "--no-block", "start", "--", "smartd.service"],
    ]
    assert "action service=smartd unit=smartd.service action=stop result=ok" in log


def test_a_user_unit_is_acted_on_through_its_user_manager(layout: HostdLayout) -> None:
    with running_hostd(layout) as hostd:
        response = hostd.client.post("/services/syncthing/restart")
    assert response.status_code == 202
    assert layout.actions_run() == [
        ["--user", "--machine=alice@", "--no-block", "restart", "--", "syncthing.service"]
    ]


@pytest.mark.parametrize("action", ["stop", "restart", "disable"])
def test_a_protected_service_needs_its_name_typed(layout: HostdLayout, action: str) -> None:
    with running_hostd(layout) as hostd:
        missing = hostd.client.post(f"/services/smartd/{action}")
        wrong = hostd.client.post(f"/services/smartd/{action}", params={"confirm": "nginx"})
        log = hostd.log()
        right = hostd.client.post(f"/services/smartd/{action}", params={"confirm": "smartd"})
    for refused in (missing, wrong):
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "confirm"
    assert f"action service=smartd unit=smartd.service action={action} result=refused" in log
    assert right.status_code == 202
    assert len(layout.actions_run()) == 1


def test_start_and_enable_of_a_protected_service_need_no_confirmation(layout: HostdLayout) -> None:
    with running_hostd(layout) as hostd:
        assert hostd.client.post("/services/smartd/start").status_code == 202
        assert hostd.client.post("/services/smartd/enable").status_code == 202


@pytest.mark.parametrize("name", ["ssh", "sshd", "SSHD.service", "systemd-journald", "docker", "user@1000"])
def test_a_denied_unit_cannot_be_touched(layout: HostdLayout, name: str) -> None:
    with running_hostd(layout) as hostd:
        action = hostd.client.post(f"/services/{name}/stop", params={"confirm": name})
        add = hostd.client.post("/whitelist", json={"unit": name, "confirm": name.removesuffix(".service")})
        log = hostd.log()
    for refused in (action, add):
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "denied"
        assert refused.json()["error"]["pattern"]
    assert "result=refused" in log
    assert "whitelist add refused" in log
    assert layout.actions_run() == []


@pytest.mark.parametrize("name", ROOT_LEVEL_UNITS)
def test_root_level_units_cannot_be_whitelisted(layout: HostdLayout, name: str) -> None:
    unit_file = name if name.endswith(".service") else f"{name}.service"
    layout.units["system"].append(unit(unit_file))
    layout.write_fixtures()
    with running_hostd(layout) as hostd:
        add = hostd.client.post("/whitelist", json={"unit": name, "confirm": name.removesuffix(".service")})
        action = hostd.client.post(f"/services/{name}/start")
    for refused in (add, action):
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "denied"
    assert layout.actions_run() == []


def test_an_instance_needs_its_template_on_the_whitelist(layout: HostdLayout) -> None:
    with running_hostd(layout) as hostd:
        refused = hostd.client.post("/whitelist", json={"unit": "worker@1", "confirm": "worker@1"})
        template = hostd.client.post("/whitelist", json={"unit": "worker@.service", "confirm": "worker@"})
        added = hostd.client.post("/whitelist", json={"unit": "worker@1", "confirm": "worker@1"})
        started = hostd.client.post("/services/worker@1/start")
        hostd.client.delete("/whitelist/worker@")
        orphaned = hostd.client.post("/services/worker@1/start")
        log = hostd.log()
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "denied"
    assert refused.json()["error"]["pattern"] == TEMPLATE_INSTANCE_PATTERN
    assert "instance of worker@.service" in refused.json()["error"]["message"]
    assert template.status_code == 201, template.text
    assert added.status_code == 201, added.text
    assert started.status_code == 202, started.text
    # Taking the template off takes its instances' actions with it, and the next start drops them.
    assert orphaned.status_code == 403
    assert "whitelist add refused service=worker@1" in log
    assert len(layout.actions_run()) == 1
    with running_hostd(layout) as hostd:
        names = [s["entry"]["name"] for s in hostd.client.get("/services").json()["services"]]
        log = hostd.log()
    assert "worker@1" not in names
    assert "dropped worker@1 (worker@1.service)" in log


def test_unknown_names_and_actions_are_404_before_anything_runs(layout: HostdLayout) -> None:
    with running_hostd(layout) as hostd:
        unknown = hostd.client.post("/services/nginx/start")
        action = hostd.client.post("/services/smartd/explode")
        route = hostd.client.get("/nothing")
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "not_found"
    assert action.status_code == 404
    assert action.json()["error"]["code"] == "not_found"
    assert route.status_code == 404
    assert layout.actions_run() == []


BAD_NAMES = ["a/b", "../etc", "a b", "x;reboot", "$(id)", "a|b", "`id`", "a&b", "x\\y", "n" * 257]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_names_are_422_naming_the_field(layout: HostdLayout, name: str) -> None:
    segment = quote(name, safe="")  # as the agent's client sends it: one path segment
    with running_hostd(layout) as hostd:
        action = hostd.client.post(f"/services/{segment}/start")
        add = hostd.client.post("/whitelist", json={"unit": name, "confirm": name})
        patch = hostd.client.patch(f"/whitelist/{segment}", json={"displayName": "x"})
    assert (action.status_code, action.json()["error"]["field"]) == (422, "name")
    assert (add.status_code, add.json()["error"]["field"]) == (422, "unit")
    assert (patch.status_code, patch.json()["error"]["field"]) == (422, "name")
    assert layout.actions_run() == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"unit": "nginx", "scope": "global", "confirm": "nginx"}, "scope"),
        ({"unit": "nginx", "scope": "user", "user": "mallory", "confirm": "nginx"}, "user"),
        ({"unit": "nginx", "scope": "user", "confirm": "nginx"}, "user"),
        ({"unit": "nginx", "user": "alice", "confirm": "nginx"}, "user"),
        ({"unit": "nginx", "confirm": "nginx", "password": "hunter2"}, "password"),
        ({"unit": "nginx"}, "confirm"),
    ],
)
def test_bad_whitelist_adds_are_422_naming_the_field(
    layout: HostdLayout, body: dict[str, object], field: str
) -> None:
    with running_hostd(layout) as hostd:
        response = hostd.client.post("/whitelist", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field


def test_whitelist_add_update_remove_and_the_seed_is_merged_once(layout: HostdLayout) -> None:
    with running_hostd(layout) as hostd:
        wrong = hostd.client.post("/whitelist", json={"unit": "nginx", "confirm": "smartd"})
        added = hostd.client.post(
            "/whitelist", json={"unit": "nginx", "displayName": "Web", "confirm": "nginx"}
        )
        again = hostd.client.post("/whitelist", json={"unit": "nginx", "confirm": "nginx"})
        missing = hostd.client.post("/whitelist", json={"unit": "gone", "confirm": "gone"})
        started = hostd.client.post("/services/nginx/start")
        protect = hostd.client.patch("/whitelist/nginx", json={"protected": True})
        unprotect = hostd.client.patch("/whitelist/nginx", json={"protected": False})
        unprotected = hostd.client.patch("/whitelist/nginx", json={"protected": False, "confirm": "nginx"})
        removed = hostd.client.delete("/whitelist/smartd")
        log = hostd.log()
    assert wrong.status_code == 403
    assert wrong.json()["error"]["code"] == "confirm"
    assert added.status_code == 201
    assert added.json() == {
        "name": "nginx",
        "unit": "nginx.service",
        "displayName": "Web",
        "description": "nginx daemon",
    }
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "exists"
    assert missing.status_code == 409
    assert missing.json()["error"]["code"] == "unit_unavailable"
    assert started.status_code == 202
    assert protect.json()["protected"] is True
    assert unprotect.status_code == 403
    assert unprotect.json()["error"]["code"] == "confirm"
    assert unprotected.status_code == 200
    assert "protected" not in unprotected.json()
    assert removed.status_code == 200
    assert 'whitelist update service=nginx before={"description": "nginx daemon", "displayName": "Web"' in log
    assert "whitelist remove service=smartd" in log
    stored = json.loads(layout.whitelist.read_text())
    assert [entry["name"] for entry in stored["services"]] == ["nginx", "syncthing"]
    assert stored["seeded"] == ["smartd", "syncthing", "ssh"]

    # A later seed entry is merged once; smartd, removed on the page, stays removed.
    layout.write_seed(
        [
            {"name": "smartd", "unit": "smartd.service"},
            {"name": "idle", "unit": "idle.service"},
        ]
    )
    with running_hostd(layout) as hostd:
        names = [service["entry"]["name"] for service in hostd.client.get("/services").json()["services"]]
        hostd.client.delete("/whitelist/idle")
    assert names == ["idle", "nginx", "syncthing"]
    with running_hostd(layout) as hostd:
        names = [service["entry"]["name"] for service in hostd.client.get("/services").json()["services"]]
    assert names == ["nginx", "syncthing"]


def test_gpu_processes_name_their_container_or_unit(layout: HostdLayout) -> None:
    layout.gpu_apps = [
        {"pid": 100, "name": "python3", "used": 40000},
        {"pid": 101, "name": "python3", "used": 100},
        {"pid": 200, "name": "/usr/sbin/smartd", "used": 512},
        {"pid": 300, "name": "ollama", "used": 2048},
        {"pid": 400, "name": "gone", "used": 1},
    ]
    layout.write_fixtures()
    layout.write_cgroup(100, f"0::/system.slice/docker-{CONTAINER_ID}.scope\n")
    layout.write_cgroup(101, f"12:memory:/docker/{CONTAINER_ID}\n1:name=systemd:/docker/{CONTAINER_ID}\n")
    layout.write_cgroup(200, "0::/system.slice/smartd.service\n")
    layout.write_cgroup(300, "0::/user.slice/user-1000.slice/user@1000.service/app.slice/syncthing.service\n")
    with running_hostd(layout) as hostd:
        response = hostd.client.get("/gpu-processes")
    assert response.status_code == 200
    assert response.json() == [
        {"pid": 100, "name": "python3", "usedMiB": 40000.0, "containerId": CONTAINER_ID},
        {"pid": 101, "name": "python3", "usedMiB": 100.0, "containerId": CONTAINER_ID},
        {
            "pid": 200,
            "name": "/usr/sbin/smartd",
            "usedMiB": 512.0,
            "unit": "smartd.service",
            "displayName": "SMART disks",
        },
        {
            "pid": 300,
            "name": "ollama",
            "usedMiB": 2048.0,
            "unit": "syncthing.service",
            "displayName": "syncthing",
        },
        {"pid": 400, "name": "gone", "usedMiB": 1.0},
    ]
    assert json.loads(layout.gpu_log.read_text().splitlines()[-1]) == list(GPU_QUERY_ARGS)


def test_gpu_processes_are_503_when_nvidia_smi_fails(layout: HostdLayout) -> None:
    layout.write_fixtures(gpu_exit=9)
    with running_hostd(layout) as hostd:
        response = hostd.client.get("/gpu-processes")
        services = hostd.client.get("/services")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "gpu_unavailable"
    assert "couldn't communicate with the NVIDIA driver" in response.json()["error"]["message"]
    assert services.status_code == 200  # the page still lists services, with no GPU memory


def test_a_hung_systemctl_is_ended_by_the_action_bound(layout: HostdLayout) -> None:
    layout.write_fixtures(hanging=("start",), settings={"action_timeout_s": 1})
    with running_hostd(layout) as hostd:
        response = hostd.client.post("/services/smartd/start")
        log = hostd.log()
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "action_failed"
    assert "did not answer within 1 s" in response.json()["error"]["message"]
    assert "action service=smartd unit=smartd.service action=start result=failed" in log


def test_user_units_are_managed_only_for_discover_users(layout: HostdLayout) -> None:
    layout.write_seed(
        [{"name": "syncthing", "unit": "syncthing.service", "scope": "user", "user": "alice"}],
        discover_users=["bob"],
    )
    with running_hostd(layout) as hostd:
        response = hostd.client.post("/services/syncthing/start")
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "user"
    assert layout.actions_run() == []


def test_a_failing_action_is_502_with_systemctls_message(layout: HostdLayout) -> None:
    with running_hostd(layout) as hostd:
        hostd.client.post("/whitelist", json={"unit": "nginx", "confirm": "nginx"})
        state = json.loads(layout.systemctl_state.read_text())
        state["failing_actions"] = ["nginx.service"]
        layout.systemctl_state.write_text(json.dumps(state))
        response = hostd.client.post("/services/nginx/restart")
    assert response.status_code == 502
    assert "Failed to restart nginx.service" in response.json()["error"]["message"]
