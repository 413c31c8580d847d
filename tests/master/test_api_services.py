"""``/api/nodes/{node}/host/...`` over a real agent app and a real hostd on its unix socket.

The master is the whole in-process stack (tests/master/_stack.py); its "local" node is the real agent
app (not a fake), whose hostd runs as a real process with the stand-in systemctl.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from tests._support.hostd import ROOT_LEVEL_UNITS, HostdLayout, hostd_layout, running_hostd, unit
from tests.master._stack import Master, running_master

from mirbad_agent import AgentServices, HostServicesGateway, NodeRuntimes, create_app
from mirbad_runtime import MemoryProbe

pytestmark = pytest.mark.anyio

UNITS = "/api/nodes/local/host/services"


@dataclass
class _RealAgent:
    app: Starlette


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[HostdLayout]:
    with hostd_layout(tmp_path / "hostd") as made:
        made.units = {"system": [unit("smartd.service"), unit("nginx.service"), unit("ssh.service")]}
        made.write_seed([{"name": "smartd", "unit": "smartd.service", "protected": True}])
        made.write_fixtures()
        yield made


@pytest.fixture
async def master(layout: HostdLayout, tmp_path: Path) -> AsyncIterator[Master]:
    layout.root.mkdir(parents=True, exist_ok=True)
    services = AgentServices(
        runtimes=NodeRuntimes([]),
        memory=MemoryProbe(linux=False, fake_total_gib=16.0),
        node_name="local",
        version="0.0.test",
        host_services=HostServicesGateway(layout.socket),
    )
    agent: Any = _RealAgent(create_app(services, background=False))
    with running_hostd(layout):
        async with services, running_master(tmp_path, agent=lambda node_id: agent) as running:
            yield running


def _error(response: httpx.Response) -> tuple[int, str, str | None]:
    error = response.json()["error"]
    return response.status_code, error["code"], error.get("field")


async def test_units_and_actions_go_through_the_nodes_agent(master: Master, layout: HostdLayout) -> None:
    listing = (await master.admin.get(UNITS)).json()
    assert [s["entry"]["name"] for s in listing["services"]] == ["smartd"]
    everything = (await master.admin.get(UNITS, params={"include": "all"})).json()
    assert "ssh*" in everything["denyPatterns"]
    assert _error(await master.admin.post(f"{UNITS}/smartd/stop")) == (403, "confirm", "confirm")
    assert layout.actions_run() == []
    assert (await master.admin.post(f"{UNITS}/smartd/stop", params={"confirm": "smartd"})).status_code == 202
    assert len(layout.actions_run()) == 1


async def test_bad_input_is_refused_by_name(master: Master, layout: HostdLayout) -> None:
    assert _error(await master.admin.post(f"{UNITS}/smartd/explode"))[:2] == (404, "service_not_found")
    assert _error(await master.admin.post(f"{UNITS}/a;b/start")) == (422, "invalid_request", "name")
    assert _error(await master.admin.post(f"{UNITS}/{'a' * 300}/start")) == (422, "invalid_request", "name")
    assert _error(await master.admin.get(UNITS, params={"include": "x"}))[2] == "include"
    whitelist = "/api/nodes/local/host/whitelist"
    bad_scope = await master.admin.post(whitelist, json={"unit": "nginx", "confirm": "nginx", "scope": "x"})
    assert _error(bad_scope) == (422, "invalid_request", "scope")
    assert _error(await master.admin.post(f"{UNITS}/unknown/start"))[:2] == (404, "service_not_found")
    assert _error(await master.admin.get("/api/nodes/nowhere/host/services"))[:2] == (404, "node_not_found")
    assert layout.actions_run() == []


async def test_whitelist_changes_take_the_session_not_the_body(master: Master) -> None:
    whitelist = "/api/nodes/local/host/whitelist"
    # Password fields are ignored (not refused, not checked): the request's own credentials count.
    added = await master.admin.post(
        whitelist, json={"unit": "nginx", "confirm": "nginx", "password": "wrong", "adminPassword": "x"}
    )
    assert added.status_code == 201
    assert added.json()["name"] == "nginx"
    denied = await master.admin.post(whitelist, json={"unit": "ssh", "confirm": "ssh"})
    assert _error(denied)[:2] == (403, "denied")
    unprotect = await master.admin.patch(f"{whitelist}/smartd", json={"protected": False})
    assert _error(unprotect) == (403, "confirm", "confirm")
    body = {"protected": False, "confirm": "smartd"}
    confirmed = await master.admin.patch(f"{whitelist}/smartd", json=body)
    assert confirmed.json()["name"] == "smartd"
    # Without a session or password nothing changes: the admin guard refuses before any route runs.
    assert (await master.anonymous.delete(f"{whitelist}/nginx")).status_code == 401
    assert (await master.admin.delete(f"{whitelist}/nginx")).status_code == 200


async def test_a_denied_unit_names_its_deny_pattern(master: Master, layout: HostdLayout) -> None:
    # hostd names the pattern; the agent passes it on; the admin API's 403 carries it as its own field.
    for refused in (
        await master.admin.post("/api/nodes/local/host/whitelist", json={"unit": "ssh", "confirm": "ssh"}),
        await master.admin.post(f"{UNITS}/ssh/start"),
    ):
        assert _error(refused)[:2] == (403, "denied")
        assert refused.json()["error"]["pattern"] == "ssh*"
    assert layout.actions_run() == []


async def test_root_level_units_are_denied_through_the_master(master: Master, layout: HostdLayout) -> None:
    # issue 31 item 13: the master's API passes hostd's refusal on for every one of them.
    units = [f"{name.removesuffix('.service')}.service" for name in ROOT_LEVEL_UNITS]
    layout.units["system"].extend(unit(name) for name in units)
    layout.write_fixtures()
    for name in ROOT_LEVEL_UNITS:
        body = {"unit": name, "confirm": name.removesuffix(".service")}
        added = await master.admin.post("/api/nodes/local/host/whitelist", json=body)
        started = await master.admin.post(f"{UNITS}/{name}/start")
        assert _error(added)[:2] == (403, "denied"), (name, added.text)
        assert _error(started)[:2] == (403, "denied"), (name, started.text)
    # An instance of a template the operator has not whitelisted (its argument is the caller's choice).
    layout.units["system"].append(unit("worker@1.service"))
    layout.write_fixtures()
    instance = await master.admin.post(
        "/api/nodes/local/host/whitelist", json={"unit": "worker@1", "confirm": "worker@1"}
    )
    assert _error(instance)[:2] == (403, "denied")
    assert instance.json()["error"]["pattern"] == "*@*"
    assert layout.actions_run() == []


async def test_containers_outside_the_whitelist_are_refused_before_the_node(master: Master) -> None:
    base = "/api/nodes/local/host/containers"
    assert _error(await master.admin.post(f"{base}/postgres/stop"))[:2] == (403, "not_whitelisted")
    autostart = await master.admin.put(f"{base}/postgres/autostart", json={"enabled": False})
    assert _error(autostart)[:2] == (403, "not_whitelisted")
    assert _error(await master.admin.post(f"{base}/postgres/explode"))[:2] == (404, "service_not_found")
    assert _error(await master.admin.post(f"{base}/a b/stop")) == (422, "invalid_request", "name")
    add = await master.admin.post(base, json={"name": "postgres", "confirm": "other"})
    assert _error(add) == (403, "confirm", "confirm")
