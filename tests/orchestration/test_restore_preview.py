"""The restore preview: new, changed and identical models, downloads, manual steps, new keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion
from tests.orchestration._backups import CREATED_AT, PASSPHRASE, contents, key, model

from mirbad_orchestration.backups import (
    encode_backup,
    open_secrets,
    parse_backup,
    preview_restore,
)
from mirbad_orchestration.keys import ApiKeyImport, ApiKeyStore
from mirbad_protocol import ModelSource
from mirbad_protocol.admin import ApiKeyRecord

RAW = encode_backup(contents(), host="master-box", created_at=CREATED_AT, passphrase=PASSPHRASE)
BACKUP = parse_backup(RAW)


def test_models_are_new_changed_or_identical() -> None:
    current = [model("qwen", max_num_seqs=32, tags=["chat"]), model("tiny", sources=[]), model("other")]
    preview = preview_restore(BACKUP.document, current_models=current)
    by_id = {entry.id: entry for entry in preview.models}
    assert [entry.id for entry in preview.models] == ["qwen", "tiny"]  # the backup's models, in order
    assert by_id["qwen"].change == "changed"
    assert by_id["qwen"].changed_fields == ["maxNumSeqs", "tags"]
    assert by_id["tiny"].change == "identical"
    assert by_id["tiny"].changed_fields == []


def test_a_model_not_here_is_new() -> None:
    preview = preview_restore(BACKUP.document, current_models=[])
    assert {entry.change for entry in preview.models} == {"new"}
    assert preview.models[0].served_name == "qwen-chat"


def test_downloads_and_manual_steps_follow_the_folders_and_sources() -> None:
    preview = preview_restore(
        BACKUP.document,
        current_models=[],
        folders_present={"qwen": False, "tiny": False},
        download_sizes={"qwen": 4_000_000_000},
    )
    qwen, tiny = preview.models
    assert qwen.folders_present is False
    assert qwen.download_bytes == 4_000_000_000
    assert not qwen.needs_manual_steps
    assert tiny.folders_present is False
    assert tiny.download_bytes is None
    assert tiny.needs_manual_steps  # no source to download it from
    assert preview.manual_models == ["tiny"]
    assert preview.download_bytes == 4_000_000_000


def test_folders_present_need_neither_download_nor_manual_steps() -> None:
    preview = preview_restore(
        BACKUP.document,
        current_models=[],
        folders_present={"qwen": True, "tiny": True},
        download_sizes={"qwen": 123},
    )
    assert [(m.download_bytes, m.needs_manual_steps) for m in preview.models] == [
        (None, False),
        (None, False),
    ]
    assert preview.download_bytes == 0


def test_a_node_that_did_not_answer_leaves_the_folders_unknown() -> None:
    preview = preview_restore(BACKUP.document, current_models=[])
    qwen, tiny = preview.models
    assert qwen.folders_present is None
    assert qwen.download_bytes is None  # size unknown
    assert not qwen.needs_manual_steps
    assert tiny.needs_manual_steps  # not known to be there, and nothing to download it from


async def _store_with(tmp_path: Path, *records: ApiKeyRecord) -> ApiKeyStore:
    store = ApiKeyStore(tmp_path)
    await store.import_records(records)
    return store


@pytest.mark.anyio
async def test_new_keys_are_what_the_key_store_would_add_without_their_hashes(tmp_path: Path) -> None:
    backup_keys = open_secrets(BACKUP, PASSPHRASE).api_keys
    # k1aaaaaa is the same key here; k2bbbbbb's hash belongs to another key here.
    async with await _store_with(tmp_path, key("k1aaaaaa", "a"), key("k9zzzzzz", "b", "clash")) as store:
        outcome = await store.import_records(backup_keys, dry_run=True)
        preview = preview_restore(
            BACKUP.document, current_models=[], backup_keys=backup_keys, key_import=outcome
        )
        assert len(await store.list()) == 2  # the dry run changed nothing
    assert preview.api_keys_included
    assert preview.new_api_keys == []
    assert preview.conflicting_api_keys == ["k2bbbbbb"]


@pytest.mark.anyio
async def test_keys_unknown_here_are_listed_by_id_name_and_prefix(tmp_path: Path) -> None:
    backup_keys = open_secrets(BACKUP, PASSPHRASE).api_keys
    async with ApiKeyStore(tmp_path) as store:
        outcome = await store.import_records(backup_keys, dry_run=True)
    preview = preview_restore(BACKUP.document, current_models=[], backup_keys=backup_keys, key_import=outcome)
    assert [(k.id, k.name, k.prefix) for k in preview.new_api_keys] == [
        ("k1aaaaaa", "notebook", "mb_k1aa"),
        ("k2bbbbbb", "ci", "mb_k2bb"),
    ]
    assert preview.conflicting_api_keys == []
    assert "a" * 64 not in json.dumps(preview.to_wire())


def test_without_the_keys_the_preview_says_so() -> None:
    preview = preview_restore(BACKUP.document, current_models=[])
    assert not preview.api_keys_included
    assert preview.new_api_keys == []


def test_a_version_1_backup_previews_too() -> None:
    v1 = {
        "schemaVersion": 1,
        "createdAt": "2025-06-01T10:00:00Z",
        "models": [
            model("legacy", placement=None, sources=[ModelSource(repo_id="a/b", folder="b")]).to_wire()
        ],
    }
    raw = json.dumps(v1, default=lambda definition: definition.to_wire())
    preview = preview_restore(parse_backup(raw).document, current_models=[])
    assert preview.schema_version == 1
    assert preview.host is None
    assert [(m.id, m.change) for m in preview.models] == [("legacy", "new")]


def test_the_preview_payload(snapshot_json: SnapshotAssertion) -> None:
    secrets = open_secrets(BACKUP, PASSPHRASE)
    preview = preview_restore(
        BACKUP.document,
        current_models=[model("qwen", max_num_seqs=32)],
        backup_keys=secrets.api_keys,
        key_import=ApiKeyImport(added=("k2bbbbbb",), unchanged=("k1aaaaaa",)),
        folders_present={"qwen": False, "tiny": True},
        download_sizes={"qwen": 4096},
    )
    assert preview.to_wire() == snapshot_json
