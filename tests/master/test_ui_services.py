"""The Services page in NiceGUI's user simulation, over a real agent app and a real hostd.

The stack is tests/master/test_api_services.py's: the master's "local" node is the real agent app whose
hostd runs as a real process with the stand-in systemctl, so every action the page takes is read back
from the stand-in's argv log. (Containers need the agent's Docker: not covered here.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from nicegui import ui
from nicegui.testing.user import User
from tests._support.hostd import HostdLayout, hostd_layout, running_hostd, unit
from tests._support.polling import eventually
from tests.master._stack import Master, running_master
from tests.master.test_api_services import _RealAgent
from tests.master.test_ui_pages import portal_user

from mirbad_agent import AgentServices, HostServicesGateway, NodeRuntimes, create_app
from mirbad_master.ui._services import SYSTEM_LABEL, discovered_order, refusal_text, service_nodes
from mirbad_orchestration import AgentRequestError
from mirbad_protocol import DiscoveredService
from mirbad_runtime import MemoryProbe

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


@pytest.fixture
async def master(layout: HostdLayout, tmp_path: Path) -> AsyncIterator[Master]:
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
        # The agent's lifespan probes hostd; the in-process app has none, so the flag is probed here.
        assert await gateway.probe()
        async with services, running_master(tmp_path, agent=lambda node_id: agent) as running:
            await eventually(lambda: "local" in service_nodes(running.services), timeout_s=10)
            yield running


def _ran(layout: HostdLayout, verb: str, unit_name: str) -> bool:
    return any(verb in argv and unit_name in argv for argv in layout.actions_run())


def _shown(user: User, marker: str) -> bool:
    try:
        return bool(user.find(marker=marker).elements)
    except AssertionError:
        return False


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
