"""Both themes readable, in a real browser: each page photographed in each theme, its text colours measured.

A picture alone proves nothing, so each page is also read: every text of every chart (they render as
SVG, so their text is in the page), every error line and every red button, each against the first
opaque background behind it, must keep WCAG's 4.5:1 contrast. The pictures land in this test's
temporary folder (``docs/screenshots/`` with ``MIRBAD_UPDATE_SCREENSHOTS=1``, as the other shots).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest
from tests.browser._portal import ensure_ready, sign_in
from tests.browser.test_screenshots import DOCS_SCREENSHOTS

from mirbad_master.ui._chart_theme import contrast_ratio
from mirbad_master.ui._layout import THEME_COOKIE

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from tests.browser.conftest import RunningMaster

pytestmark = [pytest.mark.browser, pytest.mark.llamacpp]

TEXT: Final = 4.5
"""WCAG 2's minimum contrast for ordinary text."""
BENCHMARK_WAIT_S: Final = 120.0

# Every chart text, error line and red button on the page, with the first opaque background behind it.
_READ_COLOURS: Final = """() => {
  const opaque = (el) => {
    for (; el; el = el.parentElement) {
      const colour = getComputedStyle(el).backgroundColor;
      if (colour && colour !== 'transparent' && !colour.startsWith('rgba(0, 0, 0, 0')) return colour;
    }
    return 'rgb(255, 255, 255)';  // nothing opaque: the browser's own white canvas
  };
  const seen = [];
  for (const chart of document.querySelectorAll('[data-testid$="chart"], [data-testid^="benchmark-chart"]')) {
    for (const text of chart.querySelectorAll('svg text')) {
      if (!text.textContent.trim()) continue;
      seen.push({what: `${chart.dataset.testid}: ${text.textContent.trim()}`,
                 fg: getComputedStyle(text).fill, bg: opaque(chart)});
    }
  }
  for (const el of document.querySelectorAll('.text-negative')) {
    if (!el.textContent.trim() || el.offsetParent === null) continue;
    seen.push({what: `negative: ${el.textContent.trim().slice(0, 40)}`, fg: getComputedStyle(el).color,
               bg: opaque(el)});
  }
  return seen;
}"""
_RGB: Final = re.compile(r"rgba?\((\d+), (\d+), (\d+)")


def _hex(css: str) -> str:
    if css.startswith("#"):
        return css
    match = _RGB.match(css)
    assert match is not None, css
    return "#" + "".join(f"{int(part):02x}" for part in match.groups())


def _unreadable(page: Page) -> tuple[list[str], int, int]:
    """The texts under 4.5:1, how many chart texts and how many red texts were measured."""
    seen: list[dict[str, Any]] = page.evaluate(_READ_COLOURS)
    ratios = [(item, contrast_ratio(_hex(item["fg"]), _hex(item["bg"]))) for item in seen]
    low = [f"{item['what']} ({item['fg']} on {item['bg']}: {r:.2f})" for item, r in ratios if r < TEXT]
    charts = sum(1 for item in seen if not item["what"].startswith("negative:"))
    return low, charts, len(seen) - charts


def _benchmarked(master: RunningMaster, model: str) -> None:
    with master.api() as api:
        if api.get(f"/models/{model}/benchmarks").json()["results"]:
            return
        api.post(f"/models/{model}/benchmark").raise_for_status()
        deadline = time.monotonic() + BENCHMARK_WAIT_S
        while time.monotonic() < deadline:
            jobs = [job for job in api.get("/benchmark").json()["jobs"] if job["modelId"] == model]
            if jobs and jobs[-1]["state"] != "running":
                assert jobs[-1]["state"] == "succeeded", jobs[-1]
                return
            time.sleep(0.5)
    raise AssertionError(f"the benchmark of {model} did not end within {BENCHMARK_WAIT_S} s")


def test_every_page_is_readable_in_both_themes(page: Page, master: RunningMaster, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    model = ensure_ready(master)
    _benchmarked(master, model)
    folder = DOCS_SCREENSHOTS if os.environ.get("MIRBAD_UPDATE_SCREENSHOTS") == "1" else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    pages = {
        "overview": "/",
        "models": "/models",
        "benchmarks": f"/models/{model}/benchmarks",
        "tuning": f"/models/{model}/tuning",
        "access": "/access",
        "nodes": "/nodes",
        "releases": "/releases",
        "backup": "/backup",
        "audit": "/audit",
    }
    sign_in(page, master, "/")
    problems: list[str] = []
    measured: dict[str, tuple[int, int]] = {}
    for theme in ("light", "dark"):
        page.context.add_cookies([{"name": THEME_COOKIE, "value": theme, "url": master.url}])
        for name, path in pages.items():
            page.goto(f"{master.url}{path}")
            expect(page.locator("body")).to_have_class(re.compile(f"body--{theme}"))
            if name == "benchmarks":
                expect(
                    page.get_by_test_id("benchmark-chart-tokens").locator("svg text").first
                ).to_be_visible()
            page.wait_for_load_state("networkidle")
            shot = folder / f"theme-{name}-{theme}.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
            low, charts, red = _unreadable(page)
            problems += [f"{theme} {name}: {line}" for line in low]
            measured[f"{theme} {name}"] = (charts, red)

    assert problems == [], "\n".join(problems)
    for theme in ("light", "dark"):
        assert measured[f"{theme} overview"][0] > 0  # the memory charts' texts were read
        assert measured[f"{theme} benchmarks"][0] > 0  # and the benchmark plots'
        assert measured[f"{theme} models"][1] > 0  # the red Stop and Delete buttons
