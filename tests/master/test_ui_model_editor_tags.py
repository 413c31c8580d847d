"""The model editor's tags: picked from the catalogue, with the tags the model suggests one click away."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from nicegui import ui
from tests.master._stack import running_master
from tests.master.test_ui_pages import portal_user

from mirbad_master.models._editor import tag_options, tag_suggestions
from mirbad_orchestration.registry import TAG_CATALOGUE
from mirbad_protocol import ModelDefinition

CODER: dict[str, Any] = {
    "id": "coder",
    "servedName": "coder",
    "runtime": "llamacpp",
    "executable": {"name": "llama-server", "version": "b6000"},
    "modelPath": "Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf",
    "memoryBudgetGiB": 2,
    "tags": ["chat", "team-a"],
}


def test_the_picker_offers_the_whole_catalogue_with_labels_and_keeps_the_models_own_slugs() -> None:
    options = tag_options(["chat", "team-a"])

    assert list(options)[: len(TAG_CATALOGUE)] == [info.slug for info in TAG_CATALOGUE]
    assert options["tools"] == "Tool calling (tools)"
    assert options["team-a"] == "team-a"


def test_suggestions_are_the_catalogue_tags_the_model_does_not_carry_yet() -> None:
    coder = ModelDefinition.model_validate(CODER)

    assert tag_suggestions(coder, ["chat", "team-a"]) == ["code", "quantized", "small", "gguf"]
    assert tag_suggestions(None, []) == []  # a form that does not validate suggests nothing


@pytest.mark.anyio
async def test_a_suggested_tag_is_added_with_one_click_and_saved(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master, portal_user(master) as user:
        (await master.admin.post("/api/models", json=CODER)).raise_for_status()
        await user.open("/models/coder/edit")
        await user.should_see(marker="suggest-tag-code")
        (picker,) = user.find(marker="field-tags").elements
        assert isinstance(picker, ui.select)
        assert "vision" in picker.options  # the catalogue is offered, not only what the model has
        user.find(marker="suggest-tag-code").click()
        await user.should_not_see(marker="suggest-tag-code")
        user.find(marker="save-model").click()
        await user.should_see("coder saved")
        saved = await master.services.models.get("coder")

    assert saved.tags == ["chat", "team-a", "code"]
