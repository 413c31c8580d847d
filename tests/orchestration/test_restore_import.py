"""The restore's import steps over the real stores: models upserted, keys merged, host services merged."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.orchestration._backups import CREATED_AT, PASSPHRASE, contents, model

from mirbad_orchestration.backups import (
    BackupDocumentV1,
    backup_host_services,
    backup_models,
    encode_backup,
    import_host_services,
    import_keys,
    import_models,
    parse_backup,
)
from mirbad_orchestration.keys import ApiKeyStore
from mirbad_orchestration.registry import SEED_MODEL, ModelRegistry
from mirbad_orchestration.services import HostServicesDocument, HostServicesStore, WhitelistedContainer
from mirbad_protocol import Placement
from mirbad_protocol.admin import ApiKeyCreate
from mirbad_protocol.agent import RestartPolicy

pytestmark = pytest.mark.anyio

BACKUP = parse_backup(
    encode_backup(contents(), host="master-box", created_at=CREATED_AT, passphrase=PASSPHRASE)
)


def _v1() -> BackupDocumentV1:
    return BackupDocumentV1(schema_version=1, created_at=CREATED_AT, models=[model("qwen", placement=None)])


async def test_models_are_upserted_and_reported(tmp_path: Path) -> None:
    registry = ModelRegistry(tmp_path)
    await registry.upsert(model("qwen", max_num_seqs=32))
    await registry.upsert(model("tiny", sources=[]))
    outcome = await import_models(registry, backup_models(BACKUP.document))
    assert outcome.added == ()
    assert outcome.changed == ("qwen",)
    assert outcome.unchanged == ("tiny",)
    stored = {m.id: m for m in await registry.list()}
    assert stored["qwen"].max_num_seqs == model("qwen").max_num_seqs
    assert SEED_MODEL.id in stored  # a model only this master has stays


async def test_a_fresh_registry_gets_the_backups_models_with_their_placements(tmp_path: Path) -> None:
    registry = ModelRegistry(tmp_path)
    outcome = await import_models(registry, backup_models(BACKUP.document))
    assert outcome.added == ("qwen", "tiny")
    stored = {m.id: m for m in await registry.list()}
    assert stored["qwen"].placement == Placement(node_id="gpu-1")
    assert stored["tiny"] == (await ModelRegistry(tmp_path).get("tiny"))  # it reached the file


async def test_a_version_1_backups_models_go_to_the_bootstrap_node(tmp_path: Path) -> None:
    assert [m.placement for m in backup_models(_v1())] == [Placement(node_id="local")]
    placed = backup_models(_v1(), bootstrap_node_id="box-2")
    outcome = await import_models(ModelRegistry(tmp_path), placed)
    assert outcome.added == ("qwen",)
    assert (await ModelRegistry(tmp_path).get("qwen")).placement == Placement(node_id="box-2")


async def test_a_refused_model_is_named_and_the_others_are_imported(tmp_path: Path) -> None:
    registry = ModelRegistry(tmp_path)
    await registry.upsert(model("other", served_name="qwen-chat"))  # takes the backup's served name
    outcome = await import_models(registry, backup_models(BACKUP.document))
    assert outcome.added == ("tiny",)
    assert list(outcome.refused) == ["qwen"]
    assert "servedName" in outcome.refused["qwen"]


async def test_restored_keys_authenticate_again(tmp_path: Path) -> None:
    async with ApiKeyStore(tmp_path / "before") as before:
        created = await before.create(ApiKeyCreate(name="notebook"))
        records = await before.export_records()
    async with ApiKeyStore(tmp_path / "after") as after:
        assert await after.find_by_secret(created.secret) is None
        outcome = await import_keys(after, records)
        assert outcome.added == (created.id,)
        found = await after.find_by_secret(created.secret)
        assert found is not None
        assert found.id == created.id
        assert await after.keys_required()
        again = await import_keys(after, records)
        assert again.added == ()
        assert again.unchanged == (created.id,)


async def test_a_key_clashing_by_hash_is_skipped(tmp_path: Path) -> None:
    async with ApiKeyStore(tmp_path / "before") as before:
        await before.create(ApiKeyCreate(name="notebook"))
        records = await before.export_records()
    clash = records[0].model_copy(update={"id": "someone-else"})
    async with ApiKeyStore(tmp_path / "after") as after:
        await import_keys(after, records)
        outcome = await import_keys(after, [clash])
        assert outcome.conflicts == ("someone-else",)
        assert [key.id for key in await after.list()] == [records[0].id]


async def test_host_services_are_merged_with_the_backups_winning(tmp_path: Path) -> None:
    store = HostServicesStore(tmp_path)
    local = WhitelistedContainer(node="local", name="grafana")
    stale = WhitelistedContainer(node="gpu-1", name="open-webui", display_name="old name")
    await store.update(
        lambda _: HostServicesDocument(
            containers=[local, stale], restart_policies={"local/grafana": RestartPolicy(name="always")}
        )
    )
    services = backup_host_services(BACKUP.document).model_copy(
        update={"restart_policies": {"gpu-1/open-webui": RestartPolicy(name="unless-stopped")}}
    )
    outcome = await import_host_services(store, services)
    assert outcome.containers == ("gpu-1/open-webui",)
    assert outcome.restart_policies == ("gpu-1/open-webui",)
    document = await HostServicesStore(tmp_path).read()
    assert [(c.node, c.name, c.container_id) for c in document.containers] == [
        ("local", "grafana", ""),
        ("gpu-1", "open-webui", "c0ffee"),
    ]
    assert set(document.restart_policies) == {"local/grafana", "gpu-1/open-webui"}
    assert (await import_host_services(store, services)).containers == ()  # nothing left to change


async def test_a_version_1_backups_host_services_are_the_machines(tmp_path: Path) -> None:
    v1 = _v1().model_copy(
        update={
            "host_services": HostServicesDocument(containers=[WhitelistedContainer(node="local", name="x")])
        }
    )
    assert backup_host_services(v1) is v1.host_services
    outcome = await import_host_services(HostServicesStore(tmp_path), backup_host_services(v1))
    assert outcome.containers == ("local/x",)
