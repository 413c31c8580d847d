"""The restore room: a preview and a restore through ``/api`` and through the portal's path read the same.

The portal's path is the room's actions called with the portal's actor, as the Backup & restore page
will call them; see ``tests.master._rooms``. The node is a fake agent that has one model's folder,
offers Hugging Face downloads and never finishes one, so a restore is caught downloading and cancelled.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.master._rooms import AuditLine, api_refusal, audit_lines, ok, portal_refusal
from tests.master._stack import Master, running_master
from tests.orchestration._fake_agent import FakeAgent
from tests.orchestration._fake_agent import Refusal as AgentRefusal

from mirbad_master._api_errors import Refusal
from mirbad_master.restore import actions
from mirbad_master.restore._upload import BackupUpload
from mirbad_master.restore.panels import model_line, preview_line
from mirbad_master.ui._refusals import PORTAL_ACTOR
from mirbad_orchestration.backups import BackupContents, BackupSecrets, MasterIdentity, encode_backup
from mirbad_protocol import ModelDefinition, ModelSource, Placement
from mirbad_protocol.admin import ApiKeyRecord
from mirbad_protocol.agent import AgentErrorCode
from mirbad_protocol.restore import (
    BACKUP_PASSPHRASE_HEADER,
    MAX_BACKUP_BYTES,
    ModelPreview,
    RestoreJobView,
    RestoreModelProgress,
)

pytestmark = pytest.mark.anyio

PASSPHRASE = "correct horse battery"
KEY = ApiKeyRecord(
    id="k1aaaaaa",
    name="notebook",
    prefix="mb_k1aa",
    secret_sha256="a" * 64,
    created_at=datetime(2026, 1, 2, tzinfo=UTC),
)


def _model(model_id: str) -> ModelDefinition:
    return ModelDefinition(
        id=model_id,
        served_name=f"{model_id}-chat",
        model_path=model_id,
        sources=[ModelSource(repo_id=f"acme/{model_id}", folder=model_id)],
    )


RAW = encode_backup(
    BackupContents(
        master=MasterIdentity(instance_id="m-7f3a", epoch=1),
        models=[_model("kept"), _model("qwen")],
        secrets=BackupSecrets(api_keys=[KEY]),
    ),
    host="master-box",
    created_at=datetime(2026, 12, 6, 5, 17, 30, tzinfo=UTC),
    passphrase=PASSPHRASE,
)


def agent_with_folders(node_id: str) -> FakeAgent:
    """A node that has the folder of model `kept` and offers Hugging Face downloads."""
    return FakeAgent(node_name=node_id, present_files={"kept"}, download_features=["downloads.hf-native"])


@asynccontextmanager
async def _master(tmp_path: Path) -> AsyncIterator[Master]:
    async with running_master(tmp_path, agent=agent_with_folders) as master:
        yield master


async def _downloading(master: Master) -> None:
    with anyio.fail_after(10):
        while not master.agents.agents["local"].downloads:  # noqa: ASYNC110 - the fake agent signals nothing
            await anyio.sleep(0.02)


def _masked(lines: list[AuditLine]) -> list[AuditLine]:
    # A restore job's id is random: the two masters share only its place in the log.
    return [(a, action, "<job>" if t.startswith("restore-") else t, n, o) for a, action, t, n, o in lines]


async def test_a_restore_through_the_api_and_the_portal_leaves_the_same_audit_lines(tmp_path: Path) -> None:
    headers = {BACKUP_PASSPHRASE_HEADER: PASSPHRASE}
    async with _master(tmp_path / "api") as master:
        api = master.admin
        preview = await ok(api.post("/api/restore/preview", content=RAW, headers=headers))
        started = (await api.post("/api/restore", content=RAW, headers=headers)).json()
        again = await api.post("/api/restore", content=RAW, headers=headers)
        await _downloading(master)
        cancelled = await ok(api.delete("/api/restore"))
        shown = await ok(api.get("/api/restore"))
        through_the_api = _masked(await audit_lines(master))
        api_downloads = list(master.agents.agents["local"].downloads.values())

    async with _master(tmp_path / "portal") as master:
        services = master.services
        upload = BackupUpload(RAW, PASSPHRASE)
        portal_preview = await actions.preview_backup(services, upload)
        await actions.restore_backup(services, upload, PORTAL_ACTOR)
        portal_again = await portal_refusal(lambda: actions.restore_backup(services, upload, PORTAL_ACTOR))
        await _downloading(master)
        portal_cancelled = await actions.cancel_restore(services, PORTAL_ACTOR)
        through_the_portal = _masked(await audit_lines(master))
        keys = [key.id for key in await services.keys.list()]

    assert through_the_portal == through_the_api
    assert [line[1:] for line in through_the_api] == [
        ("restore.start", "<job>", None, "ok"),
        ("restore.start", "restore", None, "refused"),
        ("download.start", "dl-000000000001", "local", "ok"),
        ("download.cancel", "dl-000000000001", "local", "ok"),
        ("restore.cancel", "<job>", None, "ok"),
    ]
    assert portal_preview.model_dump(mode="json", by_alias=True) == preview
    assert preview["newApiKeys"] == [{"id": "k1aaaaaa", "name": "notebook", "prefix": "mb_k1aa"}]
    by_id = {model["id"]: model for model in preview["models"]}
    assert (by_id["kept"]["foldersPresent"], by_id["qwen"]["foldersPresent"]) == (True, False)
    assert any("download sizes are unknown" in note for note in preview["notes"])
    assert started["state"] == "running"
    assert api_refusal(again)._replace(message="") == portal_again._replace(message="")  # ids differ
    assert again.json()["error"]["jobId"] == started["id"]
    assert portal_again.status == 409
    assert portal_again.code == "job_conflict"
    assert (cancelled["state"], shown["state"], portal_cancelled.state) == ("cancelled",) * 3
    assert shown["keysAdded"] == ["k1aaaaaa"]
    assert keys == ["k1aaaaaa"]  # the old key is back
    assert [job.state for job in api_downloads] == ["cancelled"]


async def _refusals_of(master: Master, body: Any, **options: Any) -> Refusal:
    return api_refusal(await master.admin.post("/api/restore/preview", content=body, **options))


async def test_bad_uploads_are_refused_alike_naming_why(tmp_path: Path) -> None:
    async with _master(tmp_path / "api") as master:
        not_json = await _refusals_of(master, b"not a backup")
        version = await _refusals_of(master, b'{"schemaVersion": 7}')
        wrong = await _refusals_of(master, RAW, headers={BACKUP_PASSPHRASE_HEADER: "a wrong passphrase"})
        too_large = await _refusals_of(master, b" " * (MAX_BACKUP_BYTES + 1))
        multipart = api_refusal(
            await master.admin.post(
                "/api/restore", files={"file": ("backup.json", b"[]")}, data={"passphrase": PASSPHRASE}
            )
        )
        no_job = api_refusal(await master.admin.delete("/api/restore"))
    async with _master(tmp_path / "portal") as master:
        services = master.services
        portal_wrong = await portal_refusal(
            lambda: actions.preview_backup(services, BackupUpload(RAW, "a wrong passphrase"))
        )
        portal_version = await portal_refusal(
            lambda: actions.preview_backup(services, BackupUpload(b'{"schemaVersion": 7}'))
        )
    assert (not_json.status, not_json.code, not_json.field) == (422, "invalid_backup", "(document)")
    assert (version.status, version.field) == (422, "schemaVersion")
    assert (wrong.status, wrong.code, wrong.field) == (422, "invalid_backup", "passphrase")
    assert (too_large.status, too_large.field) == (422, "(document)")
    assert "over 64 MiB" in too_large.message
    assert (multipart.status, multipart.field) == (422, "(document)")
    assert "not list" in multipart.message
    assert (no_job.status, no_job.code) == (404, "job_not_found")
    assert portal_wrong == wrong
    assert portal_version == version


async def test_a_multipart_upload_previews_like_the_json_body(tmp_path: Path) -> None:
    async with _master(tmp_path) as master:
        uploaded = await ok(
            master.admin.post(
                "/api/restore/preview", files={"file": ("backup.json", RAW)}, data={"passphrase": PASSPHRASE}
            )
        )
        posted = await ok(
            master.admin.post(
                "/api/restore/preview", content=RAW, headers={BACKUP_PASSPHRASE_HEADER: PASSPHRASE}
            )
        )
        without = await ok(master.admin.post("/api/restore/preview", content=RAW))
        extra = api_refusal(
            await master.admin.post(
                "/api/restore/preview", files={"file": ("b.json", RAW)}, data={"other": "x"}
            )
        )
    assert uploaded == posted
    assert without["apiKeysIncluded"] is False
    assert any("no passphrase" in note for note in without["notes"])
    assert (extra.status, extra.field) == (422, "other")


def test_the_job_view_reads_back_from_the_wire() -> None:
    view = RestoreJobView(id="restore-1", schema_version=2, started_at=datetime(2026, 1, 1, tzinfo=UTC))
    assert RestoreJobView.from_wire(view.to_wire()) == view


async def test_a_version_1_backup_previews_its_models_on_the_default_node(tmp_path: Path) -> None:
    v1 = (
        b'{"schemaVersion": 1, "createdAt": "2025-05-01T00:00:00Z", '
        b'"models": [{"id": "kept", "servedName": "kept-chat", "modelPath": "kept"}]}'
    )
    async with _master(tmp_path) as master:
        first = await ok(master.admin.post("/api/restore/preview", content=v1))
        await master.services.models.upsert(
            ModelDefinition(
                id="kept", served_name="kept-chat", model_path="kept", placement=Placement(node_id="local")
            )
        )
        second = await ok(master.admin.post("/api/restore/preview", content=v1))
    assert [(m["id"], m["change"], m["foldersPresent"]) for m in first["models"]] == [("kept", "new", True)]
    assert second["models"][0]["change"] == "identical"  # placed on the default node, as a restore stores it
    assert "the backup has no encrypted section: it restores no API keys" in first["notes"]


def test_a_models_progress_in_words() -> None:
    downloading = RestoreModelProgress(
        model_id="qwen", node_id="gpu-1", step="downloading", folder="qwen", done_bytes=40, total_bytes=100
    )
    refused = RestoreModelProgress(
        model_id="big", node_id="gpu-1", step="left-stopped", message="8 GiB do not fit"
    )
    assert model_line(downloading) == "qwen on gpu-1: downloading qwen (40 of 100 bytes)"
    assert model_line(refused) == "big on gpu-1: left stopped: 8 GiB do not fit"


QWEN_BYTES = 123_456_789


def agent_with_sizes(node_id: str) -> FakeAgent:
    """As :func:`agent_with_folders`, and it tells the hub's size of ``acme/qwen``."""
    agent = agent_with_folders(node_id)
    agent.download_sizes = {"acme/qwen@main": QWEN_BYTES}
    return agent


async def test_the_preview_shows_the_size_the_node_reads_from_the_hub(tmp_path: Path) -> None:
    # Issue 25 item 4: through /api and through the portal's path alike; a hub that lies or does not
    # answer in time (the agent's 502) leaves the size unknown and says why.
    headers = {BACKUP_PASSPHRASE_HEADER: PASSPHRASE}
    async with running_master(tmp_path, agent=agent_with_sizes) as master:
        preview = await ok(master.admin.post("/api/restore/preview", content=RAW, headers=headers))
        portal = await actions.preview_backup(master.services, BackupUpload(RAW, PASSPHRASE))
        asked = [body for body in master.local.bodies if isinstance(body, dict) and "repoId" in body]
        master.local.refusals["download_size"] = AgentRefusal(
            502, AgentErrorCode.UPSTREAM_UNREACHABLE, "the hub did not answer acme/qwen@main within 60 s"
        )
        lying = await ok(master.admin.post("/api/restore/preview", content=RAW, headers=headers))
        downloads = master.local.downloads
    by_id = {model["id"]: model for model in preview["models"]}
    assert (by_id["kept"]["downloadBytes"], by_id["qwen"]["downloadBytes"]) == (None, QWEN_BYTES)
    assert not [note for note in preview["notes"] if "download size" in note]
    assert portal.model_dump(mode="json", by_alias=True) == preview
    assert portal.download_bytes == QWEN_BYTES
    assert [preview_line(model) for model in portal.models] == [
        "kept (kept-chat): new; folders present",
        "qwen (qwen-chat): new; folders missing, 123,456,789 bytes to download",
    ]
    assert asked == [{"kind": "huggingface", "repoId": "acme/qwen", "folder": "qwen"}] * 2  # only the missing
    assert downloads == {}  # a preview starts nothing
    assert [model["downloadBytes"] for model in lying["models"]] == [None, None]
    [note] = [note for note in lying["notes"] if "download size" in note]
    assert note.startswith("download sizes are unknown for model 'qwen': node 'local' could not tell")
    assert "did not answer acme/qwen@main within 60 s" in note


def test_a_preview_line_says_when_the_size_is_unknown() -> None:
    missing = ModelPreview(id="qwen", served_name="q", change="changed", folders_present=False)
    manual = missing.model_copy(update={"needs_manual_steps": True})
    silent = missing.model_copy(update={"folders_present": None})
    assert preview_line(missing) == "qwen (q): changed; folders missing, download size unknown"
    assert preview_line(manual) == "qwen (q): changed; folders missing, no source: needs manual steps"
    assert preview_line(silent) == "qwen (q): changed; its node did not say whether its folders are there"


def test_a_previewed_model_in_words() -> None:
    changed = ModelPreview(
        id="qwen",
        served_name="Qwen3",
        change="changed",
        changed_fields=["maxModelLen", "tags"],
        folders_present=True,
    )
    missing = ModelPreview(
        id="big", served_name="big", change="new", folders_present=False, download_bytes=4096
    )
    manual = ModelPreview(id="own", served_name="own", change="identical", needs_manual_steps=True)
    assert preview_line(changed) == "qwen (Qwen3): changed (maxModelLen, tags); folders present"
    assert preview_line(missing) == "big (big): new; folders missing, 4,096 bytes to download"
    assert preview_line(manual) == "own (own): identical; folders missing, no source: needs manual steps"
