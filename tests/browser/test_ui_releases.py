"""The Releases page in a real browser: versions and a skew warning, builds, images, a pull with progress.

The session's ``mirbad up`` (conftest.py) is the master and its local agent, which has the real
llama-server catalogued and the real dockerd. A second node joins for this test only: a real agent app
reporting version 0.0.9 (tests/_support/older_agent.py), enrolled with a join token and served over
mutual TLS, so the page warns about it. The pull goes through the local agent's Docker to the stand-in
registry on loopback, whose layer download is held halfway: the progress bar is seen part-filled, and
the screenshot ``docs/screenshots/releases.png`` (with ``MIRBAD_UPDATE_SCREENSHOTS=1``) shows it so.
The pulled tag and the second node are removed afterwards.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
import pytest
from tests._support.older_node import enrolled_older_agent
from tests._support.registry import StandInRegistry, running_registry
from tests.browser._portal import sign_in

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from tests.browser.conftest import RunningMaster

pytestmark = [pytest.mark.browser, pytest.mark.docker, pytest.mark.llamacpp]

ROOT = Path(__file__).resolve().parents[2]
DOCS_SCREENSHOTS = ROOT / "docs" / "screenshots"
OLDER_VERSION = "0.0.9"
WAIT_S = 60.0
WAIT_MS = round(WAIT_S * 1000)


@pytest.fixture
def older_node(master: RunningMaster, tmp_path: Path) -> Iterator[str]:
    """A second node whose agent reports :data:`OLDER_VERSION`, enrolled for this test and removed after."""
    name = f"old-{uuid.uuid4().hex[:6]}"
    with (
        master.api() as api,
        enrolled_older_agent(
            api,
            name,
            OLDER_VERSION,
            tmp_path,
            ready=lambda: _version_of(api, name) == OLDER_VERSION,
            timeout_s=WAIT_S,
            log_name="older-agent.log",
        ),
    ):
        yield name


@pytest.fixture
def registry() -> Iterator[StandInRegistry]:
    with running_registry(f"mirbad-browser-vllm-{uuid.uuid4().hex[:8]}", "v1") as served:
        client = docker.from_env(version="auto", timeout=30)
        try:
            yield served
        finally:
            with contextlib.suppress(docker.errors.ImageNotFound):
                client.images.remove(served.reference, force=True)
            client.close()


def _version_of(api: Any, node: str) -> str | None:
    agents = {entry["nodeId"]: entry for entry in api.get("/releases").json().get("agents", [])}
    version: str | None = agents.get(node, {}).get("version")
    return version


def test_versions_builds_images_a_pull_with_progress_and_the_changelog(
    page: Page, master: RunningMaster, older_node: str, registry: StandInRegistry, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    registry.hold()
    sign_in(page, master, "/releases")
    with master.api() as api:
        master_version = api.get("/releases").json()["masterVersion"]
    expect(page.get_by_test_id("master-version")).to_have_text(master_version)
    expect(page.get_by_test_id("agent-version-local")).to_contain_text(master_version)
    expect(page.get_by_test_id("skew-local")).to_have_count(0)
    expect(page.get_by_test_id(f"skew-{older_node}")).to_contain_text(
        f"agent {OLDER_VERSION} differs from master {master_version} in major.minor"
    )
    expect(page.get_by_test_id("builds-local")).to_contain_text("llama-server")
    expect(page.get_by_test_id("builds-local")).to_contain_text("llama.cpp build")
    expect(page.get_by_test_id("images-local")).to_be_visible()
    expect(page.get_by_test_id("changelog")).to_contain_text("Changelog")

    page.get_by_test_id("pull-image-local").fill(registry.reference)
    page.get_by_test_id("pull-local").click()
    assert registry.halfway.wait(WAIT_S), "dockerd never fetched the layer"
    state = page.locator('[data-testid^="pull-state-"]')
    expect(state).to_contain_text("running", timeout=WAIT_MS)
    expect(state).to_contain_text(" of ", timeout=WAIT_MS)  # bytes so far of the layer's size
    bar = page.locator('[data-testid^="pull-progress-"]')
    expect(bar).not_to_have_attribute("aria-label", f"{registry.reference}: 0 %", timeout=WAIT_MS)
    shots = DOCS_SCREENSHOTS if os.environ.get("MIRBAD_UPDATE_SCREENSHOTS") == "1" else tmp_path
    page.screenshot(path=str(shots / "releases.png"), full_page=True)

    registry.release()
    expect(state).to_contain_text("completed", timeout=WAIT_MS)
    expect(page.get_by_test_id("images-local")).to_contain_text(registry.reference, timeout=WAIT_MS)
    assert (shots / "releases.png").stat().st_size > 10_000
