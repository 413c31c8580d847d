"""The Benchmark view in a real browser: a classic suite and a workload preset on the real llama-server.

The master runs the classic suite at the small sizes ``BENCHMARK_SIZES`` of ``conftest.py`` (passed as
``MIRBAD_BENCHMARK_SIZES``): N = 1 and 2, two runs, 8 tokens; the presets at ``PRESET_SIZES``. With
``MIRBAD_UPDATE_SCREENSHOTS=1`` the picture lands in ``docs/screenshots/benchmarks.png``
(the README shows it).
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
JOB_TIMEOUT_MS = 120_000


def test_a_classic_suite_runs_from_the_benchmark_view_and_is_plotted(
    page: Page, master: RunningMaster, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    model = ensure_ready(master, "tiny-bench", servedName="tiny-bench")
    sign_in(page, master, "/models")
    page.get_by_test_id(f"benchmarks-{model}").click()
    expect(page).to_have_url(f"{master.url}/models/{model}/benchmarks")
    expect(page.get_by_test_id("benchmark-preset")).to_contain_text("Classic suite")
    page.get_by_test_id("benchmark-run").click()
    status = page.get_by_test_id("benchmark-status")
    expect(status).to_contain_text("running", timeout=READY_TIMEOUT_MS)
    expect(status).to_contain_text("succeeded", timeout=JOB_TIMEOUT_MS)
    history = page.get_by_test_id("benchmark-history")
    expect(history).to_contain_text("classic")
    expect(history).to_contain_text("1, 2")
    for chart in ("benchmark-chart-tokens", "benchmark-chart-ttft", "benchmark-chart-runs"):
        expect(page.get_by_test_id(chart)).to_be_visible()
    expect(page.get_by_test_id("benchmark-message")).to_have_text("")
    with master.api() as api:
        [result] = api.get(f"/models/{model}/benchmarks").json()["results"]
    assert [level["concurrency"] for level in result["levels"]] == [1, 2]
    assert result["sizes"]["maxTokens"] == 8
    audit = "".join(path.read_text() for path in (master.data_dir / "audit").glob("*"))
    assert "model.benchmark" in audit

    folder = DOCS_SCREENSHOTS if os.environ.get("MIRBAD_UPDATE_SCREENSHOTS") == "1" else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(folder / "benchmarks.png"), full_page=True)
    assert (folder / "benchmarks.png").stat().st_size > 0


def test_a_workload_preset_runs_from_the_benchmark_view_and_lists_as_schema_2(
    page: Page, master: RunningMaster
) -> None:
    from playwright.sync_api import expect

    model = ensure_ready(master, "tiny-bench", servedName="tiny-bench")
    sign_in(page, master, f"/models/{model}/benchmarks")
    page.get_by_test_id("benchmark-preset").click()
    page.get_by_role("option", name="Agents & tools", exact=True).click()
    page.get_by_test_id("benchmark-run").click()
    # The status may still show the classic job's end: the stored result's row is what says it is done.
    row = page.get_by_test_id("benchmark-history").locator("tr", has_text="agents")
    expect(row).to_be_visible(timeout=JOB_TIMEOUT_MS)
    expect(page.get_by_test_id("benchmark-status")).to_contain_text("succeeded")
    # The v2 result plots like a classic one: its shortest output's short-chat levels.
    expect(row.locator("td").nth(1)).to_have_text("2")
    expect(page.get_by_test_id("benchmark-chart-tokens")).to_be_visible()
    expect(page.get_by_test_id("benchmark-message")).to_have_text("")
    with master.api() as api:
        results = api.get(f"/models/{model}/benchmarks").json()["results"]
    preset = next(result for result in results if result.get("preset") == "agents")
    assert preset["schemaVersion"] == 2
    assert preset["presetSizes"]["toolCallTokens"] == 8
    assert preset["workloads"]["sharedPrefix"]["cacheSource"] == "timings.cache_n (llama-server)"
