"""The Services page in a real browser: units through a real hostd, containers on the real dockerd.

The session's ``mirbad up`` (conftest.py) runs its local agent against the session's hostd, whose
stand-in systemctl records every action's argv and changes its units the way systemd would, so each
click is read back twice: on the page (the row's state) and in the argv log. The container is a
throwaway one of this test's own, named and labelled by its run id (the dockerd is shared by parallel
tests); its state and restart policy are read back from Docker.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from tests._support.docker_image import service_container
from tests._support.hostd import HostdLayout
from tests._support.older_node import enrolled_older_agent
from tests.browser._portal import sign_in

from mirbad_master.services.page import HOSTD_INSTALL, SYSTEM_LABEL

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from tests.browser.conftest import RunningMaster

pytestmark = pytest.mark.browser

WAIT_S = 60.0
"""The bound of every wait on Docker and on the stand-in's argv log."""
WAIT_MS = round(WAIT_S * 1000)
"""The same for what the page shows after an action (each one goes master -> agent -> hostd/Docker)."""


def _hostd(master: RunningMaster) -> HostdLayout:
    assert master.hostd is not None, "the session's master runs with a hostd"
    return master.hostd


def _until(condition: Callable[[], bool], what: Callable[[], str]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_S:g} s: {what()}")
        time.sleep(0.1)


def _ran(layout: HostdLayout, verb: str, unit_name: str) -> bool:
    return any(verb in argv and unit_name in argv for argv in layout.actions_run())


def _wait_ran(layout: HostdLayout, verb: str, unit_name: str) -> None:
    _until(lambda: _ran(layout, verb, unit_name), lambda: f"{verb} {unit_name}: {layout.actions_run()}")


def _services_page(page: Page, master: RunningMaster) -> None:
    from playwright.sync_api import expect

    sign_in(page, master, "/services")
    # The card appears once the master has read the node's feature flags (host.services).
    expect(page.get_by_test_id("services-local")).to_be_visible(timeout=WAIT_MS)


def test_a_whitelisted_unit_is_stopped_started_and_its_autostart_toggled(
    page: Page, master: RunningMaster
) -> None:
    from playwright.sync_api import expect

    layout = _hostd(master)
    _services_page(page, master)
    state = page.get_by_test_id("unit-state-nginx")
    expect(state).to_have_text("active (running)", timeout=WAIT_MS)
    page.get_by_test_id("unit-stop-nginx").click()
    expect(state).to_have_text("inactive (dead)", timeout=WAIT_MS)
    _wait_ran(layout, "stop", "nginx.service")
    page.get_by_test_id("unit-start-nginx").click()
    expect(state).to_have_text("active (running)", timeout=WAIT_MS)
    _wait_ran(layout, "start", "nginx.service")

    switch = page.get_by_test_id("unit-autostart-nginx")
    expect(switch).to_have_attribute("aria-checked", "false")  # its unit file is disabled
    switch.click()
    _wait_ran(layout, "enable", "nginx.service")
    expect(page.get_by_test_id("unit-autostart-nginx")).to_have_attribute(
        "aria-checked", "true", timeout=WAIT_MS
    )
    page.get_by_test_id("unit-autostart-nginx").click()  # not protected: no dialog
    _wait_ran(layout, "disable", "nginx.service")
    expect(page.get_by_test_id("unit-autostart-nginx")).to_have_attribute(
        "aria-checked", "false", timeout=WAIT_MS
    )


def test_a_protected_unit_refuses_a_wrongly_typed_name(page: Page, master: RunningMaster) -> None:
    from playwright.sync_api import expect

    layout = _hostd(master)
    _services_page(page, master)
    page.get_by_test_id("unit-stop-smartd").click()
    dialog = page.get_by_test_id("confirm-dialog")
    expect(dialog).to_contain_text("type smartd to confirm", timeout=WAIT_MS)
    expect(dialog).to_contain_text("Disk failures go unnoticed")  # the entry's risks
    page.get_by_test_id("confirm-input").fill("smart")
    page.get_by_test_id("confirm-ok").click()
    expect(page.locator(".q-notification").last).to_contain_text(
        "type the service's name 'smartd'", timeout=WAIT_MS
    )
    expect(page.get_by_test_id("unit-state-smartd")).to_have_text("active (running)", timeout=WAIT_MS)
    assert not _ran(layout, "stop", "smartd.service")

    page.get_by_test_id("unit-stop-smartd").click()
    page.get_by_test_id("confirm-input").fill("smartd")
    page.get_by_test_id("confirm-ok").click()
    _wait_ran(layout, "stop", "smartd.service")
    expect(page.get_by_test_id("unit-state-smartd")).to_have_text("inactive (dead)", timeout=WAIT_MS)
    # Leave it as the other tests found it (a start needs no confirmation).
    page.get_by_test_id("unit-start-smartd").click()
    expect(page.get_by_test_id("unit-state-smartd")).to_have_text("active (running)", timeout=WAIT_MS)


@pytest.fixture
def container(master: RunningMaster) -> Iterator[str]:
    """A running container of this test's own, restart policy ``always``; off the whitelist afterwards."""
    import docker
    from tests._support.docker_image import ensure_test_image

    client = docker.from_env(version="auto", timeout=30)
    run_id = f"brsvc-{uuid.uuid4().hex[:10]}"
    try:
        with service_container(client, ensure_test_image(client), f"{run_id}-db", run_id) as name:
            try:
                yield name
            finally:
                with master.api() as api:
                    api.delete(f"/nodes/local/host/containers/{name}")
    finally:
        client.close()


def _docker(name: str) -> dict[str, Any]:
    import docker

    client = docker.from_env(version="auto", timeout=30)
    try:
        attrs: dict[str, Any] = client.containers.get(name).attrs
    finally:
        client.close()
    return attrs


def _wait_docker(name: str, holds: Callable[[dict[str, Any]], bool], what: str) -> None:
    seen: list[dict[str, Any]] = []

    def check() -> bool:
        seen.append(_docker(name))
        return holds(seen[-1])

    _until(check, lambda: f"{name} never {what}: {seen[-1]['State'] if seen else None}")


@pytest.mark.docker
def test_the_discovered_tab_lists_and_a_container_is_added_stopped_started_and_autostarted(
    page: Page, master: RunningMaster, container: str
) -> None:
    from playwright.sync_api import expect

    name = container
    _services_page(page, master)
    expect(page.get_by_test_id("discovered-unit-ssh.service")).to_have_count(0)  # loaded only once opened
    page.get_by_test_id("discovered-tab-local").click()
    listing = page.get_by_test_id("discovered-local")
    expect(page.get_by_test_id("discovered-unit-ssh.service")).to_contain_text(
        f"{SYSTEM_LABEL} (ssh*)", timeout=WAIT_MS
    )
    expect(page.get_by_test_id("discovered-unit-nginx.service")).to_contain_text(
        "Whitelisted", timeout=WAIT_MS
    )
    expect(page.get_by_test_id("add-unit-cups.service")).to_be_visible()
    expect(listing).to_contain_text("Deny list: ", timeout=WAIT_MS)
    # Largest RAM first: cups (900 MiB) above nginx (48 MiB).
    units = listing.locator('[data-testid^="discovered-unit-"]')
    order = [units.nth(i).get_attribute("data-testid") for i in range(units.count())]
    assert order.index("discovered-unit-cups.service") < order.index("discovered-unit-nginx.service")

    page.get_by_test_id(f"add-container-{name}").click()
    page.get_by_test_id("confirm-input").fill(name)
    page.get_by_test_id("confirm-ok").click()
    expect(page.locator(".q-notification").last).to_contain_text(f"{name} whitelisted", timeout=WAIT_MS)
    expect(page.get_by_test_id(f"discovered-container-{name}")).to_have_count(0, timeout=WAIT_MS)

    page.get_by_role("tab", name="Managed").click()
    state = page.get_by_test_id(f"container-state-{name}")
    expect(state).to_have_text("running", timeout=WAIT_MS)
    page.get_by_test_id(f"container-stop-{name}").click()
    expect(state).to_have_text("exited", timeout=WAIT_MS)
    _wait_docker(name, lambda c: c["State"]["Status"] == "exited", "stopped")
    page.get_by_test_id(f"container-start-{name}").click()
    expect(state).to_have_text("running", timeout=WAIT_MS)

    switch = page.get_by_test_id(f"container-autostart-{name}")
    expect(switch).to_have_attribute("aria-checked", "true", timeout=WAIT_MS)
    switch.click()
    _wait_docker(name, lambda c: c["HostConfig"]["RestartPolicy"]["Name"] == "no", "lost its autostart")
    expect(page.get_by_test_id(f"container-autostart-{name}")).to_have_attribute(
        "aria-checked", "false", timeout=WAIT_MS
    )
    page.get_by_test_id(f"container-autostart-{name}").click()
    # On restores the policy the master remembered when it was turned off.
    _wait_docker(name, lambda c: c["HostConfig"]["RestartPolicy"]["Name"] == "always", "got `always` back")


@pytest.fixture
def hostless_node(master: RunningMaster, tmp_path: Path) -> Iterator[str]:
    """A second node whose agent has no hostd (tests/_support/older_agent.py: the real agent app,
    enrolled with a join token, serving mutual TLS); removed after the test."""
    name = f"nohostd-{uuid.uuid4().hex[:6]}"
    with master.api() as api:

        def reachable() -> bool:
            return any(node["id"] == name and node["reachable"] for node in api.get("/nodes").json())

        with enrolled_older_agent(api, name, "0.0.9", tmp_path, ready=reachable, timeout_s=WAIT_S):
            yield name


def test_a_node_without_hostd_says_so_with_the_line_that_installs_it(
    page: Page, master: RunningMaster, hostless_node: str
) -> None:
    from playwright.sync_api import expect

    _services_page(page, master)
    banner = page.get_by_test_id(f"hostd-missing-{hostless_node}")
    expect(banner).to_be_visible(timeout=WAIT_MS)
    expect(banner).to_contain_text(HOSTD_INSTALL)
    expect(banner).to_contain_text("hostd does not answer on this node")
    # The node with hostd keeps its units and no banner.
    expect(page.get_by_test_id("hostd-missing-local")).to_have_count(0)
    expect(page.get_by_test_id(f"services-{hostless_node}")).not_to_contain_text("Nothing whitelisted yet")
