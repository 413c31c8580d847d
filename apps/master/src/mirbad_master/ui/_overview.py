"""The Overview: fleet and per-node memory with its history, per-model memory and load, attention list.

The per-model chart plots what each model measurably held (:mod:`._model_memory`): its GPU processes
where the node could list them, else the runtime's measure.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from nicegui import ui

from mirbad_master._views import NodeSummary

from ._chart_theme import DARK_CHART, LIGHT_CHART, ChartColors
from ._fleet import STARTING_POLL_S, FleetSnapshot, ModelRow, fleet_snapshot, read_starting
from ._format import DASH, gib, memory_in_use, pause_text, per_second, percent, state_color
from ._layout import page_theme
from ._marks import testid
from ._memory_history import FLEET, MemoryHistory, MemorySample
from ._model_memory import (
    ModelMemoryLine,
    ServiceMemoryLine,
    gpu_memory_text,
    model_memory_lines,
    service_memory_lines,
    with_gaps,
)
from ._portal import Portal

__all__ = [
    "DARK_CHART",
    "LIGHT_CHART",
    "REFRESH_S",
    "ChartColors",
    "history_chart_options",
    "model_memory_chart_options",
    "render_overview",
]

REFRESH_S: Final = 3.0
"""How often the Overview reads the fleet again."""


def history_chart_options(history: MemoryHistory, *, dark: bool = False) -> dict[str, Any]:
    """The ECharts options of the memory history: the fleet's used memory and each node's."""
    series = [_line("Fleet", history.series(FLEET), area=True)]
    series += [_line(name, history.series(name)) for name in history.names()]
    return _chart_options(series, dark=dark)


def model_memory_chart_options(
    lines: Sequence[ModelMemoryLine | ServiceMemoryLine], *, dark: bool = False
) -> dict[str, Any]:
    """The ECharts options of the memory per model: one line per model and kind, one per host service."""
    # Three decimals: a small model's few MiB would round to nothing. A lone sample (a model just
    # Ready) gets its symbol, since a line needs two points to be seen.
    # A model's line breaks where it was stopped (no samples then), rather than bridging the stop.
    series = [
        _points(
            line.name, with_gaps(line.points) if isinstance(line, ModelMemoryLine) else line.points, digits=3
        )
        | {"showSymbol": len(line.points) == 1}
        | ({"lineStyle": {"type": "dashed"}} if line.dashed else {})
        for line in lines
    ]
    return _chart_options(series, dark=dark)


def _drawn(line: ModelMemoryLine | ServiceMemoryLine) -> Sequence[tuple[datetime, float | None]]:
    return with_gaps(line.points) if isinstance(line, ModelMemoryLine) else line.points


def _chart_options(series: list[dict[str, Any]], *, dark: bool) -> dict[str, Any]:
    colors = DARK_CHART if dark else LIGHT_CHART
    text = {"color": colors.text}
    axis = {"lineStyle": {"color": colors.axis}}
    return {
        "animation": False,
        "backgroundColor": "transparent",
        "tooltip": {
            "trigger": "axis",
            "backgroundColor": colors.tooltip,
            "borderColor": colors.axis,
            "textStyle": text,
        },
        "legend": {"top": 0, "textStyle": text},
        "grid": {"left": 50, "right": 20, "top": 30, "bottom": 30},
        "xAxis": {
            "type": "time",
            "axisLabel": {**text, "formatter": "{HH}:{mm}:{ss}"},
            "axisLine": axis,
            "splitLine": {"show": False},
            **_time_extent(series),
        },
        "yAxis": {
            "type": "value",
            "name": "GiB used",
            "min": 0,
            "nameTextStyle": text,
            "axisLabel": text,
            "axisLine": axis,
            "splitLine": {"lineStyle": {"color": colors.grid}},
        },
        "series": series,
    }


_MIN_SPAN_MS: Final = 60_000
"""The shortest time the x axis spans: ECharts spreads a lone sample over days, labelled by the hour."""


def _time_extent(series: list[dict[str, Any]]) -> dict[str, int]:
    """The x axis's bounds: from the first sample to the last, at least a minute."""
    times = [point[0] for line in series for point in line["data"]]
    if not times:
        return {}
    first, last = min(times), max(times)
    return {"min": first, "max": max(last, first + _MIN_SPAN_MS)}


def _line(name: str, samples: list[MemorySample], *, area: bool = False) -> dict[str, Any]:
    line = _points(name, [(sample.at, sample.used_gib) for sample in samples])
    if area:
        # Drawn over the node lines: with one node they coincide, and the fleet's is the one to see.
        line.update(areaStyle={"opacity": 0.15}, z=3, lineStyle={"width": 3})
    return line


def _points(name: str, points: Sequence[tuple[datetime, float | None]], *, digits: int = 2) -> dict[str, Any]:
    return {
        "name": name,
        "type": "line",
        "showSymbol": False,
        "data": [[_ms(at), None if value is None else round(value, digits)] for at, value in points],
    }


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


async def render_overview(portal: Portal, *, dark: bool) -> None:
    """Build the Overview into the current container and keep it fresh."""
    history = portal.history
    theme = page_theme()

    def is_dark_now() -> bool:
        # The header's switch changes the theme without reloading the page: follow it.
        return bool(theme.value) if theme is not None else dark

    with ui.row().classes("w-full items-center"):
        ui.label("Overview").classes("text-h5")
    live = ui.column().classes("w-full gap-4")
    with ui.card().classes("w-full"):
        ui.label("Memory in use").classes("text-subtitle1")
        # SVG: its text is in the page, so the browser tier reads the colours the theme gave it.
        chart = ui.echart(history_chart_options(history, dark=is_dark_now()), renderer="svg")
        chart.classes("w-full h-64")
        testid(chart, "memory-chart")
    with ui.card().classes("w-full"):
        ui.label("Memory per model").classes("text-subtitle1")
        ui.label(
            "GPU: the model's processes as the GPU reports them. "
            "RAM: its resident set or container memory, where the node lists no GPU processes. "
            "svc: a host service's GPU processes. Dashed budget: the model's budget, where the node's "
            "GPU processes could not be read."
        ).classes("text-caption text-grey-7")
        per_model = ui.echart(model_memory_chart_options([], dark=is_dark_now()), renderer="svg")
        per_model.classes("w-full h-64")
        testid(per_model, "model-memory-chart")
    attention = ui.column().classes("w-full")

    shown: list[FleetSnapshot] = []

    async def refresh() -> None:
        snapshot = await fleet_snapshot(portal.services)
        shown[:] = [snapshot]
        live.clear()
        with live:
            _summary(snapshot)
            _nodes(snapshot.nodes)
            _models(snapshot.models)
        attention.clear()
        with attention:
            _attention(snapshot)
        redraw()

    def redraw() -> None:
        chart.options.update(history_chart_options(history, dark=is_dark_now()))
        chart.update()
        model_ids = [row.id for row in shown[0].models] if shown else []
        telemetry = portal.services.telemetry
        lines: list[ModelMemoryLine | ServiceMemoryLine] = [*model_memory_lines(telemetry, model_ids)]
        lines += service_memory_lines(telemetry.host_histories())
        per_model.options.update(model_memory_chart_options(lines, dark=is_dark_now()))
        per_model.update()

    if theme is not None:
        theme.on_value_change(redraw)

    async def settle() -> None:
        if shown and await read_starting(portal.services, shown[0]):
            await refresh()

    await refresh()
    ui.timer(REFRESH_S, refresh, immediate=False)
    ui.timer(STARTING_POLL_S, settle, immediate=False)


def _summary(snapshot: FleetSnapshot) -> None:
    ready = sum(1 for row in snapshot.models if row.state.value == "Ready")
    with ui.row().classes("w-full gap-4"):
        _tile("Fleet memory", f"{gib(snapshot.used_gib)} of {gib(snapshot.total_gib)}", "memory")
        _tile("Models ready", f"{ready} of {len(snapshot.models)}", "view_list")
        _tile("Requests running", str(snapshot.in_flight), "sync_alt")
        _tile("Generation", per_second(snapshot.generation_rate), "speed")
    if snapshot.maintenance is not None:
        ui.label(f"Maintenance: {snapshot.maintenance}").classes("text-warning")


def _tile(title: str, value: str, icon: str) -> None:
    with ui.card().classes("min-w-[13rem] grow"), ui.row().classes("items-center no-wrap gap-3"):
        ui.icon(icon, size="md").classes("text-primary")
        with ui.column().classes("gap-0"):
            ui.label(title).classes("text-caption text-grey-7")
            ui.label(value).classes("text-h6")


def _nodes(nodes: list[NodeSummary]) -> None:
    with ui.row().classes("w-full gap-4"):
        for node in nodes:
            with ui.card().classes("min-w-[16rem] grow gap-1"):
                with ui.row().classes("items-center gap-2"):
                    ui.icon("dns").classes("text-primary")
                    ui.label(node.name).classes("text-subtitle1")
                    ui.badge("reachable" if node.reachable else "unreachable").props(
                        f"color={'positive' if node.reachable else 'negative'}"
                    )
                memory = node.memory
                if memory is None:
                    ui.label("memory not read yet").classes("text-grey-7")
                    continue
                used = max(memory.total_gib - memory.available_gib, 0.0)
                ui.linear_progress(percent(used, memory.total_gib), show_value=False).props(
                    "rounded size=10px"
                )
                ui.label(f"{gib(used)} used of {gib(memory.total_gib)} · reserve {gib(memory.reserve_gib)}")
                for gpu in memory.gpus:
                    usage = f"{gpu.used_mib / 1024:.1f} of {gpu.total_mib / 1024:.1f} GiB"
                    ui.label(f"GPU {gpu.index} {gpu.name}: {usage}").classes("text-caption")


def _models(rows: list[ModelRow]) -> None:
    columns = [
        {"name": "model", "label": "Model", "field": "model", "align": "left"},
        {"name": "state", "label": "State", "field": "state", "align": "left"},
        {"name": "node", "label": "Node", "field": "node", "align": "left"},
        {"name": "memory", "label": "Memory", "field": "memory"},
        {"name": "gpu", "label": "GPU memory", "field": "gpu"},
        {"name": "running", "label": "Running", "field": "running"},
        {"name": "waiting", "label": "Waiting", "field": "waiting"},
        {"name": "generation", "label": "Generation", "field": "generation"},
        {"name": "prompt", "label": "Prompt", "field": "prompt"},
        {"name": "requests", "label": "Requests (failed)", "field": "requests"},
    ]
    table = ui.table(columns=columns, rows=[_model_row(row) for row in rows], row_key="model")
    testid(table.classes("w-full").props("flat bordered dense"), "overview-models")
    table.add_slot(
        "body-cell-state",
        '<q-td :props="props"><q-badge :color="props.row.color" :label="props.value" />'
        '<div v-if="props.row.note" class="text-caption text-negative">{{ props.row.note }}</div></q-td>',
    )


def _model_row(row: ModelRow) -> dict[str, Any]:
    metrics = row.metrics if row.running else None
    budget = row.view.status.budget_gib or row.view.definition.memory_budget_gib
    return {
        "model": row.id,
        "state": row.state.value,
        "color": state_color(row.state),
        "note": pause_text(row.view.pause) if row.view.pause is not None else "",
        "node": row.view.status.node_id or DASH,
        "memory": memory_in_use(metrics.memory_bytes if metrics else None, budget) if row.running else DASH,
        "gpu": gpu_memory_text(metrics),
        "running": f"{metrics.requests_running:g}" if metrics else DASH,
        "waiting": f"{metrics.requests_waiting:g}" if metrics else DASH,
        "generation": per_second(metrics.generation_tokens_per_second if metrics else None),
        "prompt": per_second(metrics.prompt_tokens_per_second if metrics else None),
        "requests": f"{row.router.total} ({row.router.failed})",
    }


def _attention(snapshot: FleetSnapshot) -> None:
    anchor = ui.element("a")
    anchor.props["id"] = "attention"
    with testid(ui.card().classes("w-full"), "attention-list"):
        ui.label(f"Needs attention ({len(snapshot.attention)})").classes("text-subtitle1")
        if not snapshot.attention:
            ui.label("Nothing: every model and node is as it should be.").classes("text-grey-7")
            return
        with ui.list().props("dense separator"):
            for item in snapshot.attention:
                with ui.item().props(f"clickable href={item.link}"):
                    with ui.item_section().props("avatar"):
                        ui.icon(item.icon).classes(
                            "text-negative" if item.kind != "restart" else "text-warning"
                        )
                    with ui.item_section():
                        ui.label(item.text)
