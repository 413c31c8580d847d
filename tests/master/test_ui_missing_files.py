"""A model card's "files missing" note in NiceGUI's user simulation over a master with fake agents.

``local`` downloads and answers ``/model-files``; ``gpu-1`` answers it but downloads nothing; ``old``
is an agent without the route. The note names the missing paths, its Download opens the dialog
filled from the definition's sources, and once the files are there the note is gone and Start works.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from nicegui import ui
from nicegui.testing.user import User
from tests._support.polling import eventually
from tests.master._stack import Master, running_master
from tests.master.test_ui_pages import portal_user
from tests.orchestration._fake_agent import FakeAgent

from mirbad_master.models._missing_files import PrefilledDownload, prefilled_downloads
from mirbad_master.models._model_files import checked_paths, primary_source
from mirbad_protocol import ModelDefinition

pytestmark = pytest.mark.anyio

QWEN: dict[str, Any] = {
    "id": "qwen",
    "servedName": "qwen",
    "modelPath": "qwen3/model.gguf",
    "sources": [
        {"repoId": "Qwen/Qwen3-0.6B-GGUF", "folder": "qwen3", "revision": "v1", "allowPatterns": ["*.gguf"]},
        {"repoId": "org/drafter", "folder": "drafter"},
    ],
}


def agent(node_id: str) -> FakeAgent:
    fake = FakeAgent(node_name=node_id)
    if node_id == "local":
        fake.download_features = ["downloads.hf-native", "downloads.ollama"]
    if node_id != "old":
        fake.present_files = set()
    return fake


def model(model_id: str, node_id: str, model_path: str = "m") -> dict[str, Any]:
    return {"id": model_id, "servedName": model_id, "modelPath": model_path, "placement": {"nodeId": node_id}}


async def polled(master: Master) -> None:
    def ready() -> bool:
        states = [master.services.cache.node(node) for node in ("local", "gpu-1", "old")]
        return all(state is not None and state.info is not None for state in states)

    await eventually(ready, timeout_s=10)


def shown(user: User, marker: str) -> list[ui.element]:
    return list(user.find(marker=marker).elements) if _marked(user, marker) else []


def _marked(user: User, marker: str) -> bool:
    try:
        user.find(marker=marker)
    except AssertionError:
        return False
    return True


def value(user: User, marker: str) -> object:
    [element] = user.find(marker=marker).elements
    assert isinstance(element, ui.input)
    return element.value


async def test_the_note_names_the_missing_paths_and_goes_once_they_are_downloaded(tmp_path: Path) -> None:
    async with running_master(tmp_path, "local", "gpu-1", "old", agent=agent) as master:
        await polled(master)
        for body in (QWEN, model("elsewhere", "gpu-1"), model("unasked", "old")):
            assert (await master.admin.post("/api/models", json=body)).status_code == 201
        async with portal_user(master) as user:
            await user.open("/models")
            await user.should_see(marker="missing-files-qwen")
            await user.should_see("Not on node local: qwen3/model.gguf, drafter")
            await user.should_see(marker="missing-files-elsewhere")
            offered = [bool(shown(user, f"download-missing-{m}")) for m in ("qwen", "elsewhere")]
            unasked = bool(shown(user, "missing-files-unasked"))

            user.find(marker="download-missing-qwen").click()
            await user.should_see(marker="missing-dialog")
            fields = ("source-0", "folder-0", "patterns-0", "source-1", "folder-1")
            filled = [value(user, f"missing-{name}") for name in fields]
            user.find(marker="missing-start").click()
            await eventually(lambda: len(master.local.downloads) == 2, timeout_s=10)

            master.local.present_files = {"qwen3/model.gguf", "drafter"}
            await eventually(lambda: not shown(user, "missing-files-qwen"), timeout_s=10)
            user.find(marker="start-qwen").click()
            await eventually(lambda: bool(master.local.driver.starts), timeout_s=10)

    assert offered == [True, False]  # gpu-1 reports no download feature: no button
    assert not unasked  # an agent without the route: no note rather than a false one
    assert filled == ["Qwen/Qwen3-0.6B-GGUF@v1", "qwen3", "*.gguf", "org/drafter", "drafter"]
    assert [(job.source, job.folder) for job in master.local.downloads.values()] == [
        ("Qwen/Qwen3-0.6B-GGUF@v1", "qwen3"),
        ("org/drafter@main", "drafter"),
    ]
    started = [body for body in master.local.bodies if "kind" in body]
    assert [body.get("allowPatterns") for body in started] == [["*.gguf"], None]
    assert [spec.model_id for spec in master.local.driver.starts] == ["qwen"]
    # One /model-files request per node and refresh carries every stopped model's paths (seeded ones too).
    asked = [body["paths"] for body in master.local.bodies if set(body) == {"paths"}]
    assert {"qwen3/model.gguf", "drafter"} < set(asked[0])


def test_the_paths_a_start_needs_are_the_model_path_and_the_extra_folders() -> None:
    definition = ModelDefinition.from_wire(QWEN)

    assert checked_paths(definition) == ["qwen3/model.gguf", "drafter"]
    assert primary_source(definition) == definition.sources[0]
    assert prefilled_downloads(definition, ["qwen3/model.gguf", "drafter"]) == [
        PrefilledDownload("qwen3/model.gguf", "Qwen/Qwen3-0.6B-GGUF@v1", "qwen3", "*.gguf"),
        PrefilledDownload("drafter", "org/drafter", "drafter", ""),
    ]


def test_a_path_no_source_names_gets_an_empty_source_and_its_folder() -> None:
    definition = ModelDefinition.from_wire(model("bare", "local", "tiny/model.gguf"))

    assert prefilled_downloads(definition, ["tiny/model.gguf"]) == [
        PrefilledDownload("tiny/model.gguf", "", "tiny", "")
    ]
    assert primary_source(definition) is None
