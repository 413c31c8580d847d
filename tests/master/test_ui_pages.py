"""The portal's pages in NiceGUI's user simulation: no browser, the real master services behind them.

Each test runs the pages over a master with fake agents (``running_master``), signed in by a session
cookie, and drives them through :class:`nicegui.testing.User`. The browser tier checks what only a
browser can: the login form, streaming, the themes.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import anyio
import httpx
import pytest
from nicegui import core, ui
from nicegui.testing.general import nicegui_reset_globals, prepare_simulation
from nicegui.testing.user import User
from tests._support.polling import eventually
from tests._support.stand_in_builder import Builder
from tests.master._stack import Master, running_master

from mirbad_master._admin_auth import SESSION_COOKIE
from mirbad_master._llama_server_build import LlamaServerBuild
from mirbad_master._pages import _pages
from mirbad_master.ui import Portal
from mirbad_master.ui._overview import DARK_CHART, LIGHT_CHART
from mirbad_orchestration.supervision import RestartPause
from mirbad_protocol import ModelState

pytestmark = pytest.mark.anyio

TINY = {"id": "tiny", "servedName": "tiny", "modelPath": "tiny", "memoryBudgetGiB": 1, "tags": ["chat"]}


@asynccontextmanager
async def portal_user(master: Master, *, signed_in: bool = True) -> AsyncIterator[User]:
    """A simulated visitor of the portal of ``master`` (NiceGUI's globals are reset around it)."""
    with nicegui_reset_globals():
        os.environ["NICEGUI_USER_SIMULATION"] = "true"
        try:
            prepare_simulation()
            _pages(Portal(master.services, master.auth))
            ui.run(storage_secret="simulation")
            async with (
                core.app.router.lifespan_context(core.app),
                httpx.AsyncClient(
                    transport=httpx.ASGITransport(core.app), base_url="http://portal"
                ) as client,
            ):
                if signed_in:
                    client.cookies.set(SESSION_COOKIE, await master.auth.sign_in(master.password, "sim"))
                yield User(client)
        finally:
            os.environ.pop("NICEGUI_USER_SIMULATION", None)


async def test_every_page_needs_a_session(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master, portal_user(master, signed_in=False) as user:
        await user.open("/models")
        await user.should_see("Sign in with the administrator password.")
        await user.should_not_see("New model")


async def test_the_models_page_filters_by_all_selected_tags(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master, portal_user(master) as user:
        await master.admin.post("/api/models", json=TINY)
        await user.open("/models?tags=chat")
        await user.should_see(marker="model-tiny")
        await user.should_see(marker="model-ornith-9b-fp8")  # the example model is tagged chat too
        await user.open("/models?tags=chat,quantized")
        await user.should_not_see(marker="model-tiny")
        await user.should_see(marker="model-ornith-9b-fp8")


async def test_a_start_refused_for_memory_offers_to_start_anyway(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master, portal_user(master) as user:
        await master.admin.post("/api/models", json={**TINY, "memoryBudgetGiB": 120})
        await user.open("/models")
        user.find(marker="start-tiny").click()
        await user.should_see("does not fit in the node's memory")
        user.find(marker="force-start").click()
        await user.should_see("tiny is starting (memory check skipped)")
        status = await master.services.runtime.status("tiny")

    assert status.state.value in ("Starting", "Ready")


async def test_the_editor_shows_a_message_per_field_and_saves_a_valid_model(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master, portal_user(master) as user:
        await user.open("/models/new")
        user.find(marker="field-id").type("Bad_ID")
        await user.should_see("use 1 to 40 lowercase letters")
        user.find(marker="field-id").clear().type("qwen")
        user.find(marker="field-servedName").type("Qwen3-8B")
        user.find(marker="field-modelPath").type("qwen3-8b")
        user.find(marker="save-model").click()
        # This fake node catalogues no llama-server: the executable is what is still missing.
        await user.should_see("a llamacpp model needs a logical executable")
        user.find(marker="field-runtime").click()
        user.find("vllm").click()
        await user.should_see("vllm serve --model /models/qwen3-8b --served-model-name Qwen3-8B")
        user.find(marker="save-model").click()
        await user.should_see("qwen saved")
        saved = await master.services.models.get("qwen")

    assert (saved.runtime, saved.served_name) == ("vllm", "Qwen3-8B")


async def test_a_paused_model_is_explained_on_the_overview_and_counted_by_the_badge(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master, portal_user(master) as user:
        await master.admin.post("/api/models", json=TINY)
        pause = RestartPause(
            model_id="tiny", node_id="local", crashes=3, last_error="exit 1", paused_at=datetime.now(UTC)
        )
        await master.services.pauses.pause(pause)
        await user.open("/")
        await user.should_see("Automatic restarts paused for tiny after 3 crashes: exit 1")
        await user.should_see(marker="attention-badge")
        await user.open("/models")
        await user.should_see("Crashed 3 times, automatic restarts paused")


async def test_a_created_key_is_shown_once_and_can_be_revoked(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master, portal_user(master) as user:
        await user.open("/access")
        user.find(marker="create-key").click()
        user.find(marker="key-name").type("notebook")
        user.find(marker="confirm-create-key").click()
        await user.should_see(marker="new-key-secret")
        await user.should_see("shown this once")
        user.find(marker="close-secret").click()
        user.find(marker="revoke-notebook").click()
        user.find(marker="confirm-revoke").click()
        await user.should_see("notebook revoked")
        keys = await master.services.keys.list()

    assert [(key.name, key.revoked_at is not None) for key in keys] == [("notebook", True)]


async def test_enrolling_a_node_shows_the_command_to_run_there(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master, portal_user(master) as user:
        await user.open("/nodes")
        await user.should_see(marker="node-local")
        user.find(marker="enroll-name").type("gpu-2")
        user.find(marker="issue-token").click()
        await user.should_see("mirbad-agent enroll --master")
        await user.should_see("--name gpu-2")


async def test_the_playground_says_when_no_model_is_ready(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master, portal_user(master) as user:
        await user.open("/playground")
        await user.should_see("No model is Ready: start one on the Models page.")


async def test_the_editor_offers_every_registered_node_and_saves_the_chosen_one(tmp_path: Path) -> None:
    async with running_master(tmp_path, "local", "gpu-2") as master, portal_user(master) as user:
        await user.open("/models/new")
        await user.should_see("any node (the default node, local)")
        user.find(marker="field-id").type("qwen")
        user.find(marker="field-servedName").type("Qwen3-8B")
        user.find(marker="field-modelPath").type("qwen3-8b")
        user.find(marker="field-runtime").click()
        user.find("vllm").click()
        user.find(marker="field-nodeId").click()
        user.find("gpu-2").click()
        user.find(marker="save-model").click()
        await user.should_see("qwen saved")
        saved = await master.services.models.get("qwen")

    assert saved.placement is not None
    assert saved.placement.node_id == "gpu-2"


async def test_a_model_placed_on_a_node_that_left_still_opens_in_the_editor(tmp_path: Path) -> None:
    async with running_master(tmp_path, "local", "gpu-2") as master, portal_user(master) as user:
        placed = {**TINY, "runtime": "vllm", "placement": {"nodeId": "gpu-2"}}
        (await master.admin.post("/api/models", json=placed)).raise_for_status()
        await master.services.nodes.remove("gpu-2")
        await user.open("/models/tiny/edit")
        await user.should_see("gpu-2 (not registered)")


async def _ready(master: Master, model_id: str) -> None:
    """Start ``model_id`` and wait until the master's cache (what the pages read) says Ready."""
    (await master.admin.post(f"/api/models/{model_id}/start")).raise_for_status()
    with anyio.fail_after(10):
        while (view := (await master.admin.get(f"/api/models/{model_id}")).json())["status"][
            "state"
        ] != "Ready":
            assert view["status"]["state"] in ("Starting", "Stopped"), view
            await anyio.sleep(0.05)


async def test_the_access_snippets_are_for_a_ready_model_not_the_first_stopped_one(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master, portal_user(master) as user:
        await master.admin.post("/api/models", json=TINY)
        await _ready(master, "tiny")
        await user.open("/access")
        await user.should_see('model="tiny"')
        await user.should_not_see('model="ornith-9b"')


async def test_the_playground_sizes_max_tokens_to_the_model_and_shows_a_refusal_in_the_chat(
    tmp_path: Path,
) -> None:
    async with running_master(tmp_path) as master, portal_user(master) as user:
        await master.admin.post("/api/models", json={**TINY, "maxModelLen": 256})
        await _ready(master, "tiny")
        await user.open("/playground")
        (max_tokens,) = user.find(marker="chat-max-tokens").elements
        assert isinstance(max_tokens, ui.number)
        assert max_tokens.value == 64  # a quarter of the context: the prompt needs the rest
        (await master.admin.post("/api/models/tiny/stop")).raise_for_status()
        user.find(marker="chat-input").type("hello")
        user.find(marker="chat-send").click()
        await user.should_see(marker="chat-error")
        await user.should_see("Refused (503)")
        await user.should_not_see(marker="chat-answer")


async def test_a_node_without_a_llama_server_names_the_command_that_catalogues_one(tmp_path: Path) -> None:
    llamacpp = {**TINY, "id": "tiny-cpp", "servedName": "tiny-cpp", "runtime": "llamacpp"}
    llamacpp["executable"] = {"name": "llama-server", "version": "b6000"}
    async with running_master(tmp_path) as master, portal_user(master) as user:
        (await master.admin.post("/api/models", json=llamacpp)).raise_for_status()
        await user.open("/models")
        await user.should_see(marker="catalogue-hint-tiny-cpp")
        await user.should_see(
            "Node local catalogues no llama-server: run `mirbad-agent executables add PATH`"
        )
        await user.should_not_see(marker="catalogue-hint-ornith-9b-fp8")  # a vLLM model needs none
        await user.open("/nodes")
        await user.should_see(marker="catalogue-hint-local")
        await user.open("/models/new")
        await user.should_see(marker="executable-hint")


async def test_the_memory_chart_takes_the_theme_switched_to(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master, portal_user(master) as user:
        await user.open("/")
        (chart,) = user.find(marker="memory-chart").elements
        assert isinstance(chart, ui.echart)
        assert chart.options["legend"]["textStyle"]["color"] == LIGHT_CHART.text
        user.find(marker="theme-toggle").click()
        assert chart.options["legend"]["textStyle"]["color"] == DARK_CHART.text
        assert chart.options["yAxis"]["nameTextStyle"]["color"] == DARK_CHART.text


@pytest.mark.parametrize(
    "path", ["/", "/models", "/models/new", "/playground", "/access", "/nodes", "/backup"]
)
async def test_every_button_has_a_name_a_screen_reader_can_say(tmp_path: Path, path: str) -> None:
    async with running_master(tmp_path) as master, portal_user(master) as user:
        await user.open(path)
        buttons = [element for element in user.find(ui.button).elements if isinstance(element, ui.button)]
        assert buttons
        unnamed = [button for button in buttons if not (button.text or button.props.get("aria-label"))]
        assert unnamed == []
        (attention,) = user.find(marker="attention").elements
        assert attention.props["aria-label"] == "Needs attention"
        (theme,) = user.find(marker="theme-toggle").elements
        assert theme.props["aria-label"] == "Switch to the dark theme"
        user.find(marker="theme-toggle").click()
        assert theme.props["aria-label"] == "Switch to the light theme"


# The page refreshes on its own timers.
_until = partial(eventually, timeout_s=10)


def _shown_state(user: User, path: str, model_id: str) -> str | None:
    """The state the Models page's badge or the Overview's table shows for ``model_id``."""
    if path == "/models":
        badges = [el for el in user.find(marker=f"state-{model_id}").elements if isinstance(el, ui.badge)]
        return badges[0].text if badges else None
    for table in user.find(marker="overview-models").elements:
        assert isinstance(table, ui.table)
        for row in table.rows:
            if row["model"] == model_id:
                return str(row["state"])
    return None


@pytest.mark.parametrize("path", ["/models", "/"])
async def test_a_model_shows_ready_before_the_next_node_poll(tmp_path: Path, path: str) -> None:
    # The node monitor polls once a minute here: only the page's own look at a Starting model can
    # bring the news, as it must when a model loads in milliseconds and the poll is seconds away.
    async with running_master(tmp_path, health_poll_s=60) as master, portal_user(master) as user:
        master.local.driver.start_state = ModelState.STARTING
        await master.admin.post("/api/models", json=TINY)
        (await master.admin.post("/api/models/tiny/start")).raise_for_status()
        await user.open(path)
        await _until(lambda: _shown_state(user, path, "tiny") == "Starting")
        master.local.driver.set_state("tiny", ModelState.READY)
        await _until(lambda: _shown_state(user, path, "tiny") == "Ready")


async def test_the_models_page_links_each_view_and_focuses_the_model_the_url_names(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master, portal_user(master) as user:
        await master.admin.post("/api/models", json=TINY)
        await user.open("/models?focus=tiny")
        (card,) = user.find(marker="model-tiny").elements
        (other,) = user.find(marker="model-ornith-9b-fp8").elements
        assert "mirbad-focused" in card.classes
        assert "mirbad-focused" not in other.classes
        (edit,) = user.find(marker="edit-tiny").elements
        (logs,) = user.find(marker="logs-tiny").elements
        assert (edit.props["href"], logs.props["href"]) == ("/models/tiny/edit", "/models/tiny/logs")
        await user.open('/models?focus=nothing"]);alert(1)//')  # no such model: nothing is run
        await user.should_see(marker="model-tiny")


async def test_the_local_node_shows_its_llama_server_build_instead_of_the_catalogue_hint(
    tmp_path: Path,
) -> None:
    # A first `dev.py up`: the fake local node catalogues no llama-server because one is being built.
    builder = Builder(tmp_path)
    async with running_master(tmp_path) as master, portal_user(master) as user:
        master.services.llama_server_build = LlamaServerBuild(builder.command(), builder.log)
        await user.open("/nodes")
        await user.should_see(marker="llama-server-build")
        await user.should_see("llama-server: building (")
        await user.should_not_see(marker="catalogue-hint-local")


async def test_a_llama_cpp_model_card_shows_the_build_not_the_catalogue_hint_and_nothing_once_built(
    tmp_path: Path,
) -> None:
    llamacpp = {**TINY, "id": "tiny-cpp", "servedName": "tiny-cpp", "runtime": "llamacpp"}
    llamacpp["executable"] = {"name": "llama-server", "version": "b6000"}
    builder = Builder(tmp_path)
    build = LlamaServerBuild(builder.command(), builder.log)
    async with running_master(tmp_path) as master, portal_user(master) as user:
        master.services.llama_server_build = build
        (await master.admin.post("/api/models", json=llamacpp)).raise_for_status()
        await user.open("/models")
        await user.should_see(marker="llama-server-build-tiny-cpp")
        await user.should_see("llama-server: building (")
        await user.should_not_see(marker="catalogue-hint-tiny-cpp")
        builder.release()
        with anyio.fail_after(20):
            await build.run()
        # Built: the node's info may not list the new binary yet, but nothing is missing any more.
        await user.open("/models")
        await user.should_see(marker="model-tiny-cpp")
        await user.should_not_see(marker="llama-server-build-tiny-cpp")
        await user.should_not_see(marker="catalogue-hint-tiny-cpp")


async def test_the_editor_opened_from_a_tag_filter_links_back_to_it(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master, portal_user(master) as user:
        await master.admin.post("/api/models", json=TINY)
        await user.open("/models?tags=chat")
        (edit,) = user.find(marker="edit-tiny").elements
        (logs,) = user.find(marker="logs-tiny").elements
        await user.open(edit.props["href"])
        await user.should_see(marker="save-model")
        (cancel,) = user.find("Cancel").elements

    assert (edit.props["href"], logs.props["href"]) == ("/models/tiny/edit?tags=chat", "/models/tiny/logs")
    assert cancel.props["href"] == "/models?tags=chat"
