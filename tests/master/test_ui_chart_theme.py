"""Both themes readable: every chart's text and the dark theme's message colours hold WCAG's 4.5:1."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from tests.master.test_ui_benchmarks import _result

from mirbad_master.benchmarks.page import concurrency_chart
from mirbad_master.tuning.page import chart_options
from mirbad_master.ui._chart_theme import (
    DARK_CARD,
    DARK_CHART,
    DARK_TEXT_COLOURS,
    LIGHT_CARD,
    LIGHT_CHART,
    LIGHT_TEXT_COLOURS,
    THEME_CSS,
    contrast_ratio,
    themed_chart,
)
from mirbad_protocol.tuning import TuningCandidate, TuningRun

TEXT: float = 4.5
"""WCAG 2's minimum contrast for ordinary text."""


def _tuning_chart() -> dict[str, Any]:
    run = TuningRun(
        model_id="m",
        node_id="n",
        runtime="vllm",
        goal="balanced",
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        candidates=[TuningCandidate(step="baseline", score=1.0), TuningCandidate(step="x", score=1.1)],
    )
    return chart_options(run)


CHARTS = {
    "benchmark": lambda: concurrency_chart([_result([1, 2])], "ttft_p95_s", "TTFT p95 (s) against N"),
    "tuning": _tuning_chart,
}


def _text_colours(options: dict[str, Any]) -> list[str | None]:
    """The colour of every text ECharts draws from these options (None: ECharts' own grey default)."""
    colours = [
        options["title"]["textStyle"].get("color"),
        options["legend"].get("textStyle", {}).get("color"),
    ]
    for name in ("xAxis", "yAxis"):
        axis = options[name]
        colours += [axis.get("axisLabel", {}).get("color"), axis.get("nameTextStyle", {}).get("color")]
    colours += [s["markLine"].get("label", {}).get("color") for s in options["series"] if "markLine" in s]
    return colours


@pytest.mark.parametrize("chart", sorted(CHARTS))
@pytest.mark.parametrize(("dark", "card"), [(False, LIGHT_CARD), (True, DARK_CARD)])
def test_every_chart_text_contrasts_with_its_card_in_each_theme(chart: str, dark: bool, card: str) -> None:
    colours = _text_colours(themed_chart(CHARTS[chart](), dark=dark))

    assert None not in colours  # ECharts' default grey is what was unreadable on the dark cards
    assert all(contrast_ratio(str(colour), card) >= TEXT for colour in colours), colours


def test_the_chart_palettes_and_the_dark_message_colours_are_readable() -> None:
    assert contrast_ratio(LIGHT_CHART.text, LIGHT_CARD) >= TEXT
    assert contrast_ratio(DARK_CHART.text, DARK_CARD) >= TEXT
    for name, colour in DARK_TEXT_COLOURS.items():
        assert contrast_ratio(colour, DARK_CARD) >= TEXT, name
        assert f".{name} {{ color: {colour}" in THEME_CSS
    for name, colour in LIGHT_TEXT_COLOURS.items():
        assert contrast_ratio(colour, LIGHT_CARD) >= TEXT, name
        assert f"body--light .{name} {{ color: {colour}" in THEME_CSS
    # Quasar's own negative red on the dark card: why the dark theme needs its own (it read as disabled).
    assert contrast_ratio("#c10015", DARK_CARD) < TEXT


def test_the_contrast_ratio_is_wcags() -> None:
    assert contrast_ratio("#000000", "#ffffff") == pytest.approx(21.0)
    assert contrast_ratio("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)
    assert contrast_ratio("#123456", "#123456") == pytest.approx(1.0)
