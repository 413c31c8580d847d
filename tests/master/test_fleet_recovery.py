"""Fleet recovery's import into a new data directory, and ``mirbad up --recover``'s refusals.

The end to end run (a master and two real agents, the second one's model never restarted) is in
``test_fleet_recovery_real.py``; here the import over the real stores and the refusals that come
before anything starts.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from mirbad_master._fleet_recovery import (
    RECOVERY_ACTOR,
    read_fleet_recovery,
    recover_fleet,
    recovery_banner,
)
from mirbad_master._local_pki import PKI_FOLDER, load_or_create_authority
from mirbad_master._model_adoption import RunningModelAdoption
from mirbad_master.cli import PASSPHRASE_ENV, main
from mirbad_master.exceptions import DataDirHoldsMasterError
from mirbad_orchestration import ApiKeyStore, ModelRegistry
from mirbad_orchestration.backups import (
    BackupContents,
    BackupSecrets,
    FleetCaBackup,
    HostServicesBackup,
    encode_backup,
)
from mirbad_orchestration.exceptions import BackupVersionError
from mirbad_orchestration.fleet import (
    MasterIdentity,
    MasterIdentityStore,
    NodeRecord,
    NodeRegistry,
    NodeState,
    StatusCache,
)
from mirbad_orchestration.services import HostServicesDocument, HostServicesStore, WhitelistedContainer
from mirbad_orchestration.stores import AuditLog
from mirbad_orchestration.supervision import RecoveryState
from mirbad_protocol import InvalidFieldError, ModelDefinition, ModelState, ModelStatus, Placement
from mirbad_protocol.admin import ApiKeyCreate
from mirbad_protocol.pki import CertificateAuthority

pytestmark = pytest.mark.anyio

PASSPHRASE = "correct horse battery"
_MIRBAD = [sys.executable, "-m", "mirbad_master.cli"]
CA = CertificateAuthority.create("Mirbad test CA")


async def _backup(tmp_path: Path, *, passphrase: str | None = PASSPHRASE) -> tuple[Path, str]:
    """A fleet's backup file, and the secret of the API key it holds."""
    async with ApiKeyStore(tmp_path / "old") as keys:
        created = await keys.create(ApiKeyCreate(name="notebook"))
        records = await keys.export_records()
    fleet = BackupContents(
        master=MasterIdentity(instance_id="m-lost", epoch=2),
        models=[
            ModelDefinition(
                id="far", served_name="far-chat", model_path="far", placement=Placement(node_id="gpu-2")
            )
        ],
        nodes=[
            NodeRecord(id="local", name="local", agent_url="https://127.0.0.1:9443", local=True),
            NodeRecord(
                id="gpu-2", name="gpu-2", agent_url="https://gpu-2.lan:9443", pin_sha256="A" * 43 + "="
            ),
        ],
        host_services=HostServicesBackup(
            master=HostServicesDocument(containers=[WhitelistedContainer(node="gpu-2", name="open-webui")])
        ),
        secrets=BackupSecrets(api_keys=records, ca=FleetCaBackup.of(CA)),
    )
    data = encode_backup(
        fleet, host="lost-box", created_at=datetime(2026, 12, 6, 5, 0, tzinfo=UTC), passphrase=passphrase
    )
    path = tmp_path / "mirbad-backup-lost-box-20261206T050000Z.json"
    path.write_bytes(data)
    return path, created.secret


async def test_a_recovery_makes_the_new_data_directory_the_lost_masters(tmp_path: Path) -> None:
    path, secret = await _backup(tmp_path)
    data_dir = tmp_path / "new"
    data_dir.mkdir()

    recovered = await recover_fleet(data_dir, read_fleet_recovery(path, PASSPHRASE), source=path.name)

    assert recovered is not None
    assert await MasterIdentityStore(data_dir).read() == MasterIdentity(instance_id="m-lost", epoch=3)
    assert load_or_create_authority(data_dir / PKI_FOLDER).pin == CA.pin
    nodes = {node.id: node for node in await NodeRegistry(data_dir).list()}
    assert sorted(nodes) == ["gpu-2", "local"]
    assert nodes["gpu-2"].pin_sha256 == "A" * 43 + "="
    # Exactly the backup's models: no example model seeded beside them.
    assert [model.id for model in await ModelRegistry(data_dir).list()] == ["far"]
    async with ApiKeyStore(data_dir) as keys:
        assert await keys.find_by_secret(secret) is not None
        assert await keys.keys_required()
    assert (await HostServicesStore(data_dir).read()).find("gpu-2", "open-webui") is not None
    assert sorted(path.name for path in data_dir.iterdir() if path.name.startswith(".")) == []
    assert "m-lost, epoch 3 (the backup's was 2)" in recovery_banner(recovered, path.name)


async def test_what_was_recovered_is_audited(tmp_path: Path) -> None:
    path, _ = await _backup(tmp_path)
    data_dir = tmp_path / "new"
    data_dir.mkdir()

    await recover_fleet(data_dir, read_fleet_recovery(path, PASSPHRASE), source=path.name)

    entries = await AuditLog(data_dir).read(datetime.now(UTC).date())
    lines = [(entry.actor, entry.action, entry.target) for entry in entries]
    assert lines[0] == (RECOVERY_ACTOR, "fleet.recover", path.name)
    assert "epoch 2 -> 3" in (entries[0].detail or "")
    assert (RECOVERY_ACTOR, "node.recover", "gpu-2") in lines
    assert (RECOVERY_ACTOR, "model.recover", "far") in lines
    assert sum(action == "key.recover" for _, action, _ in lines) == 1


async def test_a_directory_holding_another_master_is_refused_untouched(tmp_path: Path) -> None:
    path, _ = await _backup(tmp_path)
    data_dir = tmp_path / "used"
    other = load_or_create_authority(data_dir / PKI_FOLDER)
    before = sorted(p.relative_to(data_dir) for p in data_dir.rglob("*"))

    with pytest.raises(DataDirHoldsMasterError, match="already holds a master"):
        await recover_fleet(data_dir, read_fleet_recovery(path, PASSPHRASE), source=path.name)

    assert sorted(p.relative_to(data_dir) for p in data_dir.rglob("*")) == before
    assert load_or_create_authority(data_dir / PKI_FOLDER).pin == other.pin


async def test_the_recovered_master_starts_as_itself_when_asked_again(tmp_path: Path) -> None:
    path, _ = await _backup(tmp_path)
    data_dir = tmp_path / "new"
    data_dir.mkdir()
    recovery = read_fleet_recovery(path, PASSPHRASE)
    await recover_fleet(data_dir, recovery, source=path.name)
    await ModelRegistry(data_dir).delete("far")  # a change made since must survive

    again = await recover_fleet(data_dir, recovery, source=path.name)

    assert again is None
    assert await MasterIdentityStore(data_dir).read() == MasterIdentity(instance_id="m-lost", epoch=3)
    assert await ModelRegistry(data_dir).list() == []  # the model deleted since is not imported again
    assert "already holds that master" in recovery_banner(again, path.name)


async def test_a_recovery_that_stopped_half_way_is_done_again(tmp_path: Path) -> None:
    path, _ = await _backup(tmp_path)
    data_dir = tmp_path / "new"
    (data_dir / PKI_FOLDER).mkdir(parents=True)
    (data_dir / "nodes.json").write_text('{"schemaVersion": 1, "nodes": []}')
    (data_dir / ".recovery-incomplete").write_text("m-lost\n")

    recovered = await recover_fleet(data_dir, read_fleet_recovery(path, PASSPHRASE), source=path.name)

    assert recovered is not None
    assert [node.id for node in await NodeRegistry(data_dir).list()] == ["gpu-2", "local"]
    assert not (data_dir / ".recovery-incomplete").exists()


@pytest.mark.parametrize("asked_by", ["flag", "setting"])
async def test_up_refuses_a_wrong_passphrase_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], asked_by: str
) -> None:
    path, _ = await _backup(tmp_path)
    monkeypatch.setenv(PASSPHRASE_ENV, "not the passphrase")
    data_dir = tmp_path / "new"
    if asked_by == "setting":
        monkeypatch.setenv("MIRBAD_RECOVER", str(path))
    recover = ["--recover", str(path)] if asked_by == "flag" else []

    with pytest.raises(SystemExit) as exited:
        main(["up", *recover, "--data-dir", str(data_dir)])

    assert exited.value.code == 2
    assert "the passphrase is wrong" in capsys.readouterr().err
    assert not data_dir.exists()


async def test_up_refuses_a_backup_without_a_passphrase_since_it_holds_no_ca(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = await _backup(tmp_path, passphrase=None)
    monkeypatch.setenv(PASSPHRASE_ENV, PASSPHRASE)

    with pytest.raises(SystemExit) as exited:
        main(["up", "--recover", str(path), "--data-dir", str(tmp_path / "new")])

    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "cannot recover a fleet" in error
    assert "without a passphrase" in error


async def test_up_asks_for_the_passphrase_only_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = await _backup(tmp_path)
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)

    with pytest.raises(SystemExit) as exited:
        main(["up", "--recover", str(path), "--data-dir", str(tmp_path / "new")])

    assert exited.value.code == 2
    assert PASSPHRASE_ENV in capsys.readouterr().err


async def test_a_file_that_is_no_backup_is_named(tmp_path: Path) -> None:
    path = tmp_path / "notes.json"
    path.write_text(json.dumps({"hello": "world"}))

    with pytest.raises(BackupVersionError, match="schemaVersion"):
        read_fleet_recovery(path, PASSPHRASE)
    with pytest.raises(InvalidFieldError, match="--recover"):
        read_fleet_recovery(tmp_path / "missing.json", PASSPHRASE)


def _adoption(tmp_path: Path, cache: StatusCache) -> RunningModelAdoption:
    def node_for(definition: ModelDefinition) -> str:
        return definition.placement.node_id if definition.placement else "local"

    return RunningModelAdoption(
        ModelRegistry(tmp_path), cache, RecoveryState(tmp_path), AuditLog(tmp_path), node_for
    )


def _running(model_id: str, state: ModelState = ModelState.READY) -> ModelStatus:
    return ModelStatus(id=model_id, served_name=f"{model_id}-chat", state=state, pid=4242)


async def test_what_a_node_runs_and_is_placed_there_is_adopted_and_nothing_else(tmp_path: Path) -> None:
    registry = ModelRegistry(tmp_path)
    for model_id, node in [("far", "gpu-2"), ("moved", "gpu-3"), ("starting", "gpu-2"), ("idle", "gpu-2")]:
        await registry.upsert(
            ModelDefinition(
                id=model_id,
                served_name=f"{model_id}-chat",
                model_path=model_id,
                placement=Placement(node_id=node),
            )
        )
    cache = StatusCache()
    statuses = (
        _running("far"),
        _running("moved"),  # registered for another node: not this node's to adopt
        _running("starting", ModelState.STARTING),
        _running("idle", ModelState.STOPPED),
        _running("stranger"),  # not registered here
    )
    cache.put(NodeState(node_id="gpu-2", reachable=True, models=statuses))
    cache.put(NodeState(node_id="gpu-3", reachable=False, models=(_running("moved"),)))
    adoption = _adoption(tmp_path, cache)

    adopted, unreached = await adoption.adopt()

    assert adopted == [("gpu-2", "far"), ("gpu-2", "starting")]
    assert unreached == {"gpu-3"}
    assert await RecoveryState(tmp_path).running("gpu-2") == {"far", "starting"}
    entries = await AuditLog(tmp_path).read(datetime.now(UTC).date())
    assert [(e.actor, e.action, e.target, e.node_id) for e in entries] == [
        (RECOVERY_ACTOR, "model.adopt", "far", "gpu-2"),
        (RECOVERY_ACTOR, "model.adopt", "starting", "gpu-2"),
    ]


async def test_a_node_that_answers_later_has_its_models_adopted_then(tmp_path: Path) -> None:
    await ModelRegistry(tmp_path).upsert(
        ModelDefinition(
            id="moved", served_name="moved-chat", model_path="m", placement=Placement(node_id="gpu-3")
        )
    )
    cache = StatusCache()
    cache.put(NodeState(node_id="gpu-3", reachable=False))
    adoption = _adoption(tmp_path, cache)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: adoption.adopt_when_reached({"gpu-3"}, within_s=30, poll_s=0.01))
        await anyio.sleep(0.05)
        cache.put(NodeState(node_id="gpu-3", reachable=True, models=(_running("moved"),)))

    assert await RecoveryState(tmp_path).running("gpu-3") == {"moved"}


async def test_a_node_that_never_answers_is_given_up_on_and_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = StatusCache()
    cache.put(NodeState(node_id="gpu-3", reachable=False))

    left = await _adoption(tmp_path, cache).adopt_when_reached({"gpu-3"}, within_s=0.05, poll_s=0.01)

    assert left == {"gpu-3"}
    assert "gpu-3 did not answer" in caplog.text


def test_up_asks_for_the_passphrase_on_a_terminal_and_never_echoes_it(tmp_path: Path) -> None:
    path, _ = anyio.run(_backup, tmp_path)
    env = {name: value for name, value in os.environ.items() if name != PASSPHRASE_ENV}
    controller, terminal = os.openpty()
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mirbad_master.cli",
            "up",
            "--recover",
            str(path),
            "--data-dir",
            str(tmp_path / "new"),
        ],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env=env,
        start_new_session=True,
    )
    os.close(terminal)
    try:
        seen = _read_until(controller, b"Passphrase of ")
        os.write(controller, b"typed wrong phrase\n")
        seen += _read_until(controller, b"passphrase is wrong")
        assert child.wait(60) == 2
    finally:
        child.kill()
        child.wait(60)
        os.close(controller)

    assert path.name.encode() in seen
    assert b"typed wrong phrase" not in seen  # no echo
    assert not (tmp_path / "new").exists()


def _read_until(descriptor: int, wanted: bytes, timeout_s: float = 60.0) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout_s
    while wanted not in seen:
        ready, _, _ = select.select([descriptor], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            pytest.fail(f"never saw {wanted!r}; saw {seen!r}")
        try:
            chunk = os.read(descriptor, 4096)
        except OSError:  # the child closed the terminal
            chunk = b""
        if not chunk:
            pytest.fail(f"the terminal closed before {wanted!r}; saw {seen!r}")
        seen += chunk
    return seen
