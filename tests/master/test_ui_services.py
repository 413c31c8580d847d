"""The Services page in NiceGUI's user simulation, over a real agent app and a real hostd.

The stack is tests/master/test_api_services.py's: the master's "local" node is the real agent app whose
hostd runs as a real process with the stand-in systemctl, so every action the page takes is read back
from the stand-in's argv log. The container rows run over a real agent with the real dockerd (marker
``docker``): a throwaway container named and labelled by the test's own run id, read back from Docker.
"""

from __future__ import annotations

import gc
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from nicegui import ui
from nicegui.testing.user import User
from nicegui.testing.user_notify import UserNotify
from tests._support.docker_image import service_container
from tests._support.hostd import HostdLayout, hostd_layout, running_hostd, unit
from tests._support.polling import eventually
from tests.master._stack import Master, running_master
from tests.master.test_api_services import _RealAgent
from tests.master.test_ui_pages import portal_user

from mirbad_agent import AgentServices, HostServicesGateway, NodeRuntimes, create_app
from mirbad_master.services.page import (
    HOSTD_INSTALL,
    HOSTD_MISSING,
    SERVICES_REFRESH_S,
    SYSTEM_LABEL,
    discovered_order,
    listing_failure,
    refusal_text,
    service_nodes,
)
from mirbad_orchestration import AgentRequestError
from mirbad_orchestration.fleet import AgentTimeouts
from mirbad_protocol.hostd import DiscoveredService
from mirbad_runtime import ContainerServices, MemoryProbe

pytestmark = pytest.mark.anyio


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[HostdLayout]:
    with hostd_layout(tmp_path / "hostd") as made:
        made.units = {
            "system": [
                unit("smartd.service"),
                unit("nginx.service", file_state="disabled"),
                unit("ssh.service"),
                unit("cups.service", memory=900 * 1024 * 1024),
            ]
        }
        made.write_seed(
            [
                {"name": "smartd", "unit": "smartd.service", "protected": True},
                {"name": "nginx", "unit": "nginx.service"},
            ]
        )
        made.write_fixtures()
        yield made


def _local_agent(gateway: HostServicesGateway) -> tuple[AgentServices, Any]:
    """Node "local": the real agent app reaching hostd through ``gateway``, and the master's client of it."""
    services = AgentServices(
        runtimes=NodeRuntimes([]),
        memory=MemoryProbe(linux=False, fake_total_gib=16.0),
        node_name="local",
        version="0.0.test",
        host_services=gateway,
    )
    return services, _RealAgent(create_app(services, background=False))


@pytest.fixture
async def master(layout: HostdLayout, tmp_path: Path) -> AsyncIterator[Master]:
    layout.root.mkdir(parents=True, exist_ok=True)
    gateway = HostServicesGateway(layout.socket)
    services, agent = _local_agent(gateway)
    with running_hostd(layout):
        # The agent's lifespan probes hostd; the in-process app has none, so the flag is probed here.
        assert await gateway.probe()
        async with services, running_master(tmp_path, agent=lambda node_id: agent) as running:
            await eventually(lambda: "local" in service_nodes(running.services), timeout_s=10)
            yield running


@pytest.fixture
async def hostless_master(tmp_path: Path) -> AsyncIterator[Master]:
    """A master whose "local" agent looks for hostd at a socket where none listens (hostd not installed)."""
    gateway = HostServicesGateway(tmp_path / "no-hostd" / "hostd.sock")
    services, agent = _local_agent(gateway)
    assert not await gateway.probe()
    async with services, running_master(tmp_path, agent=lambda node_id: agent) as running:
        await eventually(lambda: running.services.cache.node("local") is not None, timeout_s=10)
        yield running


@pytest.fixture
def container(docker_client: Any, image: str) -> Iterator[str]:
    """A running container of this test's own (the dockerd is shared), restart policy ``always``."""
    run_id = f"uisvc-{uuid.uuid4().hex[:10]}"
    with service_container(docker_client, image, f"{run_id}-db", run_id, restart="always") as name:
        yield name


@pytest.fixture
async def container_master(tmp_path: Path, container: str) -> AsyncIterator[Master]:
    """A master whose "local" node is a real agent app over the real dockerd; ``container`` whitelisted."""
    services = AgentServices(
        runtimes=NodeRuntimes([]),
        memory=MemoryProbe(linux=False, fake_total_gib=16.0),
        node_name="local",
        version="0.0.test",
        host_containers=ContainerServices(),
    )
    agent: Any = _RealAgent(create_app(services, background=False))
    # Real Docker calls on a shared dockerd: the stack's 2 s bounds are for fake agents.
    timeouts = AgentTimeouts(connect_s=5, read_s=30, start_s=60, stop_s=90)
    async with services, running_master(tmp_path, agent=lambda node_id: agent, timeouts=timeouts) as running:
        await eventually(lambda: "local" in service_nodes(running.services), timeout_s=30)
        added = await running.admin.post(
            "/api/nodes/local/host/containers", json={"name": container, "confirm": container}
        )
        assert added.status_code == 201, added.text
        yield running


async def _docker_state(docker_client: Any, name: str) -> tuple[str, str, str]:
    """The container's status, its restart policy and when it last started, as Docker says."""
    attrs = (await anyio.to_thread.run_sync(docker_client.containers.get, name)).attrs
    return attrs["State"]["Status"], attrs["HostConfig"]["RestartPolicy"]["Name"], attrs["State"]["StartedAt"]


async def _docker_until(docker_client: Any, name: str, holds: Callable[[tuple[str, str, str]], bool]) -> None:
    # Docker is asked off the event loop: the page's own handlers run on it meanwhile.
    with anyio.fail_after(60):
        while not holds(await _docker_state(docker_client, name)):  # noqa: ASYNC110 - nothing signals it
            await anyio.sleep(0.2)


def _switch(user: User, marker: str) -> ui.switch:
    # Looked up afresh each time: every action redraws the rows, switches included.
    return next(e for e in user.find(marker=marker).elements if isinstance(e, ui.switch))


def _ran(layout: HostdLayout, verb: str, unit_name: str) -> bool:
    return any(verb in argv and unit_name in argv for argv in layout.actions_run())


def _shown(user: User, marker: str) -> bool:
    try:
        return bool(user.find(marker=marker).elements)
    except AssertionError:
        return False


def _text(user: User, marker: str) -> str:
    return " ".join(e.text for e in user.find(marker=marker).elements if isinstance(e, ui.label))


def _stop_timers(user: User) -> list[ui.timer]:
    """Stop the page's timers (its periodic refresh); return them."""
    timers: list[ui.timer] = []
    for timer in user.find(kind=ui.timer).elements:
        assert isinstance(timer, ui.timer)
        timer.deactivate()
        timers.append(timer)
    return timers


def _notified(user: User, text: str) -> bool:
    return any(text in str(message) for message in user.notify.messages)


async def test_a_whitelisted_unit_is_stopped_started_and_autostarted(
    master: Master, layout: HostdLayout
) -> None:
    async with portal_user(master) as user:
        await user.open("/services")
        await user.should_see(marker="unit-nginx")
        user.find(marker="unit-stop-nginx").click()
        await eventually(lambda: _ran(layout, "stop", "nginx.service"), timeout_s=10)
        user.find(marker="unit-start-nginx").click()
        await eventually(lambda: _ran(layout, "start", "nginx.service"), timeout_s=10)
        switch = next(
            e for e in user.find(marker="unit-autostart-nginx").elements if isinstance(e, ui.switch)
        )
        switch.set_value(True)
        await eventually(lambda: _ran(layout, "enable", "nginx.service"), timeout_s=10)


async def test_a_protected_unit_refuses_without_its_typed_name(master: Master, layout: HostdLayout) -> None:
    async with portal_user(master) as user:
        await user.open("/services")
        await user.should_see(marker="unit-smartd")
        user.find(marker="unit-stop-smartd").click()
        await user.should_see(marker="confirm-dialog")
        user.find(marker="confirm-input").type("smart")
        user.find(marker="confirm-ok").click()
        await eventually(lambda: _notified(user, "smartd"), timeout_s=10)
        assert layout.actions_run() == []
        user.find(marker="unit-stop-smartd").click()
        await user.should_see(marker="confirm-dialog")
        user.find(marker="confirm-input").type("smartd")
        user.find(marker="confirm-ok").click()
        await eventually(lambda: _ran(layout, "stop", "smartd.service"), timeout_s=10)


class _ContextNotify(UserNotify):
    """The simulation's notify, but needing its caller's context as the real ``ui.notify`` does.

    The real one reads ``context.client``, which fails in the slot of a deleted element; the
    simulation's own only records the message, so a handler whose row was redrawn passed here.
    """

    def __call__(self, message: str, **kwargs: Any) -> None:
        assert ui.context.client is not None  # raises RuntimeError in a deleted element's slot
        super().__call__(message, **kwargs)


async def test_an_action_whose_row_was_redrawn_meanwhile_still_reports_and_redraws(
    master: Master, layout: HostdLayout
) -> None:
    async with portal_user(master) as user:
        user.notify = _ContextNotify()
        await user.open("/services")
        await user.should_see(marker="unit-smartd")
        # Only the actions redraw in this test: the page's own refresh would hide a missed redraw.
        _stop_timers(user)
        user.find(marker="unit-stop-smartd").click()
        await user.should_see(marker="confirm-dialog")
        # While the name is being typed another action redraws every row, the one that opened the dialog too.
        user.find(marker="unit-stop-nginx").click()
        await eventually(lambda: _text(user, "unit-state-nginx") == "inactive (dead)", timeout_s=10)
        # The deleted rows sit in reference cycles: collected whenever the collector runs, so now.
        gc.collect()
        user.find(marker="confirm-input").type("smartd")
        user.find(marker="confirm-ok").click()
        await eventually(lambda: _ran(layout, "stop", "smartd.service"), timeout_s=10)
        await eventually(lambda: _notified(user, "smartd: stop queued"), timeout_s=10)
        await eventually(lambda: _text(user, "unit-state-smartd") == "inactive (dead)", timeout_s=10)


async def test_a_refresh_that_finds_nothing_changed_keeps_the_rows(
    master: Master, layout: HostdLayout
) -> None:
    async with portal_user(master) as user:
        await user.open("/services")
        await user.should_see(marker="unit-smartd")
        [services_timer] = [t for t in _stop_timers(user) if t.interval == SERVICES_REFRESH_S]
        before = {e.id for e in user.find(marker="unit-stop-smartd").elements}

        # The page's own refresh, run to its end: a row rebuilt for nothing loses a click landing on it.
        with user:
            await services_timer.callback()  # type: ignore[misc]

        assert {e.id for e in user.find(marker="unit-stop-smartd").elements} == before
        user.find(marker="unit-stop-nginx").click()
        await eventually(lambda: _text(user, "unit-state-nginx") == "inactive (dead)", timeout_s=10)
        assert {e.id for e in user.find(marker="unit-stop-smartd").elements} != before  # a change redraws


async def test_the_discovered_tab_shows_denied_units_read_only(master: Master, layout: HostdLayout) -> None:
    async with portal_user(master) as user:
        await user.open("/services")
        await user.should_see(marker="services-local")
        await user.should_not_see(marker="discovered-unit-ssh.service")  # loaded only once opened
        tabs = next(e for e in user.find(marker="services-tabs-local").elements if isinstance(e, ui.tabs))
        tabs.set_value("Discovered")
        await eventually(lambda: _shown(user, "discovered-unit-ssh.service"), timeout_s=20)
        await user.should_see(f"{SYSTEM_LABEL} (ssh")  # read-only, with the pattern that denies it
        assert _shown(user, "add-unit-cups.service")
        user.find(marker="add-unit-cups.service").click()
        await user.should_see(marker="confirm-dialog")
        user.find(marker="confirm-input").type("cups")
        user.find(marker="confirm-ok").click()
        await eventually(lambda: _notified(user, "cups.service whitelisted"), timeout_s=10)


@pytest.mark.docker
async def test_a_whitelisted_container_is_stopped_started_restarted_and_autostarted(
    container_master: Master, container: str, docker_client: Any
) -> None:
    name = container
    async with portal_user(container_master) as user:
        await user.open("/services")
        await user.should_see(marker=f"container-{name}", retries=100)
        user.find(marker=f"container-stop-{name}").click()
        await _docker_until(docker_client, name, lambda state: state[0] == "exited")
        await eventually(lambda: _notified(user, f"{name}: stop done"), timeout_s=30)
        user.find(marker=f"container-start-{name}").click()
        await _docker_until(docker_client, name, lambda state: state[0] == "running")
        started = (await _docker_state(docker_client, name))[2]
        user.find(marker=f"container-restart-{name}").click()
        await _docker_until(docker_client, name, lambda state: state[2] != started)
        await eventually(lambda: _notified(user, f"{name}: restart done"), timeout_s=30)

        # Off sets Docker's policy to `no` and remembers `always`; on restores it.
        await eventually(lambda: _switch(user, f"container-autostart-{name}").value is True, timeout_s=30)
        _switch(user, f"container-autostart-{name}").set_value(False)
        await _docker_until(docker_client, name, lambda state: state[1] == "no")
        await eventually(lambda: _notified(user, f"{name}: autostart off"), timeout_s=30)
        await eventually(lambda: _switch(user, f"container-autostart-{name}").value is False, timeout_s=30)
        _switch(user, f"container-autostart-{name}").set_value(True)
        await _docker_until(docker_client, name, lambda state: state[1] == "always")


async def test_a_node_without_hostd_says_so_with_the_line_that_installs_it(hostless_master: Master) -> None:
    listed = await hostless_master.admin.get("/api/nodes/local/host/services")

    async with portal_user(hostless_master) as user:
        await user.open("/services")
        await user.should_see(marker="hostd-missing-local")
        await user.should_see(HOSTD_MISSING)
        await user.should_see(HOSTD_INSTALL)
        await user.should_not_see("Nothing whitelisted yet: see Discovered.")

    assert listed.status_code == 503
    assert listed.json()["error"]["code"] == "hostd_unavailable"


def test_a_hostd_that_went_away_reads_as_missing_not_as_a_raw_refusal() -> None:
    gone = AgentRequestError("local", 503, "hostd_unavailable", "hostd does not answer at /run/x.sock")
    denied = AgentRequestError("local", 403, "denied", "ssh.service is denied", pattern="ssh*")

    assert listing_failure(gone) == HOSTD_MISSING
    assert listing_failure(denied) == "node 'local': ssh.service is denied (deny pattern 'ssh*')"


def test_discovered_units_are_sorted_by_ram_plus_gpu_largest_first() -> None:
    small = DiscoveredService(unit="a.service", memory_bytes=1024**2)
    gpu = DiscoveredService(unit="b.service", memory_bytes=None, gpu_memory_mib=512.0)
    big = DiscoveredService(unit="c.service", memory_bytes=1024**3)
    assert [s.unit for s in discovered_order([small, gpu, big])] == ["c.service", "b.service", "a.service"]


def test_a_refusal_shows_the_deny_pattern_the_node_named() -> None:
    # The pattern is a field of the refusal: shown even where the message does not spell it out.
    terse = AgentRequestError("local", 403, "denied", "sshd is not manageable", pattern="sshd*")
    assert refusal_text(terse) == "node 'local': sshd is not manageable (deny pattern 'sshd*')"
    worded = AgentRequestError("local", 403, "denied", "sshd: deny pattern 'sshd*'", pattern="sshd*")
    assert refusal_text(worded) == "node 'local': sshd: deny pattern 'sshd*'"
