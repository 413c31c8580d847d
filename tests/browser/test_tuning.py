"""The Tuning view in a real browser: a one-step tuning of the tiny model on the real llama-server.

The session's ``mirbad up`` (``conftest.py``) runs the classic suite at ``BENCHMARK_SIZES`` and tuning
at one search and two confirmation repetitions (``MIRBAD_TUNING_REPETITIONS=1,2``); the run is the
flash-attention step only (two candidates), picked on the page. With ``MIRBAD_UPDATE_SCREENSHOTS=1``
the picture lands in ``docs/screenshots/tuning.png`` (the README shows it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tests.browser._portal import ensure_ready, sign_in
from tests.browser.conftest import READY_TIMEOUT_MS

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from tests.browser.conftest import RunningMaster

pytestmark = [pytest.mark.browser, pytest.mark.llamacpp]

DOCS_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
RUN_TIMEOUT_MS = 240_000


def test_a_one_step_tuning_runs_from_the_tuning_view_and_shows_its_rows_and_plot(
    page: Page, master: RunningMaster, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    model = ensure_ready(master, "tiny-tune", servedName="tiny-tune", extraArgs=["--threads", "1"])
    models_file = master.data_dir / "models.json"
    before = models_file.read_bytes()
    sign_in(page, master, "/models")
    page.get_by_test_id(f"tuning-{model}").click()
    expect(page).to_have_url(f"{master.url}/models/{model}/tuning")
    expect(page.get_by_test_id("tuning-plan")).to_contain_text("parallel")  # Quick: slots, flash attention
    expect(page.get_by_test_id("tuning-preset")).to_be_visible()  # the classic goal by default
    page.get_by_test_id("tuning-steps").click()
    page.get_by_role("option", name="flash_attn", exact=True).click()
    page.keyboard.press("Escape")
    plan = page.get_by_test_id("tuning-plan")
    expect(plan).not_to_contain_text("parallel")
    expect(plan).to_contain_text("flash_attn = on, flash_attn = off")
    expect(page.get_by_test_id("tuning-eta")).to_contain_text("6 candidates")
    page.get_by_test_id("tuning-run").click()
    status = page.get_by_test_id("tuning-status")
    expect(status).to_contain_text("running", timeout=READY_TIMEOUT_MS)
    expect(status).to_contain_text("succeeded", timeout=RUN_TIMEOUT_MS)
    expect(page.get_by_test_id("tuning-winner")).to_contain_text("succeeded")
    rows = page.get_by_test_id("tuning-candidates")
    expect(rows).to_contain_text("baseline")
    expect(rows).to_contain_text("flash_attn = on")
    expect(rows).to_contain_text("Goal / tradeoff")
    expect(rows).to_contain_text("Runtime notes")
    # llama-server's log has none of the lines vLLM resolves settings in: nothing differs.
    expect(rows).to_contain_text("as requested")
    # Whether a confirmation stage ran depends on the tiny model's noise: both endings are correct.
    expect(page.get_by_test_id("tuning-chart")).to_be_visible()
    expect(page.get_by_test_id("tuning-message")).to_have_text("")
    with master.api() as api:
        [run] = api.get(f"/models/{model}/tuning").json()["runs"]
        status_after = api.get(f"/models/{model}").json()["status"]
    assert run["steps"] == ["flash_attn"]
    assert (run["repetitions"], run["confirmRepetitions"]) == (1, 2)
    assert [row["changes"] for row in run["candidates"][1:]] == [{"flash_attn": "on"}, {"flash_attn": "off"}]
    measured = [row for row in run["candidates"] if row["outcome"] in ("accepted", "rejected")]
    assert all(row["runtimeNotes"] == ["as requested"] and row["startSeconds"] > 0 for row in measured)
    assert models_file.read_bytes() == before  # a run never touches the registry
    audit = "".join(path.read_text() for path in (master.data_dir / "audit").glob("*"))
    assert "model.tune" in audit

    folder = DOCS_SCREENSHOTS if os.environ.get("MIRBAD_UPDATE_SCREENSHOTS") == "1" else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(folder / "tuning.png"), full_page=True)
    assert (folder / "tuning.png").stat().st_size > 0
    assert status_after["state"] == "Ready"  # the model came back with its saved settings
