"""The Models page: every model with its state, the ALL-tags filter, start / stop / restart, delete.

A start the node refuses for memory offers to start anyway (``force``); a model whose saved settings
differ from the running instance offers the restart, listing each changed setting as ``old -> new``.
The tag filter is the URL (``/models?tags=a,b``): only models carrying ALL selected tags are listed.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

from nicegui import ui

from mirbad_master._llama_server_build import LlamaServerBuild
from mirbad_master.audit.views import audit_link
from mirbad_master.downloads.panels import render_models_downloads
from mirbad_master.ui._fleet import (
    STARTING_POLL_S,
    FleetSnapshot,
    ModelRow,
    fleet_snapshot,
    read_starting,
    tags_param,
)
from mirbad_master.ui._format import DASH, gib, memory_in_use, pause_text, per_second, state_color
from mirbad_master.ui._marks import link_button, testid
from mirbad_master.ui._portal import Portal
from mirbad_master.ui._refusals import PORTAL_ACTOR, REFUSED, act, show_refusal
from mirbad_orchestration import AgentAdmissionRefusedError
from mirbad_protocol import ModelState
from mirbad_protocol.agent import AgentInfo

from . import actions
from ._editor import render_model_editor
from ._llama_server_hint import render_llama_server_hint
from ._missing_files import MissingFilesNotes
from .panels import change_line, confirm_delete, confirm_force, confirm_restart

__all__ = ["FOCUSED_CLASS", "REFRESH_S", "render_model_editor", "render_models", "tags_query"]

FOCUSED_CLASS: Final = "mirbad-focused ring-2 ring-primary"
"""The classes of the card ``?focus=`` names."""

REFRESH_S: Final = 2.0
"""How often the list reads the fleet again (states change while models start)."""


def tags_query(selected: list[str], toggled: str) -> str:
    """The Models URL with ``toggled`` added to or removed from the selected tags."""
    tags = [tag for tag in selected if tag != toggled] if toggled in selected else [*selected, toggled]
    return f"/models?tags={quote(','.join(tags), safe=',')}" if tags else "/models"


async def render_models(portal: Portal, selected: list[str], focus: str | None = None) -> None:
    """Build the Models page into the current container and keep it fresh.

    Args:
        portal: the portal.
        selected: the tags of the filter (``?tags=``).
        focus: the model to highlight and scroll to (``?focus=``, where saving a model lands).
    """
    services = portal.services
    with ui.row().classes("w-full items-center"):
        ui.label("Models").classes("text-h5")
        ui.space()
        testid(link_button("New model", "/models/new", icon="add"), "new-model")
    filters = ui.row().classes("w-full items-center gap-2")
    listing = ui.column().classes("w-full gap-2")
    # Dialogs live outside the list, which is rebuilt on every refresh.
    dialogs = ui.element("div")
    notes = MissingFilesNotes(portal, dialogs)

    async def run(action: Awaitable[object], done: str) -> None:
        if await act(action, done=done) is not REFUSED:
            await refresh()

    async def start(row: ModelRow) -> None:
        try:
            await actions.start_model(services, row.id, PORTAL_ACTOR)
        except AgentAdmissionRefusedError as exc:  # offered again without the memory check
            forced = f"{row.id} is starting (memory check skipped)"
            with dialogs:
                confirm_force(
                    row.id,
                    str(exc),
                    lambda: run(actions.start_model(services, row.id, PORTAL_ACTOR, force=True), forced),
                )
            return
        except Exception as exc:  # every other refusal, as /api words it
            show_refusal(exc)
            return
        ui.notify(f"{row.id} is starting", type="positive")
        await refresh()

    def restart(row: ModelRow) -> None:
        with dialogs:
            confirm_restart(
                row,
                lambda: run(actions.restart_model(services, row.id, PORTAL_ACTOR), f"{row.id} restarting"),
            )

    def delete(row: ModelRow) -> None:
        with dialogs:
            confirm_delete(
                row, lambda: run(actions.delete_model(services, row.id, PORTAL_ACTOR), f"{row.id} removed")
            )

    handlers = _Handlers(
        start=start,
        stop=lambda row: run(actions.stop_model(services, row.id, PORTAL_ACTOR), f"{row.id} stopped"),
        restart=restart,
        delete=delete,
        tags=selected,
    )

    shown: list[FleetSnapshot] = []

    async def refresh() -> None:
        snapshot = await fleet_snapshot(services)
        shown[:] = [snapshot]
        await notes.read([row.view for row in snapshot.with_tags(selected)])
        filters.clear()
        with filters:
            _tag_filter(snapshot, selected)
        listing.clear()
        with listing:
            rows = snapshot.with_tags(selected)
            if not rows:
                ui.label("No model carries all the selected tags." if selected else "No model yet.").classes(
                    "text-grey-7"
                )
            for row in rows:
                info = snapshot.node_info(row.view.status.node_id)
                _model_card(row, handlers, info, row.id == focus, notes, services.llama_server_build)

    async def settle() -> None:
        if shown and await read_starting(services, shown[0]):
            await refresh()

    await refresh()
    if focus and shown and any(row.id == focus for row in shown[0].models):
        # Once, on arrival: the later refreshes keep the highlight but leave the scrolling to the reader.
        # Only a listed id gets here (the query is the visitor's), written as a JSON string all the same.
        selector = json.dumps(f'[data-testid="model-{focus}"]')
        ui.run_javascript(f"document.querySelector({selector})?.scrollIntoView({{block: 'center'}})")
    ui.timer(REFRESH_S, refresh, immediate=False)
    ui.timer(STARTING_POLL_S, settle, immediate=False)
    await render_models_downloads(portal)


@dataclass(frozen=True)
class _Handlers:
    start: Callable[[ModelRow], Awaitable[None]]
    stop: Callable[[ModelRow], Awaitable[None]]
    restart: Callable[[ModelRow], None]
    delete: Callable[[ModelRow], None]
    tags: list[str]  # the page's filter: the editor comes back to it after a save


def _tag_filter(snapshot: FleetSnapshot, selected: list[str]) -> None:
    tags = sorted(set(snapshot.tags()) | set(selected))
    if not tags:
        return
    ui.label("Tags (models carrying all):").classes("text-caption text-grey-7")
    for tag in tags:
        chosen = tag in selected
        chip = ui.chip(
            tag,
            icon="check" if chosen else None,
            color="primary" if chosen else None,
            text_color="white" if chosen else None,
            on_click=lambda tag=tag: ui.navigate.to(tags_query(selected, tag)),
        ).props("clickable outline" if not chosen else "clickable")
        testid(chip, f"tag-{tag}")
    if selected:
        ui.link("clear", "/models").classes("text-caption")


def _model_card(
    row: ModelRow,
    handlers: _Handlers,
    node_info: AgentInfo | None,
    focused: bool,
    notes: MissingFilesNotes,
    build: LlamaServerBuild | None,
) -> None:
    definition, status = row.view.definition, row.view.status
    card = ui.card().classes("w-full").props("flat bordered")
    testid(card, f"model-{row.id}")
    if focused:
        card.classes(FOCUSED_CLASS)
        card.props["aria-current"] = "true"
    with card, ui.row().classes("w-full items-start gap-4 no-wrap"):
        with ui.column().classes("gap-1 grow"):
            with ui.row().classes("items-center gap-2"):
                badge = ui.badge(status.state.value).props(f"color={state_color(status.state)}")
                testid(badge, f"state-{row.id}")
                ui.label(row.id).classes("text-subtitle1 text-weight-medium")
                if row.view.restart_pending:
                    testid(ui.badge("Restart pending").props("color=warning outline"), "restart-pending")
                if status.progress is not None:
                    # Ready but wedged or crawling: the reason (the figures that made it) on hover.
                    progress = ui.badge(status.progress).props("color=negative outline")
                    progress.tooltip(status.progress_reason or status.progress)
                    testid(progress, f"progress-{row.id}")
            ui.label(
                f"{definition.served_name} · {definition.runtime} · node {status.node_id or '—'} · "
                f"budget {gib(definition.memory_budget_gib)}"
            ).classes("text-caption text-grey-7")
            _live_metrics(row)
            _pending_changes(row)
            if row.view.pause is not None:
                testid(ui.label(pause_text(row.view.pause)).classes("text-negative"), "paused")
            elif status.error and status.state in (
                ModelState.FAILED,
                ModelState.STOPPED,
                ModelState.STARTING,
            ):
                ui.label(status.error.strip().splitlines()[-1]).classes("text-caption text-negative")
            if not row.running:
                render_llama_server_hint(definition, status.node_id, node_info, build)
            notes.note(definition)
            if definition.tags:
                with ui.row().classes("gap-1"):
                    for tag in definition.tags:
                        ui.chip(tag).props("dense outline")
        _buttons(row, handlers)


def _live_metrics(row: ModelRow) -> None:
    # What a running model is doing, from the node's latest telemetry sample (refreshed with the page):
    # the card is where a user looks after starting one, so it answers "is it serving?" without the
    # Overview.
    metrics = row.metrics if row.running else None
    if metrics is None:
        return
    budget = row.view.status.budget_gib or row.view.definition.memory_budget_gib
    parts = [
        f"running {metrics.requests_running:g}",
        f"waiting {metrics.requests_waiting:g}",
        f"generation {per_second(metrics.generation_tokens_per_second)}",
        f"prompt {per_second(metrics.prompt_tokens_per_second)}",
        f"KV cache {DASH if metrics.kv_cache_usage is None else f'{metrics.kv_cache_usage:.0%}'}",
        memory_in_use(metrics.memory_bytes, budget),
    ]
    testid(ui.label(" · ".join(parts)).classes("text-caption"), f"metrics-{row.id}")


def _pending_changes(row: ModelRow) -> None:
    changes = [change for change in row.view.changed_settings if change.needs_restart]
    if not row.view.restart_pending or not changes:
        return
    with ui.column().classes("gap-0"):
        for change in changes:
            ui.label(change_line(change)).classes("font-mono text-caption text-warning")


def _buttons(row: ModelRow, handlers: _Handlers) -> None:
    running = row.state in (ModelState.STARTING, ModelState.READY)
    with ui.row().classes("gap-1 no-wrap items-center"):
        if not running:
            _button("Start", "play_arrow", f"start-{row.id}", lambda: handlers.start(row), color="positive")
        else:
            _button("Stop", "stop", f"stop-{row.id}", lambda: handlers.stop(row), color="negative")
            _button("Restart", "restart_alt", f"restart-{row.id}", lambda: handlers.restart(row))
        # Links, not buttons: the URL shows where they go, and a new tab or Back works as anywhere.
        pages = (
            ("Edit", "edit", "edit"),
            ("Logs", "article", "logs"),
            ("Benchmark", "speed", "benchmarks"),
            ("Tuning", "tune", "tuning"),
        )
        for label, icon, page in pages:
            query = f"?{tags_param(handlers.tags)}" if page == "edit" and handlers.tags else ""
            link = link_button(label, f"/models/{quote(row.id)}/{page}{query}", icon=icon)
            testid(link.props("flat dense no-caps color=primary"), f"{page}-{row.id}")
        audit = link_button("Audit", audit_link(row.id), icon="history")
        testid(audit.props("flat dense no-caps color=primary"), f"audit-{row.id}")
        # Red, as the destructive action it is (grey read as a disabled button in the dark theme).
        _button("Delete", "delete", f"delete-{row.id}", lambda: handlers.delete(row), color="negative")


def _button(label: str, icon: str, name: str, on_click: Callable[[], object], color: str = "primary") -> None:
    button = ui.button(label, icon=icon, on_click=on_click).props(f"flat dense no-caps color={color}")
    testid(button, name)
