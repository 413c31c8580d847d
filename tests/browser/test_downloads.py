"""Downloads in the browser: the Download box followed to 100 %, and a card's missing files fetched.

A ``mirbad up`` of its own whose agent downloads from a loopback Hugging Face hub and Ollama registry;
they run in a blocking portal's event loop (Playwright's sync API owns this thread). The registry holds
the GGUF mid-file, so the bar is seen below 100 % before the test lets the transfer finish. A llama.cpp
model whose GGUF is not on the node says so on its card; its Download fills the dialog from the
model's source, and once the hub's folder is down the note is gone and the model starts. The
screenshots for the README are taken while the transfer is held and while the dialog is open.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from tests._support.asgi_server import free_port
from tests._support.model_hub import REPO, Hold, Sources, loopback_sources
from tests._support.real_parts import llama_server_path
from tests._support.tiny_gguf import write_tiny_gguf
from tests.browser._portal import local_llama_server, sign_in
from tests.browser.conftest import RunningMaster, _mirbad, _stop, _wait_until_serving
from tests.browser.test_screenshots import DOCS_SCREENSHOTS

from mirbad_master._admin_auth import AdminAuth

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.browser]

HELD_AT: Final = 32 * 1024
"""Where the registry holds the GGUF blob: well inside the tiny model."""
HOLD_WAIT_S: Final = 30.0
MISSING_FOLDER: Final = "tiny-from-hub"
"""The folder the card's Download fills from the hub's tiny repository."""
DOWNLOAD_TIMEOUT_MS: Final = 60_000
BELOW_100: Final = re.compile(r"^[1-9]\d? %$")
"""What the panel shows for a job held mid-file: some bytes there, not all (1 to 99 %)."""


@dataclass(frozen=True)
class Registry:
    """The loopback sources and the event loop they run in."""

    portal: BlockingPortal
    sources: Sources


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    gguf = write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf").read_bytes()
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(loopback_sources(gguf)) as sources,
    ):
        yield Registry(portal, sources)


@pytest.fixture(scope="module")
def downloading_master(
    tmp_path_factory: pytest.TempPathFactory, registry: Registry
) -> Iterator[RunningMaster]:
    root = tmp_path_factory.mktemp("downloads-portal")
    data_dir = root / "data"
    data_dir.mkdir(mode=0o700)
    (data_dir / "models").mkdir()
    password = AdminAuth(data_dir).reset_password()
    agent_config = root / "agent.json"
    downloads = {"hf_endpoint": registry.sources.hub_url, "ollama_registry": registry.sources.registry_url}
    agent_config.write_text(json.dumps({"downloads": downloads, "docker": {"enabled": False}}))
    port = free_port()
    env = {
        **os.environ,
        "MIRBAD_DATA_DIR": str(data_dir),
        "MIRBAD_PORT": str(port),
        "MIRBAD_ENROLL_PORT": str(free_port()),
        "MIRBAD_HEALTH_POLL_S": "0.5",
    }
    server = llama_server_path()
    if server is not None:
        env["MIRBAD_LLAMA_SERVER"] = str(server)
    env.pop("PYTEST_CURRENT_TEST", None)  # NiceGUI changes its behaviour under pytest; the master is no test
    log = root / "mirbad-up.log"
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as output:
        command = [*_mirbad(), "up", "--agent-config", str(agent_config)]
        process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)
    try:
        _wait_until_serving(process, url, log)
        yield RunningMaster(url, password, data_dir, log)
    finally:
        _stop(process)


def _start_held_download(page: Page, master: RunningMaster, registry: Registry, folder: str) -> Hold:
    """Start the tiny Ollama model's download from the Models page; return once the registry holds it."""
    hold = registry.portal.call(lambda: Hold(_gguf_digest(registry.sources), after_bytes=HELD_AT))
    registry.sources.registry.hold = hold
    sign_in(page, master, "/models")
    page.get_by_test_id("download-source").fill("tiny")
    page.get_by_test_id("download-folder").fill(folder)
    page.get_by_test_id("download-start").click()
    registry.portal.call(_reached, hold)
    return hold


def test_a_download_from_the_box_is_seen_below_then_at_100_percent(
    page: Page, downloading_master: RunningMaster, registry: Registry, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    master = downloading_master
    with master.api() as api:
        # The Download box is offered once the monitor read the node's feature flags.
        features = api.get("/nodes/local").json()["info"]["features"]
    assert "downloads.ollama" in features

    hold = _start_held_download(page, master, registry, "tiny-from-portal")
    percent = page.locator('[data-testid^="download-percent-"]')
    expect(percent).to_have_text(BELOW_100)
    shots = DOCS_SCREENSHOTS if os.environ.get("MIRBAD_UPDATE_SCREENSHOTS") == "1" else tmp_path
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / "downloads.png"), full_page=True)
    registry.portal.call(hold.release)
    expect(percent).to_have_text("100 %")
    expect(page.get_by_test_id("downloads")).to_contain_text("completed")

    assert (master.data_dir / "models" / "tiny-from-portal" / "model.gguf").is_file()


def test_a_cancelled_download_is_retried_and_resumes_to_100_percent(
    page: Page, downloading_master: RunningMaster, registry: Registry
) -> None:
    from playwright.sync_api import expect

    master = downloading_master
    hold = _start_held_download(page, master, registry, "tiny-retried")
    cancel = page.locator('[data-testid^="download-cancel-"]')
    expect(cancel).to_have_count(1)
    job_id = (cancel.get_attribute("data-testid") or "").removeprefix("download-cancel-")
    expect(page.get_by_test_id(f"download-percent-{job_id}")).to_have_text(BELOW_100)
    cancel.click()
    expect(page.get_by_test_id(f"download-{job_id}")).to_contain_text("cancelled")
    registry.portal.call(hold.release)
    page.get_by_test_id(f"download-retry-{job_id}").click()
    expect(page.get_by_test_id(f"download-percent-{job_id}")).to_have_text(
        "100 %", timeout=DOWNLOAD_TIMEOUT_MS
    )
    expect(page.get_by_test_id(f"download-{job_id}")).to_contain_text("completed")
    page.get_by_test_id(f"download-forget-{job_id}").click()  # the other tests find one row of their own
    expect(page.get_by_test_id(f"download-{job_id}")).to_have_count(0)

    assert (master.data_dir / "models" / "tiny-retried" / "model.gguf").is_file()
    # The retry went on from the bytes already there: the last blob request was a Range past 0.
    blob_requests = [offset for key, offset in registry.sources.registry.requests if key == hold.path]
    assert blob_requests[-1] not in (None, "bytes=0-")


@pytest.mark.llamacpp
def test_a_cards_missing_gguf_is_downloaded_from_its_source_and_the_model_starts(
    page: Page, downloading_master: RunningMaster, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    master = downloading_master
    model = {
        "id": "tiny-hf",
        "servedName": "tiny-hf",
        "runtime": "llamacpp",
        "executable": local_llama_server(master),
        "modelPath": f"{MISSING_FOLDER}/weights/tiny.gguf",
        "maxModelLen": 256,
        "maxNumSeqs": 1,
        "memoryBudgetGiB": 0.25,
        "sources": [{"repoId": REPO, "folder": MISSING_FOLDER, "allowPatterns": ["*.gguf", "*.json"]}],
    }
    with master.api() as api:
        api.post("/models", json=model).raise_for_status()

    sign_in(page, master, "/models")
    note = page.get_by_test_id("missing-files-tiny-hf")
    expect(note).to_contain_text(f"Not on node local: {MISSING_FOLDER}/weights/tiny.gguf")
    page.get_by_test_id("download-missing-tiny-hf").click()
    expect(page.get_by_test_id("missing-source-0")).to_have_value(REPO)
    expect(page.get_by_test_id("missing-folder-0")).to_have_value(MISSING_FOLDER)
    expect(page.get_by_test_id("missing-patterns-0")).to_have_value("*.gguf, *.json")
    shots = DOCS_SCREENSHOTS if os.environ.get("MIRBAD_UPDATE_SCREENSHOTS") == "1" else tmp_path
    shots.mkdir(parents=True, exist_ok=True)
    # The viewport only: a full-page shot cuts the dialog's backdrop off at the first screen.
    page.screenshot(path=str(shots / "missing-files.png"))
    page.get_by_test_id("missing-start").click()
    # The next refreshes after the download completes find the GGUF: the note goes, Start works.
    expect(note).to_have_count(0, timeout=DOWNLOAD_TIMEOUT_MS)
    page.get_by_test_id("start-tiny-hf").click()
    expect(page.get_by_test_id("state-tiny-hf")).to_have_text("Ready", timeout=DOWNLOAD_TIMEOUT_MS)

    assert (master.data_dir / "models" / MISSING_FOLDER / "weights" / "tiny.gguf").is_file()
    assert not (master.data_dir / "models" / MISSING_FOLDER / "README.md").exists()  # not in the patterns


async def _reached(hold: Hold) -> None:
    with anyio.fail_after(HOLD_WAIT_S):
        await hold.reached.wait()


def _gguf_digest(sources: Sources) -> str:
    [digest] = [d for d, data in sources.registry.blobs.items() if data == sources.gguf]
    return digest
