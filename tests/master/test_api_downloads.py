"""The downloads API over a real master composition and fake agents: feature flags, refusals, audit.

The node ``local`` reports both download features, ``gpu-1`` none; the agent's own refusals are set on
the fake agent and must come out of the master with their code and field.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests.master._stack import Master, running_master
from tests.orchestration._fake_agent import FakeAgent, Refusal

from mirbad_protocol.agent import AgentErrorCode
from mirbad_runtime.exceptions import ModelPathRejectedError

pytestmark = pytest.mark.anyio

TOKEN = "hf_secret_never_shown"
HF: dict[str, Any] = {
    "kind": "huggingface",
    "repoId": "Qwen/Qwen3-0.6B-GGUF",
    "allowPatterns": ["*.gguf"],
    "folder": "qwen3",
    "token": TOKEN,
}
OLLAMA: dict[str, Any] = {"kind": "ollama", "model": "qwen3:0.6b", "folder": "qwen3-ollama"}


def agent(node_id: str) -> FakeAgent:
    fake = FakeAgent(node_name=node_id)
    if node_id == "local":
        fake.download_features = ["downloads.hf-native", "downloads.ollama"]
    return fake


@pytest.fixture
async def master(tmp_path: Path) -> AsyncIterator[Master]:
    async with running_master(tmp_path, "local", "gpu-1", agent=agent) as master:
        yield master


def audit_text(master: Master) -> str:
    return "".join(p.read_text() for p in (master.services.settings.data_dir / "audit").glob("*"))


async def test_a_download_starts_lists_shows_cancels_and_is_removed(master: Master) -> None:
    started = await master.admin.post("/api/nodes/local/downloads", json=HF)
    job = started.json()
    listed = await master.admin.get("/api/nodes/local/downloads")
    one = await master.admin.get(f"/api/nodes/local/downloads/{job['id']}")
    cancelled = await master.admin.delete(f"/api/nodes/local/downloads/{job['id']}")
    removed = await master.admin.delete(f"/api/nodes/local/downloads/{job['id']}?remove=true")
    after = await master.admin.get("/api/nodes/local/downloads")

    assert started.status_code == 202
    assert (job["kind"], job["source"], job["folder"], job["state"]) == (
        "huggingface",
        "Qwen/Qwen3-0.6B-GGUF@main",
        "qwen3",
        "running",
    )
    assert master.local.bodies[-1]["token"] == TOKEN  # forwarded to the agent ...
    assert [d["id"] for d in listed.json()["downloads"]] == [job["id"]]
    assert one.json()["totalBytes"] == 1000
    assert (cancelled.status_code, cancelled.json()["state"]) == (200, "cancelled")
    assert removed.status_code == 204
    assert after.json().get("downloads", []) == []
    audit = audit_text(master)
    assert "download.start" in audit
    assert "download.cancel" in audit
    assert "download.remove" in audit
    for answer in (started, listed, one, cancelled):
        assert TOKEN not in answer.text  # ... and never returned
    assert TOKEN not in audit


async def test_a_node_without_the_feature_is_refused_before_the_agent_is_asked(master: Master) -> None:
    answer = await master.admin.post("/api/nodes/gpu-1/downloads", json=OLLAMA)
    error = answer.json()["error"]

    assert answer.status_code == 409
    assert (error["code"], error["nodeId"], error["field"]) == ("feature_missing", "gpu-1", "kind")
    assert "downloads.ollama" in error["message"]
    assert ("POST", "/agent/v1/downloads") not in master.agents.agents["gpu-1"].requests


async def test_an_unknown_node_is_a_404(master: Master) -> None:
    answer = await master.admin.post("/api/nodes/nowhere/downloads", json=OLLAMA)

    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "node_not_found"
    assert answer.json()["error"]["nodeId"] == "nowhere"


@pytest.mark.parametrize(
    ("code", "field", "status"),
    [
        (AgentErrorCode.SOURCE_NOT_FOUND, "revision", 404),
        (AgentErrorCode.SOURCE_NEEDS_TOKEN, "token", 403),
        (AgentErrorCode.INSUFFICIENT_SPACE, "root", 409),
        (AgentErrorCode.DOWNLOAD_CONFLICT, "folder", 409),
        (AgentErrorCode.INVALID_REQUEST, "allowPatterns", 400),
    ],
)
async def test_an_agent_refusal_keeps_its_code_and_field(
    master: Master, code: AgentErrorCode, field: str, status: int
) -> None:
    master.local.refusals["download_start"] = Refusal(code.http_status, code, "the node says no", field=field)

    answer = await master.admin.post("/api/nodes/local/downloads", json=HF)
    error = answer.json()["error"]

    assert answer.status_code == status
    assert (error["code"], error["field"], error["nodeId"]) == (code.value, field, "local")
    assert "the node says no" in error["message"]


async def test_a_node_whose_disk_is_full_is_a_507_in_the_admin_shape(master: Master) -> None:
    """The agent cannot write the job's record (its disk is full): 507, not a 502 ``node_refused``."""
    full = Refusal(507, AgentErrorCode.INSUFFICIENT_STORAGE, "downloads.json: no space left on device")
    master.local.refusals["download_start"] = full

    answer = await master.admin.post("/api/nodes/local/downloads", json=HF)
    error = answer.json()["error"]
    documented = (await master.admin.get("/openapi.json")).json()["paths"]["/api/nodes/{node_id}/downloads"]

    assert answer.status_code == 507
    assert (error["code"], error["nodeId"]) == ("insufficient_storage", "local")
    assert "no space left" in error["message"]
    assert "507" in documented["post"]["responses"]


async def test_a_folder_taken_on_the_node_is_a_conflict(master: Master) -> None:
    assert (await master.admin.post("/api/nodes/local/downloads", json=OLLAMA)).status_code == 202

    again = await master.admin.post("/api/nodes/local/downloads", json=OLLAMA)

    assert again.status_code == 409
    assert (again.json()["error"]["code"], again.json()["error"]["field"]) == ("download_conflict", "folder")


async def test_an_unknown_download_is_a_404(master: Master) -> None:
    answer = await master.admin.get("/api/nodes/local/downloads/dl-00000000ffff")

    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "download_not_found"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": "qwen3", "folder": "q"}, "kind"),
        ({"kind": "torrent", "folder": "q"}, "kind"),
        (OLLAMA | {"folder": "../outside"}, "folder"),
        (OLLAMA | {"folder": "a/b"}, "folder"),
        (HF | {"repoId": "not-owner-name"}, "repoId"),
        (OLLAMA | {"colour": "blue"}, "colour"),
    ],
)
async def test_bad_input_is_a_400_naming_the_field(master: Master, body: dict[str, Any], field: str) -> None:
    answer = await master.admin.post("/api/nodes/local/downloads", json=body)

    assert answer.status_code == 400
    assert answer.json()["error"]["field"] == field
    assert ("POST", "/agent/v1/downloads") not in master.local.requests


async def test_starting_a_model_whose_file_is_missing_is_a_409_naming_the_path(master: Master) -> None:
    body = {"id": "qwen", "servedName": "Qwen3", "modelPath": "qwen/model.gguf", "memoryBudgetGiB": 4}
    assert (await master.admin.post("/api/models", json=body)).status_code == 201
    # What the real agent answers: mirbad_runtime's refusal of a path that leads to nothing.
    refused = ModelPathRejectedError("qwen/model.gguf", "no such file under the node's model roots")
    master.local.refusals["start"] = Refusal(422, AgentErrorCode.SPEC_REJECTED, str(refused))

    answer = await master.admin.post("/api/models/qwen/start")
    error = answer.json()["error"]

    assert answer.status_code == 409
    assert (error["code"], error["field"]) == ("model_files_missing", "modelPath")
    assert "qwen/model.gguf" in error["message"]


# ------------------------------------------------------------------ issue 31 items 10 and 12


async def test_a_stopped_download_is_retried_and_the_retry_audited(master: Master) -> None:
    job_id = (await master.admin.post("/api/nodes/local/downloads", json=OLLAMA)).json()["id"]
    running = await master.admin.post(f"/api/nodes/local/downloads/{job_id}/retry")
    await master.admin.delete(f"/api/nodes/local/downloads/{job_id}")
    retried = await master.admin.post(f"/api/nodes/local/downloads/{job_id}/retry")

    assert running.status_code == 409
    assert (running.json()["error"]["code"], running.json()["error"]["field"]) == (
        "download_conflict",
        "state",
    )
    assert (retried.status_code, retried.json()["id"], retried.json()["state"]) == (200, job_id, "queued")
    assert master.local.downloads[job_id].state == "queued"
    assert "download.retry" in audit_text(master)


@pytest.mark.parametrize(
    ("download_id", "status"),
    [("dl-000000000001%0A", 400), ("%2e%2e", 400), ("nope", 400), ("..%2f..%2fetc", 404)],
)
async def test_a_hostile_download_id_is_refused_before_it_reaches_the_node(
    master: Master, download_id: str, status: int
) -> None:
    await master.admin.post("/api/nodes/local/downloads", json=OLLAMA)
    for answer in (
        await master.admin.get(f"/api/nodes/local/downloads/{download_id}"),
        await master.admin.delete(f"/api/nodes/local/downloads/{download_id}"),
        await master.admin.post(f"/api/nodes/local/downloads/{download_id}/retry"),
    ):
        assert answer.status_code == status, answer.text
        if status == 400:  # an encoded slash splits the path: no route, which is a 404 of its own
            assert answer.json()["error"]["field"] == "downloadId"
    assert not [path for _method, path in master.local.requests if path.startswith("/agent/v1/downloads/")]


async def test_a_queued_job_carries_every_documented_field(master: Master) -> None:
    job_id = (await master.admin.post("/api/nodes/local/downloads", json=OLLAMA)).json()["id"]
    master.local.downloads[job_id] = master.local.downloads[job_id].model_copy(update={"state": "queued"})

    one = (await master.admin.get(f"/api/nodes/local/downloads/{job_id}")).json()
    listed = (await master.admin.get("/api/nodes/local/downloads")).json()["downloads"][0]

    for job in (one, listed):
        assert (job["state"], job["doneBytes"], job["root"]) == ("queued", 0, 0)
        assert {"revision", "error", "bytesPerSecond", "etaSeconds", "files", "totalBytes"} <= set(job)


async def test_a_refused_start_is_audited(master: Master) -> None:
    refused = await master.admin.post("/api/nodes/gpu-1/downloads", json=OLLAMA)
    master.local.refusals["download_start"] = Refusal(
        409, AgentErrorCode.INSUFFICIENT_SPACE, "no room", field="root"
    )
    no_room = await master.admin.post("/api/nodes/local/downloads", json=OLLAMA)

    assert (refused.status_code, no_room.status_code) == (409, 409)
    lines = [line for line in audit_text(master).splitlines() if "download.start" in line]
    assert len(lines) == 2
    assert all('"refused"' in line for line in lines)
    assert any("gpu-1" in line for line in lines)
    assert any("no room" in line for line in lines)
