"""The Models page's dialogs: start anyway after a memory refusal, restart with the changes, remove.

They are the room's public portal part (``panels``): the Tuning view offers the same restart once a
result is applied, so other rooms may import these, never the room's page or private modules.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from nicegui import ui
from pydantic import JsonValue

from mirbad_master._views import SettingChangeView
from mirbad_master.ui._fleet import ModelRow
from mirbad_master.ui._marks import testid

__all__ = ["change_line", "confirm_delete", "confirm_force", "confirm_restart"]


def change_line(change: SettingChangeView) -> str:
    """``maxNumSeqs: 16 -> 32``, each value as JSON (what the restart dialog lists)."""
    return f"{change.field}: {_json(change.old)} -> {_json(change.new)}"


def _json(value: JsonValue) -> str:
    return json.dumps(value, ensure_ascii=False)


def confirm_force(model_id: str, reason: str, go: Callable[[], Awaitable[None]]) -> None:
    """Say why the node refused ``model_id`` and offer to start it anyway (``go`` does)."""
    with ui.dialog() as dialog, ui.card().classes("max-w-lg"):
        ui.label(f"{model_id} does not fit in the node's memory").classes("text-h6")
        ui.label(reason).classes("text-body2")
        ui.label("Starting anyway skips the memory check; the node may run out of memory.").classes(
            "text-warning"
        )
        with ui.row().classes("w-full justify-end"):
            ui.button("Cancel", on_click=dialog.close).props("flat")

            async def force() -> None:
                dialog.close()
                await go()

            testid(ui.button("Start anyway", on_click=force).props("color=warning"), "force-start")
    dialog.open()


def confirm_restart(row: ModelRow, go: Callable[[], Awaitable[None]]) -> None:
    """Ask before restarting ``row``, listing each saved setting the restart applies (``go`` does)."""
    changes = [change for change in row.view.changed_settings if change.needs_restart]
    with ui.dialog() as dialog, ui.card().classes("max-w-xl"):
        ui.label(f"Restart {row.id}?").classes("text-h6")
        if changes:
            ui.label("The restart applies these saved settings:")
            with testid(ui.column().classes("gap-0"), "changed-settings"):
                for change in changes:
                    ui.label(change_line(change)).classes("font-mono text-body2")
        elif row.view.restart_pending:
            ui.label("The running instance was launched with other settings than the saved ones.")
        else:
            ui.label("It runs its saved settings already; the restart stops and starts it again.")
        if row.view.changed_settings_problem:
            # Never a silent "no change": the operator learns the list could not be read.
            problem = ui.label(f"What it runs cannot be listed in full: {row.view.changed_settings_problem}")
            testid(problem.classes("text-warning text-body2"), "changed-settings-problem")
        with ui.row().classes("w-full justify-end"):
            ui.button("Cancel", on_click=dialog.close).props("flat")

            async def restart() -> None:
                dialog.close()
                await go()

            testid(ui.button("Restart", on_click=restart), "confirm-restart")
    dialog.open()


def confirm_delete(row: ModelRow, go: Callable[[], Awaitable[None]]) -> None:
    """Ask before removing ``row`` (``go`` stops and removes it)."""
    with ui.dialog() as dialog, ui.card():
        ui.label(f"Remove {row.id}?").classes("text-h6")
        ui.label("It is stopped first if it runs; its definition is deleted from the registry.")
        with ui.row().classes("w-full justify-end"):
            ui.button("Cancel", on_click=dialog.close).props("flat")

            async def delete() -> None:
                dialog.close()
                await go()

            testid(ui.button("Remove", on_click=delete).props("color=negative"), "confirm-delete")
    dialog.open()
