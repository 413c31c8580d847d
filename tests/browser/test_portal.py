"""The portal in a real browser against a real ``mirbad up``: sign-in, a model, chat, keys, themes."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest
from tests.browser._portal import ensure_ready, sign_in, tiny_definition
from tests.browser.conftest import READY_TIMEOUT_MS

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from tests.browser.conftest import RunningMaster

pytestmark = pytest.mark.browser


def test_sign_in_refuses_a_wrong_password_then_returns_to_the_page_asked_for(
    page: Page, master: RunningMaster
) -> None:
    from playwright.sync_api import expect

    page.goto(f"{master.url}/models")
    expect(page).to_have_url(re.compile(r"/login\?next=%2Fmodels$"))
    # One wrong attempt only: every test signs in from 127.0.0.1, which may fail five times a minute.
    page.get_by_test_id("password").fill("not-the-password")
    page.get_by_test_id("sign-in").click()
    expect(page.get_by_test_id("login-error")).to_contain_text("not the administrator password")
    page.get_by_test_id("password").fill(master.password)
    page.get_by_test_id("sign-in").click()
    expect(page).to_have_url(f"{master.url}/models")
    page.get_by_test_id("logout").click()
    expect(page).to_have_url(f"{master.url}/login")
    page.goto(f"{master.url}/")
    expect(page).to_have_url(f"{master.url}/login")


@pytest.mark.llamacpp
def test_a_model_refused_for_its_id_is_saved_once_fixed_and_started_until_ready(
    page: Page, master: RunningMaster
) -> None:
    from playwright.sync_api import expect

    sign_in(page, master, "/models")
    page.get_by_test_id("new-model").click()
    expect(page).to_have_url(f"{master.url}/models/new")
    page.get_by_test_id("field-id").fill("Tiny_UI!")
    expect(page.get_by_text("use 1 to 40 lowercase letters")).to_be_visible()
    page.get_by_test_id("field-servedName").fill("tiny-ui")
    page.get_by_test_id("field-modelPath").fill("tiny/tiny-llama.gguf")
    page.get_by_test_id("field-maxModelLen").fill("256")
    page.get_by_test_id("field-maxNumSeqs").fill("2")
    page.get_by_test_id("field-memoryBudgetGiB").fill("0.5")
    page.get_by_test_id("save-model").click()
    expect(page).to_have_url(f"{master.url}/models/new")  # refused: the id is still invalid
    page.get_by_test_id("field-id").fill("tiny-ui")
    expect(page.get_by_text("use 1 to 40 lowercase letters")).to_have_count(0)
    preview = page.get_by_test_id("command-preview")
    expect(preview).to_contain_text(
        "llama-server --model tiny/tiny-llama.gguf --alias tiny-ui --ctx-size 512 --parallel 2"
    )
    page.get_by_test_id("save-model").click()
    expect(page).to_have_url(re.compile(r"/models\?focus=tiny-ui$"))
    page.get_by_test_id("start-tiny-ui").click()
    expect(page.get_by_test_id("state-tiny-ui")).to_have_text("Ready", timeout=READY_TIMEOUT_MS)
    # Its card shows what it is doing, from the node's telemetry (llama-server's own /metrics).
    expect(page.get_by_test_id("metrics-tiny-ui")).to_contain_text("running 0", timeout=READY_TIMEOUT_MS)

    # A saved change waits for a restart, which lists it as old -> new.
    page.get_by_test_id("edit-tiny-ui").click()
    page.get_by_test_id("field-maxNumSeqs").fill("3")
    page.get_by_test_id("save-model").click()
    card = page.get_by_test_id("model-tiny-ui")
    expect(card.get_by_test_id("restart-pending")).to_be_visible()
    expect(card).to_contain_text("maxNumSeqs: 2 -> 3")
    page.get_by_test_id("restart-tiny-ui").click()
    expect(page.get_by_test_id("changed-settings")).to_have_text("maxNumSeqs: 2 -> 3")
    page.get_by_test_id("confirm-restart").click()
    expect(card.get_by_test_id("restart-pending")).to_have_count(0, timeout=READY_TIMEOUT_MS)
    expect(page.get_by_test_id("state-tiny-ui")).to_have_text("Ready", timeout=READY_TIMEOUT_MS)


@pytest.mark.llamacpp
def test_a_start_refused_for_memory_is_forced_from_the_dialog(page: Page, master: RunningMaster) -> None:
    from playwright.sync_api import expect

    with master.api() as api:
        huge = tiny_definition(master, "tiny-huge", memoryBudgetGiB=4096, tags=["oversized"])
        api.post("/models", json=huge).raise_for_status()
    sign_in(page, master, "/models?tags=oversized")
    expect(page.get_by_test_id("model-tiny-huge")).to_be_visible()
    expect(page.locator("[data-testid^=model-]")).to_have_count(1)  # ALL selected tags: only this one
    page.get_by_test_id("start-tiny-huge").click()
    expect(page.get_by_text("does not fit in the node's memory")).to_be_visible()
    page.get_by_test_id("force-start").click()
    expect(page.get_by_test_id("state-tiny-huge")).to_have_text("Ready", timeout=READY_TIMEOUT_MS)
    with master.api() as api:
        api.post("/models/tiny-huge/stop").raise_for_status()


@pytest.mark.llamacpp
def test_the_playground_streams_an_answer_with_its_speed(page: Page, master: RunningMaster) -> None:
    from playwright.sync_api import expect

    model = ensure_ready(master)
    sign_in(page, master, "/playground")
    page.get_by_test_id("chat-model").click()
    page.get_by_role("option", name=model, exact=True).click()
    # Max tokens is a quarter of the tiny model's 256-token context: the second turn fits as well.
    expect(page.get_by_test_id("chat-max-tokens")).to_have_value("64")
    for turn in ("hello tiny model", "and again"):
        page.get_by_test_id("chat-input").fill(turn)
        page.get_by_test_id("chat-send").click()
        expect(page.get_by_test_id("chat-stats")).to_contain_text("tok/s", timeout=READY_TIMEOUT_MS)
        expect(page.get_by_test_id("chat-stats")).to_contain_text("tokens")
    expect(page.get_by_test_id("chat-answer")).to_have_count(2)
    assert page.get_by_test_id("chat-answer").last.inner_text().strip()
    expect(page.get_by_test_id("chat-error")).to_have_count(0)


@pytest.mark.llamacpp
def test_a_refused_chat_turn_is_shown_in_the_conversation(page: Page, master: RunningMaster) -> None:
    from playwright.sync_api import expect

    model = ensure_ready(master, "tiny-refuses")
    sign_in(page, master, "/playground")
    page.get_by_test_id("chat-model").click()
    page.get_by_role("option", name=model, exact=True).click()
    with master.api() as api:
        api.post(f"/models/{model}/stop").raise_for_status()
    page.get_by_test_id("chat-input").fill("hello")
    page.get_by_test_id("chat-send").click()
    refusal = page.get_by_test_id("chat-error")
    expect(refusal).to_contain_text("Refused (503)", timeout=READY_TIMEOUT_MS)
    expect(refusal).to_be_visible()
    expect(page.get_by_test_id("chat-answer")).to_have_count(0)


def test_the_url_follows_the_view_so_reload_and_back_work(page: Page, master: RunningMaster) -> None:
    from playwright.sync_api import expect

    with master.api() as api:
        if api.get("/models/tiny-url").status_code == 404:
            api.post("/models", json=tiny_definition(master, "tiny-url")).raise_for_status()
    sign_in(page, master, "/models")
    page.get_by_test_id("edit-tiny-url").click()
    expect(page).to_have_url(f"{master.url}/models/tiny-url/edit")
    page.reload()
    expect(page.get_by_test_id("field-id")).to_have_value("tiny-url")
    page.get_by_test_id("field-maxNumSeqs").fill("3")
    page.get_by_test_id("save-model").click()
    expect(page).to_have_url(f"{master.url}/models?focus=tiny-url")
    card = page.get_by_test_id("model-tiny-url")
    expect(card).to_have_class(re.compile("mirbad-focused"))
    page.reload()
    expect(card).to_have_class(re.compile("mirbad-focused"))
    page.go_back()
    expect(page).to_have_url(f"{master.url}/models")  # the editor's entry was replaced by the save
    page.get_by_test_id("logs-tiny-url").click()
    expect(page).to_have_url(f"{master.url}/models/tiny-url/logs")
    page.reload()
    expect(page.get_by_test_id("log-status")).to_be_visible()
    page.go_back()
    expect(page).to_have_url(f"{master.url}/models")


def test_icon_only_controls_have_accessible_names(page: Page, master: RunningMaster) -> None:
    from playwright.sync_api import expect

    sign_in(page, master, "/nodes")
    expect(page.get_by_role("link", name="Needs attention")).to_be_visible()
    page.get_by_role("button", name="Switch to the dark theme").click()
    expect(page.locator("body")).to_have_class(re.compile("body--dark"))
    page.get_by_role("button", name="Switch to the light theme").click()
    expect(page.locator("body")).not_to_have_class(re.compile("body--dark"))


@pytest.mark.llamacpp
def test_a_key_works_from_the_openai_client_until_it_is_revoked(page: Page, master: RunningMaster) -> None:
    import openai
    from playwright.sync_api import expect

    model = ensure_ready(master)
    sign_in(page, master, "/access")
    page.get_by_test_id("create-key").click()
    page.get_by_test_id("key-name").fill("browser-test")
    page.get_by_test_id("confirm-create-key").click()
    secret = page.get_by_test_id("new-key-secret").inner_text().strip().splitlines()[0]
    assert secret.startswith("mb-")
    page.get_by_test_id("close-secret").click()
    expect(page.get_by_test_id("key-state-browser-test")).to_have_text("active")

    client = openai.OpenAI(base_url=f"{master.url}/v1", api_key=secret, max_retries=0, timeout=60)
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hello"}], max_tokens=8
    )
    assert reply.choices[0].message.content

    page.get_by_test_id("revoke-browser-test").click()
    page.get_by_test_id("confirm-revoke").click()
    expect(page.get_by_test_id("key-state-browser-test")).to_have_text("revoked")
    with pytest.raises(openai.AuthenticationError) as refused:
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=8
        )
    assert refused.value.status_code == 401


def test_the_theme_switch_is_remembered(page: Page, master: RunningMaster) -> None:
    from playwright.sync_api import expect

    sign_in(page, master)
    body = page.locator("body")
    expect(body).not_to_have_class(re.compile("body--dark"))
    page.get_by_test_id("theme-toggle").click()
    expect(body).to_have_class(re.compile("body--dark"))
    page.goto(f"{master.url}/nodes")
    expect(body).to_have_class(re.compile("body--dark"))
    page.get_by_test_id("theme-toggle").click()
    expect(body).not_to_have_class(re.compile("body--dark"))
    page.reload()
    expect(body).not_to_have_class(re.compile("body--dark"))


def test_saving_an_edit_keeps_the_models_pages_tag_filter(page: Page, master: RunningMaster) -> None:
    from playwright.sync_api import expect

    with master.api() as api:
        for model, tags in (("tiny-tags", ["filtered"]), ("tiny-untagged", [])):
            if api.get(f"/models/{model}").status_code == 404:
                api.post("/models", json=tiny_definition(master, model, tags=tags)).raise_for_status()
    sign_in(page, master, "/models")
    page.goto(f"{master.url}/models?tags=filtered")
    page.get_by_test_id("edit-tiny-tags").click()
    expect(page).to_have_url(f"{master.url}/models/tiny-tags/edit?tags=filtered")
    page.get_by_test_id("field-maxNumSeqs").fill("3")
    page.get_by_test_id("save-model").click()
    expect(page).to_have_url(f"{master.url}/models?tags=filtered&focus=tiny-tags")
    expect(page.get_by_test_id("model-tiny-tags")).to_have_class(re.compile("mirbad-focused"))
    # Still filtered: only the models carrying the tag are listed.
    expect(page.get_by_test_id("tag-filtered")).to_be_visible()
    expect(page.get_by_test_id("model-tiny-untagged")).to_have_count(0)
