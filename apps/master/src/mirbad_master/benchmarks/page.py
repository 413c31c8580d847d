"""A model's Benchmark view (``/models/{id}/benchmarks``): run, cancel, live progress, history and plots.

The preset picker offers "Classic suite" and the workload presets; a run starts the same job the API
does (the room's actions, with the portal's administrator as the actor), and cancel is the API's
cancel; a refusal is shown beside the buttons in the API's words. Progress (phase, N level, run, ETA)
is read from the job every second and drawn by the job progress component every kind shares.
The plots are NiceGUI's ECharts: tok/s and TTFT p95 against concurrency (one line per stored run),
and run against run (each run's aggregate tok/s at its highest level, noisy runs drawn red). Classic
(v1) and preset (v2) results both carry ``levels``, so both plot.
"""

from __future__ import annotations

from typing import Any, Final

from nicegui import ui

from mirbad_master.ui._chart_theme import themed_chart
from mirbad_master.ui._job_progress import JobProgress, progress_fill
from mirbad_master.ui._layout import page_theme
from mirbad_master.ui._marks import link_button, testid
from mirbad_master.ui._portal import Portal
from mirbad_master.ui._refusals import PORTAL_ACTOR, refusal_text
from mirbad_orchestration.benchmarks import WORKLOAD_PRESETS
from mirbad_protocol.benchmarks import BenchmarkJobView, BenchmarkResult

from .actions import cancel_benchmarks, start_benchmark

__all__ = [
    "CLASSIC_LABEL",
    "components_text",
    "concurrency_chart",
    "guards_text",
    "levels_text",
    "progress_bar",
    "render_benchmarks",
    "runs_chart",
]

CLASSIC_LABEL: Final = "Classic suite"
"""The picker's entry for the classic suite (no preset)."""
_POLL_S: Final = 1.0
_HISTORY_SHOWN: Final = 8  # runs drawn in the concurrency plots (the newest)


def _preset_options() -> dict[str, str]:
    return {"classic": CLASSIC_LABEL} | {name: p.label for name, p in WORKLOAD_PRESETS.items()}


def _run_name(result: BenchmarkResult) -> str:
    what = result.preset or "classic"
    return f"{result.finished_at:%Y-%m-%d %H:%M} · {what}"


def _noisy(result: BenchmarkResult) -> bool:
    return bool(result.noisy) or any(run.noisy for level in result.levels for run in level.runs)


def concurrency_chart(results: list[BenchmarkResult], metric: str, title: str) -> dict[str, Any]:
    """One line per stored run of ``metric`` against N, on a numeric N axis.

    Each point is ``[N, value]`` on a value axis, so a run measured at other levels than its neighbours
    still draws its own line at the right places (a category axis joined it across the gaps).
    """
    shown = results[:_HISTORY_SHOWN]
    series = []
    for result in shown:
        points = sorted((level.concurrency, getattr(level, metric)) for level in result.levels)
        series.append(
            {
                "name": _run_name(result) + (" (noisy)" if _noisy(result) else ""),
                "type": "line",
                "data": [[n, value] for n, value in points],
                "lineStyle": {"type": "dashed"} if _noisy(result) else {},
            }
        )
    return {
        "title": {"text": title, "textStyle": {"fontSize": 13}},
        "animation": False,  # a plot that is already drawn when the page settles (and in screenshots)
        "tooltip": {"trigger": "axis"},
        "legend": {"type": "scroll", "bottom": 0},
        "grid": {"bottom": 60},
        "xAxis": {"type": "value", "name": "N", "minInterval": 1},
        "yAxis": {"type": "value"},
        "series": series,
    }


def levels_text(result: BenchmarkResult) -> str:
    """A run's N levels, smallest first, as numbers (``1, 2, 16``, never ``1, 16, 2``)."""
    return ", ".join(str(n) for n in sorted({level.concurrency for level in result.levels}))


def components_text(result: BenchmarkResult) -> str:
    """A preset run's score components (``key value``, by key); empty for the classic suite."""
    return "; ".join(f"{key} {value:.3g}" for key, value in sorted(result.components.items()))


def guards_text(result: BenchmarkResult) -> str:
    """The guards a preset run was held to, the ones that are on, by wire name."""
    if result.guards is None:
        return ""
    held = result.guards.model_dump(by_alias=True, exclude_none=True)
    on = sorted((name, value) for name, value in held.items() if value is not False)
    return "; ".join(name if value is True else f"{name} {value}" for name, value in on)


def progress_bar(job: BenchmarkJobView | None) -> tuple[float, str]:
    """The progress bar's fill and Quasar colour for ``job`` (see :func:`progress_fill`)."""
    return progress_fill(job, _fraction(job))


def _fraction(job: BenchmarkJobView | None) -> float | None:
    """How far a running job is: the runs of its level started before this one."""
    if job is None or job.run is None or not job.runs:
        return None
    return (job.run - 1) / job.runs


def runs_chart(results: list[BenchmarkResult]) -> dict[str, Any]:
    """Run against run: each run's aggregate tok/s at its highest N, oldest first (noisy runs red)."""
    ordered = [result for result in reversed(results) if result.levels]
    points = []
    for result in ordered:
        top = max(result.levels, key=lambda level: level.concurrency)
        color = "#d32f2f" if _noisy(result) else "#1976d2"
        points.append({"value": round(top.aggregate_tokens_per_s, 2), "itemStyle": {"color": color}})
    return {
        "title": {
            "text": "Run against run: aggregate tok/s at the highest N (red: noisy)",
            "textStyle": {"fontSize": 13},
        },
        "animation": False,
        "tooltip": {"trigger": "axis"},
        # Every run named, slanted and cut to a width: neighbouring names do not overlap.
        "grid": {"containLabel": True},
        "xAxis": {
            "type": "category",
            "axisLabel": {"interval": 0, "rotate": 30, "width": 160, "overflow": "truncate"},
            "data": [_run_name(result) for result in ordered],
        },
        "yAxis": {"type": "value"},
        "series": [{"type": "bar", "data": points}],
    }


def _progress_text(job: BenchmarkJobView) -> str:
    parts = [f"{job.state}: {job.phase}" if job.state == "running" else job.state]
    if job.concurrency is not None and job.state == "running":
        parts.append(f"N={job.concurrency}")
    if job.run is not None and job.state == "running":
        parts.append(f"run {job.run}" + (f" of {job.runs}" if job.runs else ""))
    if job.state == "running" and job.eta_s is not None:
        parts.append(f"about {round(job.eta_s)} s left")
    if job.error:
        parts.append(job.error)
    return " · ".join(parts)


async def render_benchmarks(portal: Portal, model_id: str) -> None:
    """Build the Benchmark view of ``model_id`` and keep its progress live while the page is open."""
    services = portal.services
    definition = await services.models.get(model_id)
    # () is no key a poll makes: the first poll always draws the history, with or without a job.
    state: dict[str, Any] = {"job": None, "shown": ()}
    with ui.row().classes("w-full items-center"):
        ui.label(f"Benchmarks of {definition.id}").classes("text-h5")
        ui.space()
        link_button("Back to models", "/models").props("flat")
    with ui.row().classes("items-center gap-2"):
        picker = testid(ui.select(_preset_options(), value="classic", label="Preset"), "benchmark-preset")
        picker.classes("min-w-[14rem]")
        run = testid(ui.button("Run", icon="speed"), "benchmark-run")
        cancel = testid(ui.button("Cancel", icon="cancel").props("flat color=negative"), "benchmark-cancel")
        cancel.set_enabled(False)  # until a job runs: nothing to cancel
    message = testid(ui.label("").classes("text-caption text-negative"), "benchmark-message")
    progress = JobProgress("benchmark")
    charts = ui.column().classes("w-full")
    history = ui.column().classes("w-full")

    def current() -> BenchmarkJobView | None:
        jobs = [job for job in services.jobs.jobs() if job.model_id == model_id]
        return jobs[-1] if jobs else None

    theme = page_theme()

    def chart(options: dict[str, Any]) -> ui.echart:
        # The header's switch changes the theme without a reload: the history is redrawn with it.
        # SVG: its text is in the page, so the browser tier reads the colours the theme gave it.
        return ui.echart(themed_chart(options, dark=bool(theme is not None and theme.value)), renderer="svg")

    async def refresh_history() -> None:
        listed = await services.benchmarks.list(model_id)
        results = listed.results
        charts.clear()
        history.clear()
        with charts:
            if results:
                with ui.row().classes("w-full no-wrap"):
                    testid(
                        chart(
                            concurrency_chart(results, "aggregate_tokens_per_s", "Aggregate tok/s against N")
                        ),
                        "benchmark-chart-tokens",
                    ).classes("w-1/2 h-72")
                    testid(
                        chart(concurrency_chart(results, "ttft_p95_s", "TTFT p95 (s) against N")),
                        "benchmark-chart-ttft",
                    ).classes("w-1/2 h-72")
                testid(chart(runs_chart(results)), "benchmark-chart-runs").classes("w-full h-64")
        with history:
            ui.label("History").classes("text-h6")
            for name in listed.skipped:
                ui.label(f"skipped an unreadable result: {name}").classes("text-caption text-warning")
            if not results:
                # One message: an empty table beside it would say "No data available" a second time.
                testid(ui.label("No benchmark yet.").classes("text-grey-7"), "benchmark-empty")
                return
            rows = []
            for result in results:
                top = max(result.levels, key=lambda level: level.concurrency) if result.levels else None
                rows.append(
                    {
                        "run": _run_name(result),
                        "schema": result.schema_version,
                        "levels": levels_text(result),
                        "tokens": f"{top.aggregate_tokens_per_s:.1f}" if top else "",
                        "noisy": "; ".join(result.noisy) or ("runs" if _noisy(result) else ""),
                        "components": components_text(result),
                        "held": guards_text(result),
                        "guards": "; ".join(result.guard_violations),
                    }
                )
            columns = [
                {"name": key, "label": label, "field": key, "align": "left"}
                for key, label in (
                    ("run", "Run"),
                    ("schema", "Schema"),
                    ("levels", "N levels"),
                    ("tokens", "tok/s at top N"),
                    ("noisy", "Noisy"),
                    ("components", "Score components"),
                    ("held", "Guards"),
                    ("guards", "Guards broken"),
                )
            ]
            testid(ui.table(columns=columns, rows=rows, row_key="run").classes("w-full"), "benchmark-history")

    async def poll() -> None:
        job = current()
        running = job is not None and job.state == "running"
        run.set_enabled(not running)
        cancel.set_enabled(running)
        progress.show(job, status=_progress_text(job) if job else "", fraction=_fraction(job))
        key = (job.id, job.state) if job else None
        if key != state["shown"]:
            state["shown"] = key
            await refresh_history()

    async def start() -> None:
        message.set_text("")
        preset = picker.value if picker.value != "classic" else None
        try:
            # The same start and audit line as the API's, naming the portal's administrator.
            await start_benchmark(services, model_id, preset=preset, actor=PORTAL_ACTOR)
        except Exception as exc:  # shown beside the buttons, in the API's words
            message.set_text(refusal_text(exc))
        await poll()

    async def stop() -> None:
        job = current()
        if job is None:
            return
        try:
            await cancel_benchmarks(services, job.node_id, actor=PORTAL_ACTOR)
        except Exception as exc:  # shown beside the buttons, in the API's words
            message.set_text(refusal_text(exc))
        await poll()

    run.on_click(start)
    cancel.on_click(stop)
    if theme is not None:
        theme.on_value_change(refresh_history)
    ui.timer(_POLL_S, poll)
    await poll()
