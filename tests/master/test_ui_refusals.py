"""How the portal shows a refusal (``act``, ``show_refusal``), in NiceGUI's user simulation.

A page of its own calls the helpers around actions that are refused, fail unexpectedly or succeed; the
notification must carry the admin API's own message for the refusal, and only the unexpected failure
is logged with its traceback.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from nicegui import core, ui
from nicegui.testing.general import nicegui_reset_globals, prepare_simulation
from nicegui.testing.user import User

from mirbad_master._api_errors import refusal_of
from mirbad_master.ui._refusals import REFUSED, act, show_under_field
from mirbad_orchestration import UnknownModelError
from mirbad_protocol import InvalidFieldError

pytestmark = pytest.mark.anyio

outcomes: list[object] = []


async def _refused() -> str:
    raise UnknownModelError("nope")


async def _broken() -> str:
    raise RuntimeError("the store's file vanished")


async def _fine() -> str:
    return "stored"


@asynccontextmanager
async def visitor() -> AsyncIterator[User]:
    """A simulated visitor of one page whose buttons run an action through :func:`act`."""
    with nicegui_reset_globals():
        os.environ["NICEGUI_USER_SIMULATION"] = "true"
        try:
            prepare_simulation()

            @ui.page("/try")
            def page() -> None:
                async def run(action: str) -> None:
                    actions = {"refused": _refused, "broken": _broken, "fine": _fine}
                    outcomes.append(await act(actions[action](), done=f"{action}: done"))

                def bad_field() -> None:
                    show_under_field(InvalidFieldError("name", "must not be empty"), {"name": name})

                name = ui.input("Name").mark("name")
                for action in ("refused", "broken", "fine"):
                    ui.button(action, on_click=lambda action=action: run(action)).mark(action)
                ui.button("bad field", on_click=bad_field).mark("bad-field")

            ui.run(storage_secret="simulation")
            async with (
                core.app.router.lifespan_context(core.app),
                httpx.AsyncClient(
                    transport=httpx.ASGITransport(core.app), base_url="http://portal"
                ) as client,
            ):
                yield User(client)
        finally:
            os.environ.pop("NICEGUI_USER_SIMULATION", None)
            outcomes.clear()


async def test_a_refusal_shows_the_apis_message_and_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    async with visitor() as user:
        await user.open("/try")
        user.find(marker="refused").click()
        await user.should_see(refusal_of(UnknownModelError("nope")).message)
        seen = list(outcomes)

    assert seen == [REFUSED]
    assert "no model with id 'nope'" in user.notify.messages
    assert not [record for record in caplog.records if record.name == "mirbad_master.ui"]


async def test_an_unexpected_failure_is_shown_and_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="mirbad_master.ui"):
        async with visitor() as user:
            await user.open("/try")
            user.find(marker="broken").click()
            await user.should_see("the store's file vanished")
            seen = list(outcomes)

    [logged] = [record for record in caplog.records if record.name == "mirbad_master.ui"]
    assert seen == [REFUSED]
    assert logged.exc_info is not None
    assert isinstance(logged.exc_info[1], RuntimeError)


async def test_a_success_says_done_and_hands_back_the_result() -> None:
    async with visitor() as user:
        await user.open("/try")
        user.find(marker="fine").click()
        await user.should_see("fine: done")
        seen = list(outcomes)

    assert seen == ["stored"]


async def test_an_invalid_field_is_drawn_under_its_input_not_notified() -> None:
    async with visitor() as user:
        await user.open("/try")
        user.find(marker="bad-field").click()
        [name] = [element for element in user.find(marker="name").elements if isinstance(element, ui.input)]
        messages = list(user.notify.messages)

    assert name.error == "must not be empty"
    assert messages == []
