"""Screenshots of every page for the README, taken from a real ``mirbad up``.

They land in ``docs/screenshots/`` when ``MIRBAD_UPDATE_SCREENSHOTS=1`` is set (then commit them), and in
a temporary folder otherwise, so an ordinary test run leaves the checkout clean.

Light theme throughout, and the Overview once more in the dark theme. The fleet is given something to
show first: a Ready model with tags, an API key, a chat in the Playground and a backup.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest
from tests.browser._portal import ensure_ready, sign_in
from tests.browser.conftest import READY_TIMEOUT_MS

from mirbad_master.ui._layout import THEME_COOKIE

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from tests.browser.conftest import RunningMaster

pytestmark = [pytest.mark.browser, pytest.mark.llamacpp]

DOCS_SCREENSHOTS: Final = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where the pictures go: the README's folder on request, else this test's temporary folder."""
    return DOCS_SCREENSHOTS if os.environ.get("MIRBAD_UPDATE_SCREENSHOTS") == "1" else tmp_path


def _shoot(page: Page, name: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(path), full_page=True)
    return path


def _set_theme(page: Page, master: RunningMaster, theme: str) -> None:
    page.context.add_cookies([{"name": THEME_COOKIE, "value": theme, "url": master.url}])


def test_every_page_is_photographed(page: Page, master: RunningMaster, shots: Path) -> None:
    from playwright.sync_api import expect

    model = ensure_ready(master, "tiny-chat", tags=["chat", "embedding-free"], servedName="tiny-chat")
    with master.api() as api:
        if not any(key["name"] == "notebook" for key in api.get("/keys").json()):
            api.post("/keys", json={"name": "notebook", "requestsPerMinute": 60}).raise_for_status()

    page.goto(f"{master.url}/login")
    expect(page.get_by_test_id("sign-in")).to_be_visible()
    taken = [_shoot(page, "login", shots)]

    _set_theme(page, master, "light")
    sign_in(page, master, "/playground")
    page.get_by_test_id("chat-model").click()
    page.get_by_role("option", name=model, exact=True).click()
    page.get_by_test_id("chat-input").fill("hello tiny model")
    page.get_by_test_id("chat-send").click()
    expect(page.get_by_test_id("chat-stats")).to_contain_text("tok/s", timeout=READY_TIMEOUT_MS)
    taken.append(_shoot(page, "playground", shots))

    page.goto(f"{master.url}/")
    expect(page.get_by_test_id("overview-models")).to_contain_text(model)
    taken.append(_shoot(page, "overview", shots))
    page.goto(f"{master.url}/models")
    expect(page.get_by_test_id(f"state-{model}")).to_have_text("Ready")
    taken.append(_shoot(page, "models", shots))
    page.goto(f"{master.url}/models/new")
    page.get_by_test_id("field-id").fill("qwen3-8b")
    page.get_by_test_id("field-servedName").fill("Qwen3-8B")
    page.get_by_test_id("field-modelPath").fill("qwen3-8b/Qwen3-8B-Q4_K_M.gguf")
    page.get_by_test_id("field-maxModelLen").fill("32768")
    page.get_by_test_id("field-memoryBudgetGiB").fill("12")
    page.get_by_test_id("field-extraArgs").fill("--flash-attn on --jinja")
    expect(page.get_by_test_id("command-preview")).to_contain_text("--alias Qwen3-8B")
    taken.append(_shoot(page, "model-editor", shots))
    page.goto(f"{master.url}/access")
    expect(page.get_by_test_id("key-notebook")).to_be_visible()
    taken.append(_shoot(page, "access", shots))
    page.goto(f"{master.url}/nodes")
    expect(page.get_by_test_id("node-local")).to_contain_text("reachable")
    taken.append(_shoot(page, "nodes", shots))
    page.goto(f"{master.url}/services")  # the session's hostd and its stand-in units (conftest.py)
    expect(page.get_by_test_id("unit-state-smartd")).to_have_text("active (running)")
    expect(page.get_by_test_id("unit-state-nginx")).to_be_visible()
    taken.append(_shoot(page, "services", shots))
    with master.api() as api:  # a passphrase backup to list (the session's backup folder, conftest.py)
        api.post("/backup", json={"passphrase": "correct horse battery"}).raise_for_status()
    page.goto(f"{master.url}/backup")
    expect(page.get_by_test_id("backup-row").first).to_be_visible()
    expect(page.get_by_test_id("backup-destination-status")).to_contain_text("No backup share")
    taken.append(_shoot(page, "backup", shots))
    page.goto(f"{master.url}/audit")
    expect(page.get_by_test_id("audit-entry").first).to_be_visible()
    taken.append(_shoot(page, "audit", shots))

    _set_theme(page, master, "dark")
    page.goto(f"{master.url}/")
    expect(page.locator("body")).to_have_class(re.compile("body--dark"))
    taken.append(_shoot(page, "overview-dark", shots))
    assert all(path.stat().st_size > 10_000 for path in taken)
