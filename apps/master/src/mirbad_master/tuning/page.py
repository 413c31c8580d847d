"""A model's Tuning view (``/models/{id}/tuning``): plan, run, cancel, live progress, results and Apply best.

The goal, workload preset, Quick/Full and explicit-steps pickers preview the plan the engine would
follow (each step with its goal, tradeoff and values, the gates' notes, the ETA from the model's recent
runs) from :meth:`TuningJobs.plan` and :meth:`TuningJobs.estimate`, so the preview is the run's own
plan. Run starts the same job the API does and Cancel is the API's cancel; progress (phase, current
candidate and its goal, done of total, ETA) is read from the job every second. The newest stored run
shows its candidates (effective configuration, score with its repetition range, guards, goal and
tradeoff, RuntimeNotes, start and benchmark seconds) and an ECharts plot of the scores against the
baseline (1.0). Apply best is the API's apply path; a running model then offers the Models page's
restart dialog. Every change goes through the room's actions as the portal's administrator; a
refusal is shown beside the buttons in the API's words, and the job is drawn by the job progress
component every kind shares.
"""

from __future__ import annotations

from typing import Any, Final

from nicegui import ui

from mirbad_master.models import actions as model_actions
from mirbad_master.models.panels import confirm_restart
from mirbad_master.ui._chart_theme import themed_chart
from mirbad_master.ui._fleet import fleet_snapshot
from mirbad_master.ui._format import count
from mirbad_master.ui._job_progress import JobProgress
from mirbad_master.ui._layout import page_theme
from mirbad_master.ui._marks import link_button, testid
from mirbad_master.ui._portal import Portal
from mirbad_master.ui._refusals import PORTAL_ACTOR, refusal_text
from mirbad_orchestration.benchmarks import WORKLOAD_PRESETS
from mirbad_orchestration.tuning import (
    GOALS,
    PRESET_STEPS,
    EtaBasis,
    EtaProjection,
    TuningPlan,
    plan_for,
    planned_seconds,
)
from mirbad_protocol import ModelDefinition
from mirbad_protocol.tuning import TuningCandidate, TuningJobView, TuningRequest, TuningRun

from .actions import apply_tuning_run, cancel_tuning, start_tuning

__all__ = ["GOAL_LABELS", "baseline_median", "chart_options", "render_tuning", "score_text"]

GOAL_LABELS: Final = {"balanced": "Balanced", "many-agents": "Many agents", "single-user": "Single user"}
"""The goal picker's entries (every goal the engine has)."""
_SEARCH_LABELS: Final = {"quick": "Quick", "full": "Full"}
_CLASSIC: Final = ""  # the preset picker's entry for the classic goal's descent
_POLL_S: Final = 1.0
_RANGE_COLOR: Final = "rgba(25, 118, 210, 0.35)"


def score_text(candidate: TuningCandidate) -> str:
    """``1.120 (1.080 to 1.150)``: the median score and its repetition range; empty when never measured."""
    if candidate.score is None:
        return ""
    if candidate.score_min is None or candidate.score_max is None:
        return f"{candidate.score:.3f}"
    return f"{candidate.score:.3f} ({candidate.score_min:.3f} to {candidate.score_max:.3f})"


def _label(candidate: TuningCandidate) -> str:
    return "baseline" if candidate.step == "baseline" else candidate.description or candidate.step


def chart_options(run: TuningRun) -> dict[str, Any]:
    """The scores of ``run``'s measured candidates, each with its repetition range, against the baseline.

    The search's candidates first, then the confirmation stage's re-measurements (``confirm: ...``,
    the stage that decides, with its ranges). A range is drawn as a stacked bar from its lowest to
    its highest repetition (a transparent bar lifts it to the lowest), the median as a point, and the
    baseline's own median as the line. Each repetition is scored against the median of the baseline's
    measurements, metric by metric, so the baseline's median score is near 1.0 but not exactly it: a
    line at 1.0 put the baseline's own point below (or above) it. The names under the axis are slanted
    and cut to a width, so long candidate descriptions do not overlap.
    """
    search = [(c, _label(c)) for c in run.candidates if c.score is not None]
    confirm = [(c, f"confirm: {_label(c)}") for c in run.confirmation if c.score is not None]
    measured = [c for c, _ in search + confirm]
    lows = [c.score_min if c.score_min is not None else c.score for c in measured]
    highs = [c.score_max if c.score_max is not None else c.score for c in measured]
    line = baseline_median(run)
    return {
        "title": {
            "text": "Scores against the baseline: median and repetition range",
            "textStyle": {"fontSize": 13},
        },
        "animation": False,  # drawn already when the page settles (and in screenshots)
        "tooltip": {"trigger": "axis"},
        "legend": {"data": ["median", "range"], "bottom": 0},
        # containLabel: the slanted names get the room they need above the legend.
        "grid": {"bottom": 40, "containLabel": True},
        "xAxis": {
            "type": "category",
            # Every candidate named (not every other one), slanted and cut so neighbours do not overlap.
            "axisLabel": {"interval": 0, "rotate": 30, "width": 140, "overflow": "truncate"},
            "data": [name for _, name in search + confirm],
        },
        "yAxis": {"type": "value", "scale": True},
        "series": [
            {
                "name": "low",
                "type": "bar",
                "stack": "range",
                "itemStyle": {"color": "transparent"},
                "tooltip": {"show": False},
                "data": [round(float(low or 0.0), 4) for low in lows],
            },
            {
                "name": "range",
                "type": "bar",
                "stack": "range",
                "itemStyle": {"color": _RANGE_COLOR},
                "data": [
                    round(float((high or 0.0) - (low or 0.0)), 4)
                    for low, high in zip(lows, highs, strict=True)
                ],
            },
            {
                "name": "median",
                "type": "scatter",
                "symbolSize": 10,
                "data": [
                    {"value": round(float(c.score or 0.0), 4), "itemStyle": {"color": _outcome_color(c)}}
                    for c in measured
                ],
                "markLine": {
                    "symbol": "none",
                    "label": {"formatter": f"baseline {line:.3f}", "position": "insideEndTop"},
                    "data": [{"yAxis": round(line, 4)}],
                },
            },
        ],
    }


def baseline_median(run: TuningRun) -> float:
    """Where the plot's baseline line goes: the search baseline's median score (1.0 if none was measured)."""
    base = next((c for c in run.candidates if c.step == "baseline" and c.score is not None), None)
    return float(base.score) if base is not None and base.score is not None else 1.0


def _outcome_color(candidate: TuningCandidate) -> str:
    return "#d32f2f" if candidate.outcome == "rejected" else "#1976d2"


def _seconds(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"  # a tiny model starts in under a second


def _seconds_text(candidate: TuningCandidate) -> str:
    """``3.2 + 41``: the start until Ready and the benchmark's seconds (what was measured of them)."""
    parts = [candidate.start_seconds, candidate.benchmark_seconds]
    if all(part is None for part in parts):
        return ""
    return " + ".join("-" if part is None else _seconds(part) for part in parts)


def _candidate_rows(run: TuningRun) -> list[dict[str, Any]]:
    rows = []
    stages = (("search", run.candidates), ("confirmation", run.confirmation))
    for stage, candidates in stages:
        for index, candidate in enumerate(candidates):
            rows.append(
                {
                    "key": f"{stage}-{index}",
                    "stage": stage,
                    "candidate": _label(candidate),
                    "config": candidate.effective_config,
                    "outcome": candidate.outcome,
                    "score": score_text(candidate),
                    "guards": "; ".join(candidate.guard_violations),
                    "why": " / ".join(part for part in (candidate.goal, candidate.tradeoff) if part),
                    "notes": "; ".join(candidate.runtime_notes),
                    "seconds": _seconds_text(candidate),
                    # A rejected candidate's error repeats its guards: said once, in their column.
                    "error": "" if candidate.outcome == "rejected" else candidate.error or "",
                }
            )
    return rows


_COLUMNS: Final = [
    {"name": key, "label": label, "field": key, "align": "left"}
    for key, label in (
        ("stage", "Stage"),
        ("candidate", "Candidate"),
        ("config", "Effective configuration"),
        ("outcome", "Outcome"),
        ("score", "Score (range)"),
        ("guards", "Guards broken"),
        ("why", "Goal / tradeoff"),
        ("notes", "Runtime notes"),
        ("seconds", "Start + benchmark s"),
        ("error", "Why"),
    )
]


def _eta_text(seconds: float) -> str:
    return f"about {round(seconds / 60)} min" if seconds >= 120 else f"about {round(seconds)} s"


def _progress_text(job: TuningJobView) -> str:
    if job.state != "running":
        return job.state + (f": {job.error}" if job.error else "")
    parts = [f"running: {job.phase}"]
    if job.candidate:
        parts.append(job.candidate + (f" ({job.candidate_goal})" if job.candidate_goal else ""))
    parts.append(f"{job.done} of {job.total} candidates")
    if job.eta_s is not None:
        parts.append(f"{_eta_text(job.eta_s)} left")
    return " · ".join(parts)


def _winner_text(run: TuningRun) -> str:
    when = run.finished_at or run.started_at
    scored = (
        WORKLOAD_PRESETS[run.preset].label
        if run.preset is not None and run.preset in WORKLOAD_PRESETS
        else None
    )
    head = f"{when:%Y-%m-%d %H:%M} · {scored or GOAL_LABELS.get(run.goal, run.goal)} · {run.state}"
    if run.state != "succeeded":
        return head + (f": {run.error}" if run.error else "")
    if run.winner_is_baseline or run.winner is None:
        return head + " · the saved settings are kept (nothing beat the baseline)"
    return head + f" · best: {_label(run.winner)} ({score_text(run.winner)}): {run.winner.effective_config}"


def _plan_preview(plan: TuningPlan, projection: EtaProjection | None = None) -> None:
    rows = [
        {
            "step": dimension.name,
            "values": ", ".join(dimension.describe(value) for value in dimension.values)
            + (" (decided by the run so far)" if dimension.follow_up is not None else ""),
            "goal": dimension.goal,
            "tradeoff": dimension.tradeoff,
        }
        for dimension in plan.dimensions
    ]
    columns = [
        {"name": key, "label": label, "field": key, "align": "left"}
        for key, label in (
            ("step", "Step"),
            ("values", "Candidates"),
            ("goal", "Goal"),
            ("tradeoff", "Tradeoff"),
        )
    ]
    testid(
        ui.table(columns=columns, rows=rows, row_key="step").props("dense flat").classes("w-full"),
        "tuning-plan",
    )
    eta = projection.planned() if projection is not None else planned_seconds(plan)
    total = projection.total if projection is not None else plan.candidates + 4
    basis = projection.basis if projection is not None else EtaBasis()
    testid(
        ui.label(
            f"{count(total, 'candidate')} with the baseline and the confirmation stage, "
            f"{_eta_text(eta)} ({basis.describe()}; re-projected from the run's pace once it runs)"
        ).classes("text-caption"),
        "tuning-eta",
    )
    for note in plan.notes:
        ui.label(note).classes("text-caption text-grey-7")


async def render_tuning(portal: Portal, model_id: str) -> None:
    """Build the Tuning view of ``model_id`` and keep its progress live while the page is open."""
    services = portal.services
    definition = await services.models.get(model_id)
    state: dict[str, Any] = {"shown": "", "run": None}  # "": no job key yet, so the first poll draws
    with ui.row().classes("w-full items-center"):
        ui.label(f"Tuning of {definition.id}").classes("text-h5")
        ui.space()
        link_button("Back to models", "/models").props("flat")
    with ui.row().classes("items-center gap-2"):
        goal = testid(ui.select(dict(GOAL_LABELS), value=GOALS[0], label="Goal"), "tuning-goal")
        goal.classes("min-w-[12rem]")
        # A workload preset runs the preset search scored on it; "Classic goal" the goal's descent.
        presets = {_CLASSIC: "Classic goal"} | {
            name: preset.label for name, preset in WORKLOAD_PRESETS.items() if not preset.pooling
        }
        preset = testid(ui.select(presets, value=_CLASSIC, label="Preset"), "tuning-preset")
        preset.classes("min-w-[12rem]")
        search = testid(ui.select(dict(_SEARCH_LABELS), value="quick", label="Search"), "tuning-search")
        search.classes("min-w-[8rem]")
        # Explicit steps (the API's ``steps``): exactly these dimensions, Quick/Full ignored. The
        # options are the Full plan's, so a dimension the gates leave out is not offered.
        known = plan_for(definition, search="full").steps
        steps = testid(
            ui.select(known, multiple=True, value=[], label="Steps (optional)").props("use-chips clearable"),
            "tuning-steps",
        )
        steps.classes("min-w-[14rem]")
        run = testid(ui.button("Run", icon="tune"), "tuning-run")
        cancel = testid(ui.button("Cancel", icon="cancel").props("flat color=negative"), "tuning-cancel")
        cancel.set_enabled(False)  # until a job runs: nothing to cancel
    message = testid(ui.label("").classes("text-caption text-negative"), "tuning-message")
    plan_box = ui.column().classes("w-full gap-1")
    progress = JobProgress("tuning")
    results = ui.column().classes("w-full")
    dialogs = ui.element("div")  # outside the results, which are rebuilt

    def request() -> TuningRequest:
        chosen = list(steps.value or [])
        return TuningRequest(
            goal=goal.value, search=search.value, steps=chosen or None, preset=preset.value or None
        )

    async def show_plan(current: ModelDefinition) -> None:
        try:
            plan = await services.tuning.preview(model_id, current, request())
            projection = await services.tuning.estimate(model_id, plan, request().preset)
        except Exception as exc:  # shown in place of the plan, in the API's words
            plan_box.clear()
            with plan_box:
                ui.label("Plan").classes("text-h6")
                ui.label(refusal_text(exc)).classes("text-negative")
            return
        plan_box.clear()
        with plan_box:
            ui.label("Plan").classes("text-h6")
            _plan_preview(plan, projection)

    async def refresh_plan() -> None:
        show_plan_steps()
        await show_plan(await services.models.get(model_id))

    def show_plan_steps() -> None:
        # The steps a request may name: the preset search's for a vLLM model, else the runtime's.
        wanted = PRESET_STEPS if preset.value and definition.runtime == "vllm" else known
        if list(steps.options) != list(wanted):
            steps.set_options(list(wanted), value=[value for value in steps.value or [] if value in wanted])

    def current_job() -> TuningJobView | None:
        jobs = [job for job in services.tuning.jobs() if job.model_id == model_id]
        return jobs[-1] if jobs else None

    theme = page_theme()

    async def refresh_results() -> None:
        listed = await services.tuning_results.list(model_id)
        newest = listed.runs[0] if listed.runs else None
        state["run"] = newest
        results.clear()
        with results:
            ui.label("Result").classes("text-h6")
            if newest is None:
                ui.label("No tuning run yet.").classes("text-grey-7")
            else:
                testid(ui.label(_winner_text(newest)), "tuning-winner")
                if newest.best_definition is not None:
                    testid(ui.button("Apply best", icon="done_all", on_click=apply), "tuning-apply")
                for note in newest.notes:
                    ui.label(note).classes("text-caption text-grey-7")
                if any(c.score is not None for c in newest.candidates):
                    dark = bool(theme is not None and theme.value)
                    plot = ui.echart(themed_chart(chart_options(newest), dark=dark), renderer="svg")
                    testid(plot, "tuning-chart").classes("w-full h-72")
                # Wrapped cells: the notes and sentences are long, and every column stays in view.
                table = ui.table(columns=_COLUMNS, rows=_candidate_rows(newest), row_key="key")
                testid(table.props("wrap-cells").classes("w-full"), "tuning-candidates")
            if len(listed.runs) > 1:
                ui.label("Earlier runs").classes("text-subtitle2")
                for earlier in listed.runs[1:]:
                    ui.label(_winner_text(earlier)).classes("text-caption")

    async def poll() -> None:
        job = current_job()
        running = job is not None and job.state == "running"
        run.set_enabled(not running)
        cancel.set_enabled(running)
        fraction = job.done / job.total if job is not None and job.total else None
        progress.show(job, status=_progress_text(job) if job else "", fraction=fraction)
        key = (job.id, job.state) if job else None
        if key != state["shown"]:
            state["shown"] = key
            await refresh_results()

    async def start() -> None:
        message.set_text("")
        body = request()
        try:
            # The same start and audit line as the API's, naming the portal's administrator.
            await start_tuning(services, model_id, body, actor=PORTAL_ACTOR)
        except Exception as exc:  # shown beside the buttons, in the API's words
            message.set_text(refusal_text(exc))
        await poll()

    async def stop() -> None:
        job = current_job()
        if job is None:
            return
        try:
            await cancel_tuning(services, job.node_id, actor=PORTAL_ACTOR)
        except Exception as exc:  # shown beside the buttons, in the API's words
            message.set_text(refusal_text(exc))
        await poll()

    async def restart() -> None:
        try:
            await model_actions.restart_model(services, model_id, PORTAL_ACTOR)
        except Exception as exc:  # shown beside the buttons, in the API's words
            message.set_text(refusal_text(exc))
            return
        ui.notify(f"{model_id} restarting", type="positive")

    async def apply() -> None:
        message.set_text("")
        try:
            stored = await apply_tuning_run(services, model_id, None, actor=PORTAL_ACTOR)
        except Exception as exc:  # shown beside the buttons, in the API's words
            message.set_text(refusal_text(exc))
            return
        await show_plan(stored)
        snapshot = await fleet_snapshot(services)
        row = next((row for row in snapshot.models if row.id == model_id), None)
        if row is not None and row.running and row.view.restart_pending:
            with dialogs:
                confirm_restart(row, restart)
        else:
            ui.notify(f"{model_id}: the tuned settings are saved; it starts with them", type="positive")

    goal.on_value_change(refresh_plan)
    preset.on_value_change(refresh_plan)
    search.on_value_change(refresh_plan)
    steps.on_value_change(refresh_plan)
    run.on_click(start)
    cancel.on_click(stop)
    if theme is not None:
        theme.on_value_change(refresh_results)  # the plot follows the header's theme switch
    await show_plan(definition)
    ui.timer(_POLL_S, poll)
    await poll()
