"""The portal's downloads in NiceGUI's user simulation over a master with fake agents.

``local`` offers both download kinds, ``gpu-1`` none (``tests.master.test_api_downloads.agent``): the
box and the panels are offered for ``local`` only, a start lands on its agent through the API's own
path, and the panel follows the job the fake agent moves on.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from nicegui import ui
from nicegui.testing.user import User
from tests._support.polling import eventually
from tests.master._stack import Master, running_master
from tests.master.test_api_downloads import agent
from tests.master.test_ui_pages import portal_user

from mirbad_master.downloads.panels import default_folder, eta_text, parse_download, progress_percent
from mirbad_protocol import InvalidFieldError
from mirbad_protocol.downloads import DownloadFile, HuggingFaceDownload, OllamaDownload

pytestmark = pytest.mark.anyio

QWEN_FOLDER = "qwen3-0.6b-gguf"
FIRST = "dl-000000000001"  # the id the fake agent gives its first job


async def polled(master: Master) -> None:
    def ready() -> bool:
        states = [master.services.cache.node(node) for node in ("local", "gpu-1")]
        return all(state is not None and state.info is not None for state in states)

    await eventually(ready, timeout_s=10)


def percent_shown(user: User, job_id: str) -> str | None:
    labels = [e for e in user.find(marker=f"download-percent-{job_id}").elements if isinstance(e, ui.label)]
    return labels[0].text if labels else None


async def test_a_download_started_from_the_box_is_followed_to_100_percent(tmp_path: Path) -> None:
    async with running_master(tmp_path, "local", "gpu-1", agent=agent) as master, portal_user(master) as user:
        await polled(master)
        await user.open("/models")
        await user.should_see(marker="download-box")
        user.find(marker="download-source").type("qwen3:0.6b")
        user.find(marker="download-start").click()
        await user.should_see(marker=f"download-{FIRST}")
        await eventually(lambda: percent_shown(user, FIRST) == "0 %", timeout_s=10)
        job = master.local.downloads[FIRST]
        files = [DownloadFile(path="model.gguf", size_bytes=1000, done_bytes=1000)]
        master.local.downloads[FIRST] = job.model_copy(
            update={"state": "completed", "done_bytes": 1000, "files": files}
        )
        await eventually(lambda: percent_shown(user, FIRST) == "100 %", timeout_s=10)

    assert (job.kind, job.source, job.folder) == ("ollama", "library/qwen3:0.6b", "qwen3-0.6b")
    assert master.local.bodies[-1] == {"kind": "ollama", "model": "qwen3:0.6b", "folder": "qwen3-0.6b"}


async def test_a_running_download_is_cancelled_from_the_nodes_page(tmp_path: Path) -> None:
    async with running_master(tmp_path, "local", "gpu-1", agent=agent) as master, portal_user(master) as user:
        await polled(master)
        started = await master.admin.post(
            "/api/nodes/local/downloads", json={"kind": "ollama", "model": "qwen3", "folder": "q"}
        )
        await user.open("/nodes")
        await user.should_see(marker="downloads-local")
        await user.should_not_see(marker="downloads-gpu-1")
        user.find(marker=f"download-cancel-{started.json()['id']}").click()
        await eventually(lambda: master.local.downloads[FIRST].state == "cancelled", timeout_s=10)


async def test_a_cancelled_download_is_retried_from_the_nodes_page(tmp_path: Path) -> None:
    async with running_master(tmp_path, "local", "gpu-1", agent=agent) as master, portal_user(master) as user:
        await polled(master)
        await master.admin.post(
            "/api/nodes/local/downloads", json={"kind": "ollama", "model": "qwen3", "folder": "q"}
        )
        await master.admin.delete(f"/api/nodes/local/downloads/{FIRST}")
        await user.open("/nodes")
        await user.should_see(marker=f"download-retry-{FIRST}")
        user.find(marker=f"download-retry-{FIRST}").click()
        await eventually(lambda: master.local.downloads[FIRST].state == "queued", timeout_s=10)


async def test_the_editor_downloads_a_saved_models_sources(tmp_path: Path) -> None:
    model = {
        "id": "qwen",
        "servedName": "qwen",
        "modelPath": "qwen3/model.gguf",
        "sources": [{"repoId": "Qwen/Qwen3-0.6B-GGUF", "folder": "qwen3", "allowPatterns": ["*.gguf"]}],
    }
    async with running_master(tmp_path, "local", "gpu-1", agent=agent) as master, portal_user(master) as user:
        await polled(master)
        assert (await master.admin.post("/api/models", json=model)).status_code == 201
        await user.open("/models/qwen/edit")
        await user.should_see(marker="source-downloads")
        user.find(marker="source-download-0").click()
        await eventually(lambda: FIRST in master.local.downloads, timeout_s=10)

    job = master.local.downloads[FIRST]
    assert (job.source, job.folder) == ("Qwen/Qwen3-0.6B-GGUF@main", "qwen3")


async def test_no_download_is_offered_without_a_node_that_offers_them(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master, portal_user(master) as user:
        await user.open("/models")
        await user.should_see(marker="new-model")
        await user.should_not_see(marker="download-box")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Qwen/Qwen3-0.6B-GGUF",
            HuggingFaceDownload(repo_id="Qwen/Qwen3-0.6B-GGUF", folder=QWEN_FOLDER),
        ),
        (
            "https://huggingface.co/Qwen/Qwen3-0.6B-GGUF/tree/main",
            HuggingFaceDownload(repo_id="Qwen/Qwen3-0.6B-GGUF", folder=QWEN_FOLDER),
        ),
        ("org/model@v1", HuggingFaceDownload(repo_id="org/model", revision="v1", folder="model")),
        ("qwen3:0.6b", OllamaDownload(model="qwen3:0.6b", folder="qwen3-0.6b")),
        ("user/model:q4", OllamaDownload(model="user/model:q4", folder="user-model-q4")),
        ("ollama:qwen3", OllamaDownload(model="qwen3", folder="qwen3")),
    ],
)
def test_the_search_box_tells_hugging_face_from_ollama(
    text: str, expected: HuggingFaceDownload | OllamaDownload
) -> None:
    assert parse_download(text) == expected
    assert default_folder(text) == expected.folder


@pytest.mark.parametrize(
    ("text", "folder", "field"),
    [
        ("", "", "source"),
        ("Qwen/Qwen3", "../up", "folder"),
        ("a/b/c", "", "repoId"),
        ("Qwen3:x", "", "model"),
    ],
)
def test_the_search_box_names_the_bad_field(text: str, folder: str, field: str) -> None:
    with pytest.raises(InvalidFieldError) as refused:
        parse_download(text, folder)

    assert refused.value.field == field


def test_progress_and_eta_read_for_people() -> None:
    assert [progress_percent(d, 1000) for d in (0, 999, 1000)] == [0, 99, 100]
    assert progress_percent(0, 0) == 0
    assert [eta_text(s) for s in (None, 42, 125, 3725)] == [
        "",
        "ETA 42 s",
        "ETA 2 min 05 s",
        "ETA 1 h 02 min",
    ]
