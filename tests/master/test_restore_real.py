"""A restore round trip on the real stack: ``mirbad up`` (master and its real agent), a loopback hub.

A fleet of one gets an API key and a llama.cpp model whose folder comes from the hub (not downloaded);
it is backed up with a passphrase (the document built with the backups library from the master's own
stores), stopped, and its registry, keys and host services are wiped from the data directory. After
a restart one restore brings them back identical: the model (placement included), the key (its old
secret authenticates on ``/v1`` again), the host services; the model's missing folder is downloaded
from the loopback hub through the node's agent and the model is started on the real llama-server.
The hub runs in the test's event loop, so every blocking call to ``mirbad up`` goes through a worker
thread.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from tests._support.mirbad_up import WAIT_S, Up, mirbad_up, port_block
from tests._support.model_hub import REPO, Lies, loopback_sources, refused_endpoint
from tests._support.real_parts import llama_server_path
from tests._support.tiny_gguf import TINY, write_tiny_gguf

from mirbad_orchestration.backups import (
    BackupContents,
    BackupSecrets,
    HostServicesBackup,
    MasterIdentity,
    encode_backup,
)
from mirbad_orchestration.keys import API_KEY_USAGE_FILE, API_KEYS_FILE, ApiKeyStore
from mirbad_orchestration.registry import REGISTRY_FILE_NAME
from mirbad_orchestration.services import HOST_SERVICES_FILE_NAME, HostServicesDocument, WhitelistedContainer
from mirbad_protocol import ModelDefinition
from mirbad_protocol.restore import BACKUP_PASSPHRASE_HEADER

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.llamacpp,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="runs mirbad up's process tree"),
    pytest.mark.timeout(400),
]

PASSPHRASE = "correct horse battery"
FOLDER = "hub-tiny"
SERVICES = HostServicesDocument(containers=[WhitelistedContainer(node="local", name="open-webui")])


async def _admin(up: Up, password: str) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {password}"}
    return httpx.AsyncClient(base_url=up.base_url, headers=headers, timeout=WAIT_S, trust_env=False)


async def _until(read: Any, done: Any) -> Any:
    with anyio.fail_after(WAIT_S * 2):
        while True:
            value = await read()
            if done(value):
                return value
            await anyio.sleep(0.2)


async def _fleet(admin: httpx.AsyncClient) -> tuple[ModelDefinition, str]:
    """The fleet before the backup: a key, and a model whose folder the hub has (not downloaded)."""
    [node] = (await admin.get("/api/nodes")).json()
    [executable] = next(r for r in node["info"]["runtimes"] if r["runtime"] == "llamacpp")["executables"]
    model = {
        "id": "hubbed",
        "servedName": "hubbed-chat",
        "runtime": "llamacpp",
        "executable": executable,
        "modelPath": f"{FOLDER}/weights/tiny.gguf",
        "sources": [{"repoId": REPO, "folder": FOLDER}],
        "placement": {"nodeId": "local"},
        "autoStart": True,
        "maxModelLen": TINY.context,
        "maxNumSeqs": 1,
        "memoryBudgetGiB": 0.25,
        "extraArgs": ["--threads", "1"],
    }
    created = await admin.post("/api/models", json=model)
    assert created.status_code == 201, created.text
    key = await admin.post("/api/keys", json={"name": "notebook"})
    assert key.status_code == 201, key.text
    definition = ModelDefinition.model_validate((await admin.get("/api/models/hubbed")).json()["definition"])
    return definition, key.json()["secret"]


async def _backup(data_dir: Path, definition: ModelDefinition) -> bytes:
    # Read-only uses of the running master's stores: what the backups room composes for a backup.
    async with ApiKeyStore(data_dir) as keys:
        records = await keys.export_records()
    contents = BackupContents(
        master=MasterIdentity(instance_id="m-restore-test", epoch=1),
        models=[definition],
        host_services=HostServicesBackup(master=SERVICES),
        secrets=BackupSecrets(api_keys=records),
    )
    return encode_backup(contents, host="master-box", created_at=datetime.now(UTC), passphrase=PASSPHRASE)


def _wipe(data_dir: Path) -> None:
    for name in (REGISTRY_FILE_NAME, API_KEYS_FILE, API_KEY_USAGE_FILE, HOST_SERVICES_FILE_NAME):
        (data_dir / name).unlink(missing_ok=True)


async def _chat(admin: httpx.AsyncClient, secret: str) -> httpx.Response:
    body = {"model": "hubbed-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    return await admin.post("/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {secret}"})


async def test_a_wiped_master_is_restored_and_the_missing_model_is_downloaded_and_started(
    tmp_path: Path,
) -> None:
    server = llama_server_path()
    assert server is not None
    gguf = write_tiny_gguf(tmp_path / "source" / "tiny.gguf").read_bytes()
    first = port_block()
    async with loopback_sources(gguf) as sources:
        agent_config = {
            "graceful_shutdown_s": 2,
            "downloads": {"hf_endpoint": sources.hub_url, "ollama_registry": refused_endpoint()},
            "docker": {"enabled": False},
            "process": {"port_range_start": first, "port_range_end": first + 19, "stop_timeout_s": 5},
        }
        with mirbad_up(tmp_path, agent_config, llama_server=server) as up:
            password = up.first_run_password(await anyio.to_thread.run_sync(up.start))
            async with await _admin(up, password) as admin:
                definition, secret = await _fleet(admin)
                keys_before = (await admin.get("/api/keys")).json()
            raw = await _backup(up.data_dir, definition)
            assert await anyio.to_thread.run_sync(up.interrupt) == 0
            _wipe(up.data_dir)

            await anyio.to_thread.run_sync(up.start)
            async with await _admin(up, password) as admin:
                wiped = await admin.get("/api/models/hubbed")
                # The preview's size is the hub's, read by the real agent; a lying hub leaves it unknown.
                passphrase = {BACKUP_PASSPHRASE_HEADER: PASSPHRASE}
                previewed = await admin.post("/api/restore/preview", content=raw, headers=passphrase)
                sources.hub.lies = Lies(status=503)
                lied_to = await admin.post("/api/restore/preview", content=raw, headers=passphrase)
                sources.hub.lies = Lies()
                started = await admin.post(
                    "/api/restore", content=raw, headers={BACKUP_PASSPHRASE_HEADER: PASSPHRASE}
                )

                async def job() -> dict[str, Any]:
                    answer: dict[str, Any] = (await admin.get("/api/restore")).json()
                    return answer

                ended = await _until(job, lambda view: view["state"] != "running")
                view = (await admin.get("/api/models/hubbed")).json()

                async def state() -> str:
                    status: str = (await admin.get("/api/models/hubbed")).json()["status"]["state"]
                    return status

                await _until(state, lambda value: value in ("Ready", "Failed"))
                keys_after = (await admin.get("/api/keys")).json()
                chat = await _chat(admin, secret)
                stranger = await _chat(admin, "mb-not-a-key")
            services = HostServicesDocument.from_wire_json(
                (up.data_dir / HOST_SERVICES_FILE_NAME).read_bytes()
            )
            downloaded = up.data_dir / "models" / FOLDER / "weights" / "tiny.gguf"
            on_disk = downloaded.read_bytes() if downloaded.exists() else b""

    assert wiped.status_code == 404, wiped.text  # the registry really was wiped
    hub_bytes = sum(len(data) for data in sources.hub.repos[REPO].files.values())
    [sized] = previewed.json()["models"]
    assert (sized["foldersPresent"], sized["downloadBytes"]) == (False, hub_bytes), previewed.text
    assert not [note for note in previewed.json()["notes"] if "download size" in note]
    [unsized] = lied_to.json()["models"]
    assert unsized["downloadBytes"] is None
    assert any(
        "download sizes are unknown for model 'hubbed'" in n and "503" in n for n in lied_to.json()["notes"]
    )
    assert started.status_code == 202, started.text
    assert (ended["state"], ended["error"]) == ("succeeded", None), ended
    assert ended["modelsAdded"] == ["hubbed"]
    [progress] = ended["models"]
    assert (progress["step"], progress["missingFolders"], progress["nodeId"]) == (
        "started",
        [FOLDER],
        "local",
    )
    assert progress["doneBytes"] == progress["totalBytes"] == hub_bytes  # as the preview said
    assert ModelDefinition.model_validate(view["definition"]) == definition  # placement included
    assert [(k["id"], k["prefix"]) for k in keys_after] == [(k["id"], k["prefix"]) for k in keys_before]
    assert services == SERVICES
    assert on_disk == gguf
    assert chat.status_code == 200, chat.text  # the old key authenticates, the model serves
    assert stranger.status_code == 401
