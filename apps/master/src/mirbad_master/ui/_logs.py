"""A model's log, live: the last lines, then every new one as the node's agent follows the log."""

from __future__ import annotations

import contextlib
from typing import Final

from nicegui import background_tasks, ui

from mirbad_master._api_errors import refusal_of
from mirbad_master._composition import MasterServices
from mirbad_protocol import MirbadError

from ._marks import link_button, testid
from ._portal import Portal

__all__ = ["MAX_LINES", "TAIL_LINES", "render_logs"]

TAIL_LINES: Final = 200
"""Past lines shown when the page opens."""
MAX_LINES: Final = 2000
"""Lines kept on the page (the oldest go first)."""


async def render_logs(portal: Portal, model_id: str) -> None:
    """Build the log page of ``model_id`` and follow the log while the page is open."""
    services = portal.services
    definition = await services.models.get(model_id)
    with ui.row().classes("w-full items-center"):
        ui.label(f"Log of {definition.id}").classes("text-h5")
        ui.space()
        status = testid(ui.label("").classes("text-caption text-grey-7"), "log-status")
        again = ui.button("Follow again", icon="refresh").props("flat")
        link_button("Back to models", "/models").props("flat")
    log = testid(ui.log(max_lines=MAX_LINES).classes("w-full h-[70vh] font-mono text-xs"), "log")

    async def follow() -> None:
        again.disable()
        status.set_text("following…")
        try:
            await _follow(services, model_id, log)
        except MirbadError as exc:  # said on the page's status line, in the API's words
            status.set_text(f"stopped: {refusal_of(exc).message}")
        else:
            status.set_text("the model's process ended")
        finally:
            again.enable()

    def start() -> None:
        task = background_tasks.create(follow(), name=f"log {model_id}")
        ui.context.client.on_delete(lambda: task.cancel())

    again.on_click(start)
    start()


async def _follow(services: MasterServices, model_id: str, log: ui.log) -> None:
    definition = await services.models.get(model_id)
    holder = services.cache.locate(model_id)
    node_id = holder.node_id if holder is not None else services.runtime.node_for(definition)
    client = await services.client_of(node_id)
    for line in await client.logs(model_id, tail=TAIL_LINES):
        log.push(line)
    async with contextlib.aclosing(client.follow_logs(model_id, tail=0)) as lines:
        async for line in lines:
            log.push(line)
