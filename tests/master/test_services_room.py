"""The services room: a host-service change through ``/api`` and through the portal reads the same.

Each scenario runs twice over a real agent app whose hostd is a real process with the stand-in
systemctl (tests/master/test_api_services.py's stack): once over HTTP, once through the room's actions
as the portal calls them; the ``host.*`` audit lines and the refusals must match. One test drives the
Services page itself, whose actions used to write no audit line at all; the container changes run
over the real dockerd (marker ``docker``).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from nicegui import ui
from tests._support.docker_image import service_container
from tests._support.hostd import hostd_layout, running_hostd, unit
from tests._support.polling import eventually
from tests.master._rooms import api_refusal, audit_lines, ok, portal_refusal
from tests.master._stack import Master, running_master
from tests.master.test_api_services import _RealAgent
from tests.master.test_ui_pages import portal_user

from mirbad_agent import AgentServices, HostServicesGateway, NodeRuntimes, create_app
from mirbad_master.services import actions
from mirbad_master.services.page import service_nodes
from mirbad_master.ui._refusals import PORTAL_ACTOR
from mirbad_orchestration.fleet import AgentTimeouts
from mirbad_protocol.hostd import WhitelistAdd, WhitelistUpdate
from mirbad_runtime import ContainerServices, MemoryProbe

pytestmark = pytest.mark.anyio

UNITS = "/api/nodes/local/host/services"
WHITELIST = "/api/nodes/local/host/whitelist"
CONTAINERS = "/api/nodes/local/host/containers"


@asynccontextmanager
async def hostd_master(root: Path) -> AsyncIterator[Master]:
    """A master whose "local" node is the real agent app over a hostd of its own under ``root``."""
    with hostd_layout(root / "hostd") as layout:
        layout.units = {
            "system": [
                unit("smartd.service"),
                unit("nginx.service"),
                unit("ssh.service"),
                unit("cups.service"),
            ]
        }
        layout.write_seed(
            [
                {"name": "smartd", "unit": "smartd.service", "protected": True},
                {"name": "nginx", "unit": "nginx.service"},
            ]
        )
        layout.write_fixtures()
        layout.root.mkdir(parents=True, exist_ok=True)
        gateway = HostServicesGateway(layout.socket)
        services = AgentServices(
            runtimes=NodeRuntimes([]),
            memory=MemoryProbe(linux=False, fake_total_gib=16.0),
            node_name="local",
            version="0.0.test",
            host_services=gateway,
        )
        agent: Any = _RealAgent(create_app(services, background=False))
        with running_hostd(layout):
            assert await gateway.probe()
            async with services, running_master(root / "master", agent=lambda node_id: agent) as master:
                yield master


def host_lines(
    lines: list[tuple[str, str, str, str | None, str]],
) -> list[tuple[str, str, str, str | None, str]]:
    return [line for line in lines if line[1].startswith("host.")]


async def test_unit_and_whitelist_changes_leave_the_same_audit_lines(tmp_path: Path) -> None:
    async with hostd_master(tmp_path / "api") as master:
        api = master.admin
        await ok(api.post(f"{UNITS}/nginx/stop"))
        await ok(api.post(f"{UNITS}/nginx/start"))
        await ok(api.post(f"{UNITS}/nginx/enable"))
        await ok(api.post(f"{UNITS}/smartd/restart", params={"confirm": "smartd"}))
        await ok(api.post(WHITELIST, json={"unit": "cups", "confirm": "cups"}))
        await ok(api.patch(f"{WHITELIST}/cups", json={"displayName": "Printing"}))
        await ok(api.patch(f"{WHITELIST}/smartd", json={"protected": False, "confirm": "smartd"}))
        await ok(api.delete(f"{WHITELIST}/cups"))
        through_the_api = host_lines(await audit_lines(master))

    async with hostd_master(tmp_path / "portal") as master:
        services = master.services
        await actions.unit_action(services, "local", "nginx", "stop", PORTAL_ACTOR)
        await actions.unit_action(services, "local", "nginx", "start", PORTAL_ACTOR)
        await actions.unit_action(services, "local", "nginx", "enable", PORTAL_ACTOR)
        await actions.unit_action(services, "local", "smartd", "restart", PORTAL_ACTOR, confirm="smartd")
        await actions.add_unit(services, "local", WhitelistAdd(unit="cups", confirm="cups"), PORTAL_ACTOR)
        await actions.update_unit(
            services, "local", "cups", WhitelistUpdate(display_name="Printing"), PORTAL_ACTOR
        )
        unprotect = WhitelistUpdate(protected=False, confirm="smartd")
        await actions.update_unit(services, "local", "smartd", unprotect, PORTAL_ACTOR)
        await actions.remove_unit(services, "local", "cups", PORTAL_ACTOR)
        through_the_portal = host_lines(await audit_lines(master))

    assert through_the_portal == through_the_api
    assert [line[1] for line in through_the_api] == [
        "host.unit.stop",
        "host.unit.start",
        "host.unit.enable",
        "host.unit.restart",
        "host.whitelist.add",
        "host.whitelist.update",
        "host.whitelist.update",
        "host.whitelist.remove",
    ]
    assert {line[0] for line in through_the_api} == {PORTAL_ACTOR}


async def test_the_same_refusals_come_back_and_leave_no_audit_line(tmp_path: Path) -> None:
    async with hostd_master(tmp_path / "api") as master:
        api = master.admin
        by_api = [
            api_refusal(await api.post(f"{UNITS}/smartd/stop")),
            api_refusal(await api.post(f"{UNITS}/smartd/explode")),
            api_refusal(await api.post(f"{UNITS}/a;b/start")),
            api_refusal(await api.post(f"{UNITS}/ssh/start")),
            api_refusal(await api.post(WHITELIST, json={"unit": "ssh", "confirm": "ssh"})),
            api_refusal(await api.patch(f"{WHITELIST}/smartd", json={"protected": False})),
            api_refusal(await api.post(f"{CONTAINERS}/postgres/stop")),
            api_refusal(await api.put(f"{CONTAINERS}/postgres/autostart", json={"enabled": False})),
            api_refusal(await api.post(f"{CONTAINERS}/a b/stop")),
            api_refusal(await api.post(CONTAINERS, json={"name": "postgres", "confirm": "other"})),
        ]
        denied = (await api.post(f"{UNITS}/ssh/start")).json()["error"]
        audit_api = host_lines(await audit_lines(master))

    async with hostd_master(tmp_path / "portal") as master:
        services = master.services

        def change(
            action: Callable[..., Awaitable[object]], *args: Any, **kwargs: Any
        ) -> Callable[[], Awaitable[object]]:
            return lambda: action(services, "local", *args, **kwargs)

        by_portal = [
            await portal_refusal(change(actions.unit_action, "smartd", "stop", PORTAL_ACTOR)),
            await portal_refusal(change(actions.unit_action, "smartd", "explode", PORTAL_ACTOR)),
            await portal_refusal(change(actions.unit_action, "a;b", "start", PORTAL_ACTOR)),
            await portal_refusal(change(actions.unit_action, "ssh", "start", PORTAL_ACTOR)),
            await portal_refusal(
                change(actions.add_unit, WhitelistAdd(unit="ssh", confirm="ssh"), PORTAL_ACTOR)
            ),
            await portal_refusal(
                change(actions.update_unit, "smartd", WhitelistUpdate(protected=False), PORTAL_ACTOR)
            ),
            await portal_refusal(change(actions.container_action, "postgres", "stop", PORTAL_ACTOR)),
            await portal_refusal(change(actions.container_autostart, "postgres", False, PORTAL_ACTOR)),
            await portal_refusal(change(actions.container_action, "a b", "stop", PORTAL_ACTOR)),
            await portal_refusal(change(actions.add_container, "postgres", PORTAL_ACTOR, confirm="other")),
        ]
        audit_portal = host_lines(await audit_lines(master))

    assert by_portal == by_api
    assert [(r.status, r.code) for r in by_api[:4]] == [
        (403, "confirm"),
        (404, "service_not_found"),
        (422, "invalid_request"),
        (403, "denied"),
    ]
    # The deny pattern is a field of the API's answer, and named in the message both ways.
    assert denied["pattern"] == "ssh*"
    assert "ssh*" in by_portal[3].message
    assert audit_api == audit_portal == []


async def test_the_services_page_audits_what_it_changes(tmp_path: Path) -> None:
    async with hostd_master(tmp_path / "api") as master:
        await ok(master.admin.post(f"{UNITS}/nginx/stop"))
        await ok(master.admin.post(WHITELIST, json={"unit": "cups", "confirm": "cups"}))
        through_the_api = host_lines(await audit_lines(master))

    async with hostd_master(tmp_path / "page") as master:
        await eventually(lambda: "local" in service_nodes(master.services), timeout_s=10)
        async with portal_user(master) as user:
            await user.open("/services")
            await user.should_see(marker="unit-nginx")
            user.find(marker="unit-stop-nginx").click()
            await eventually(
                lambda: any(m == "nginx: stop queued" for m in map(str, user.notify.messages)), timeout_s=10
            )
            tabs = next(e for e in user.find(marker="services-tabs-local").elements if isinstance(e, ui.tabs))
            tabs.set_value("Discovered")
            await user.should_see(marker="add-unit-cups.service", retries=100)
            user.find(marker="add-unit-cups.service").click()
            await user.should_see(marker="confirm-dialog")
            user.find(marker="confirm-input").type("cups")
            user.find(marker="confirm-ok").click()
            await eventually(
                lambda: any("cups.service whitelisted" in str(m) for m in user.notify.messages), timeout_s=10
            )
        through_the_page = host_lines(await audit_lines(master))

    assert through_the_page == through_the_api
    assert [line[1] for line in through_the_page] == ["host.unit.stop", "host.whitelist.add"]


@pytest.fixture
def container(docker_client: Any, image: str) -> Iterator[str]:
    """A running container of this test's own (the dockerd is shared), restart policy ``always``."""
    run_id = f"svcroom-{uuid.uuid4().hex[:10]}"
    with service_container(docker_client, image, f"{run_id}-db", run_id, restart="always") as name:
        yield name


@pytest.mark.docker
async def test_container_changes_leave_the_same_audit_lines(tmp_path: Path, container: str) -> None:
    services = AgentServices(
        runtimes=NodeRuntimes([]),
        memory=MemoryProbe(linux=False, fake_total_gib=16.0),
        node_name="local",
        version="0.0.test",
        host_containers=ContainerServices(),
    )
    agent: Any = _RealAgent(create_app(services, background=False))
    timeouts = AgentTimeouts(connect_s=5, read_s=30, start_s=60, stop_s=90)
    name = container
    async with services, running_master(tmp_path, agent=lambda node_id: agent, timeouts=timeouts) as master:
        await eventually(lambda: "local" in service_nodes(master.services), timeout_s=30)
        api = master.admin
        await ok(api.post(CONTAINERS, json={"name": name, "confirm": name, "protected": True}))
        await ok(api.post(f"{CONTAINERS}/{name}/restart", params={"confirm": name}))
        await ok(api.put(f"{CONTAINERS}/{name}/autostart", json={"enabled": False, "confirm": name}))
        await ok(api.put(f"{CONTAINERS}/{name}/autostart", json={"enabled": True}))
        await ok(api.patch(f"{CONTAINERS}/{name}", json={"protected": False, "confirm": name}))
        await ok(api.delete(f"{CONTAINERS}/{name}"))
        through_the_api = host_lines(await audit_lines(master))

        room = master.services
        await actions.add_container(room, "local", name, PORTAL_ACTOR, confirm=name, protected=True)
        await actions.container_action(room, "local", name, "restart", PORTAL_ACTOR, confirm=name)
        await actions.container_autostart(room, "local", name, False, PORTAL_ACTOR, confirm=name)
        await actions.container_autostart(room, "local", name, True, PORTAL_ACTOR)
        await actions.update_container(room, "local", name, PORTAL_ACTOR, protected=False, confirm=name)
        await actions.remove_container(room, "local", name, PORTAL_ACTOR)
        through_the_portal = host_lines(await audit_lines(master))[len(through_the_api) :]

    assert through_the_portal == through_the_api
    assert [line[1] for line in through_the_api] == [
        "host.containers.add",
        "host.container.restart",
        "host.container.autostart.off",
        "host.container.autostart.on",
        "host.containers.update",
        "host.containers.remove",
    ]
