"""The models room's restart dialog, in NiceGUI's user simulation, with hand-written views.

It lists each saved setting the restart applies as ``old -> new``, and when what the instance runs
could not be read, it says so instead of reading as "no change".
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from nicegui import core, ui
from nicegui.testing.general import nicegui_reset_globals, prepare_simulation
from nicegui.testing.user import User

from mirbad_master.models.panels import confirm_restart
from mirbad_master.ui._fleet import ModelRow
from mirbad_protocol import ModelDefinition, ModelState, ModelStatus, RouterModelStats
from mirbad_protocol.admin import ModelView, SettingChangeView

pytestmark = pytest.mark.anyio

DEFINITION = ModelDefinition(id="qwen", served_name="qwen", model_path="Qwen/Qwen3-8B")
STATUS = ModelStatus(id="qwen", served_name="qwen", state=ModelState.READY, config_hash="0" * 16)


async def _nothing() -> None:
    return None


@asynccontextmanager
async def dialog_of(view: ModelView) -> AsyncIterator[User]:
    """A simulated visitor of a page whose button opens the restart dialog of ``view``."""
    row = ModelRow(view=view, metrics=None, router=RouterModelStats(served_name="qwen"))
    with nicegui_reset_globals():
        os.environ["NICEGUI_USER_SIMULATION"] = "true"
        try:
            prepare_simulation()

            @ui.page("/try")
            def page() -> None:
                ui.button("restart", on_click=lambda: confirm_restart(row, _nothing)).mark("open")

            ui.run(storage_secret="simulation")
            async with (
                core.app.router.lifespan_context(core.app),
                httpx.AsyncClient(
                    transport=httpx.ASGITransport(core.app), base_url="http://portal"
                ) as client,
            ):
                user = User(client)
                await user.open("/try")
                user.find(marker="open").click()
                yield user
        finally:
            os.environ.pop("NICEGUI_USER_SIMULATION", None)


async def test_the_dialog_lists_old_and_new() -> None:
    change = SettingChangeView(field="maxNumSeqs", old=16, new=4, needs_restart=True)
    view = ModelView(definition=DEFINITION, status=STATUS, restart_pending=True, changed_settings=[change])
    async with dialog_of(view) as user:
        await user.should_see(marker="changed-settings")
        await user.should_see("maxNumSeqs: 16 -> 4")
        await user.should_not_see(marker="changed-settings-problem")


async def test_an_unreadable_command_line_is_said_so() -> None:
    problem = "the running command line cannot be read: --max-num-seqs: not an integer"
    view = ModelView(
        definition=DEFINITION, status=STATUS, restart_pending=True, changed_settings_problem=problem
    )
    async with dialog_of(view) as user:
        await user.should_see(f"What it runs cannot be listed in full: {problem}")
        await user.should_see(marker="changed-settings-problem")
        await user.should_not_see("It runs its saved settings already")
