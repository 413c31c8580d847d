"""The portal's colours per theme: the charts' text and lines, and the text colours Quasar dims in the dark.

ECharts draws its titles, legends and axes in dark grey whatever the page's theme, which on the dark
theme's near-black cards cannot be read; :func:`themed_chart` gives a chart's options the theme's
colours. Quasar's ``negative`` red and its grey captions are tuned for white: on ``#1d1d1d`` the red
of an error line or of a flat Delete button reads as disabled, so :data:`THEME_CSS` lightens them in the
dark theme only (and its yellow, green and cyan, too pale on white, are darkened in the light theme).
Every pair is held to WCAG's contrast ratio (:func:`contrast_ratio`): 4.5:1 for text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "DARK_CARD",
    "DARK_CHART",
    "DARK_TEXT_COLOURS",
    "LIGHT_CARD",
    "LIGHT_CHART",
    "LIGHT_TEXT_COLOURS",
    "THEME_CSS",
    "ChartColors",
    "contrast_ratio",
    "themed_chart",
]

LIGHT_CARD: Final = "#ffffff"
"""The light theme's card background."""
DARK_CARD: Final = "#1d1d1d"
"""The dark theme's card background (Quasar's ``$dark``)."""


@dataclass(frozen=True)
class ChartColors:
    """A chart's colours for one theme.

    Attributes:
        text: titles, legends, axis labels and names, mark labels.
        axis: the axis lines.
        grid: the split lines behind the data (faint, so the lines stand out).
        tooltip: the tooltip's background.
    """

    text: str
    axis: str
    grid: str
    tooltip: str


LIGHT_CHART: Final = ChartColors(text="#333333", axis="#888888", grid="#e6e6e6", tooltip="#ffffff")
"""On the light theme's white cards."""
DARK_CHART: Final = ChartColors(text="#e0e0e0", axis="#9e9e9e", grid="#3a3a3a", tooltip="#2a2a2a")
"""On the dark theme's cards: ECharts' own defaults are grey on grey there."""

DARK_TEXT_COLOURS: Final = {
    "text-primary": "#90caf9",
    "text-negative": "#ff8a80",
    "text-warning": "#ffd180",
    "text-positive": "#69f0ae",
    "text-info": "#80d8ff",
    "text-grey-7": "#bdbdbd",
    "text-grey-8": "#cfcfcf",
}
"""The dark theme's colour of each Quasar text class the portal uses for messages and captions."""

LIGHT_TEXT_COLOURS: Final = {
    "text-warning": "#8a5a00",
    "text-positive": "#1b7a34",
    "text-info": "#0b6e8a",
}
"""The light theme's colour of the Quasar text classes whose own colour is too pale on white."""

THEME_CSS: Final = "\n".join(
    [
        # NiceGUI loads Quasar's !important colour classes in its last cascade layer, where an important
        # rule beats every later or unlayered one; an important rule in the first layer ("theme") wins.
        "@layer theme {",
        *(
            f"body.body--dark .{name} {{ color: {colour} !important; }}"
            for name, colour in DARK_TEXT_COLOURS.items()
        ),
        *(
            f"body.body--light .{name} {{ color: {colour} !important; }}"
            for name, colour in LIGHT_TEXT_COLOURS.items()
        ),
        "}",
    ]
)
"""The style sheet of :data:`DARK_TEXT_COLOURS` and :data:`LIGHT_TEXT_COLOURS` (flat buttons included)."""


def _luminance(colour: str) -> float:
    channels = [int(colour.lstrip("#")[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast_ratio(foreground: str, background: str) -> float:
    """WCAG 2's contrast ratio of two ``#rrggbb`` colours (1 to 21; text needs 4.5)."""
    lighter, darker = sorted((_luminance(foreground), _luminance(background)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


def themed_chart(options: dict[str, Any], *, dark: bool) -> dict[str, Any]:
    """``options`` with the theme's colours on every text and line ECharts would draw in its defaults.

    The title, legend, axes (labels, names, lines, split lines), tooltip and the series' mark lines'
    labels; what the options already set apart from colours is kept.
    """
    colours = DARK_CHART if dark else LIGHT_CHART
    text = {"color": colours.text}
    themed = dict(options)
    themed["backgroundColor"] = "transparent"
    if "title" in themed:
        title = dict(themed["title"])
        title["textStyle"] = {**title.get("textStyle", {}), **text}
        themed["title"] = title
    legend = dict(themed.get("legend", {}))
    legend["textStyle"] = {**legend.get("textStyle", {}), **text}
    themed["legend"] = legend
    tooltip = dict(themed.get("tooltip", {}))
    tooltip.update(backgroundColor=colours.tooltip, borderColor=colours.axis, textStyle=text)
    themed["tooltip"] = tooltip
    for name in ("xAxis", "yAxis"):
        if name in themed:
            themed[name] = _axis(themed[name], colours)
    if "series" in themed:
        themed["series"] = [_series(series, colours) for series in themed["series"]]
    return themed


def _axis(axis: dict[str, Any], colours: ChartColors) -> dict[str, Any]:
    text = {"color": colours.text}
    themed = dict(axis)
    themed["axisLabel"] = {**axis.get("axisLabel", {}), **text}
    themed["nameTextStyle"] = {**axis.get("nameTextStyle", {}), **text}
    themed["axisLine"] = {**axis.get("axisLine", {}), "lineStyle": {"color": colours.axis}}
    split = axis.get("splitLine", {})
    if split.get("show", True):
        themed["splitLine"] = {**split, "lineStyle": {"color": colours.grid}}
    return themed


def _series(series: dict[str, Any], colours: ChartColors) -> dict[str, Any]:
    if "markLine" not in series:
        return series
    mark = dict(series["markLine"])
    mark["label"] = {**mark.get("label", {}), "color": colours.text}
    mark["lineStyle"] = {**mark.get("lineStyle", {}), "color": colours.axis}
    return {**series, "markLine": mark}
