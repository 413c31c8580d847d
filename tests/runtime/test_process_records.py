"""processes.json: the process driver's record of each model process it launched."""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from syrupy.assertion import SnapshotAssertion

from mirbad_protocol import ExecutableRef
from mirbad_runtime import ProcessIdentity, ProcessRecord, ProcessRecordStore

pytestmark = pytest.mark.anyio


def _record(model_id: str = "tiny", **changes: Any) -> ProcessRecord:
    fields: dict[str, Any] = {
        "model_id": model_id,
        "served_name": f"{model_id}-served",
        "runtime": "llamacpp",
        "pid": 4242,
        "start_time": "boot:1234",
        "executable": "/opt/llama/llama-server",
        "group": 4242,
        "executable_ref": ExecutableRef(name="llama-server", version="b6000"),
        "port": 8100,
        "log_path": f"/state/logs/{model_id}.log",
        "cwd": "/models",
        "argv": ["/opt/llama/llama-server", "--model", "tiny.gguf", "--host", "127.0.0.1", "--port", "8100"],
        "config_hash": "0123456789abcdef",
        "budget_gib": 1.5,
        "labels": {"team": "a"},
        "started_at": datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
        **changes,
    }
    return ProcessRecord(**fields)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "processes.json"


async def test_records_survive_a_new_store(path: Path) -> None:
    store = ProcessRecordStore(path)
    await store.put(_record("b"))
    await store.put(_record("a", port=8101))

    reread = ProcessRecordStore(path)

    assert [record.model_id for record in await reread.all()] == ["a", "b"]
    assert await reread.get("a") == _record("a", port=8101)
    assert await reread.get("missing") is None


async def test_the_file_format(path: Path, snapshot_json: SnapshotAssertion) -> None:
    await ProcessRecordStore(path).put(_record())

    assert json.loads(await anyio.Path(path).read_text()) == snapshot_json


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
async def test_the_file_is_owner_only(path: Path) -> None:
    await ProcessRecordStore(path).put(_record())

    assert stat.S_IMODE((await anyio.Path(path).stat()).st_mode) == 0o600


async def test_put_replaces_and_remove_drops(path: Path) -> None:
    store = ProcessRecordStore(path)
    await store.put(_record(pid=1))
    await store.put(_record(pid=2))

    removed = await store.remove("tiny")

    assert removed is not None
    assert removed.pid == 2
    assert await store.remove("tiny") is None
    assert await ProcessRecordStore(path).all() == []


async def test_concurrent_writes_all_land(path: Path) -> None:
    store = ProcessRecordStore(path)
    async with anyio.create_task_group() as group:
        for index in range(20):
            group.start_soon(store.put, _record(f"m{index:02d}", port=8100 + index))

    assert len(await ProcessRecordStore(path).all()) == 20


async def test_a_missing_file_is_an_empty_store(path: Path) -> None:
    assert await ProcessRecordStore(path).all() == []
    assert path.parent.is_dir()


async def test_an_unparseable_file_is_kept_aside_and_the_store_starts_empty(path: Path) -> None:
    _write(path, "{ not json")

    store = ProcessRecordStore(path)

    assert await store.all() == []
    [aside] = path.parent.glob("processes.json.corrupt-*")
    assert aside.read_text() == "{ not json"


async def test_unreadable_entries_are_dropped_and_the_rest_kept(path: Path) -> None:
    good = _record("good").model_dump(mode="json", by_alias=True)
    _write(path, json.dumps({"version": 1, "processes": [good, {"modelId": "bad"}]}))

    assert [record.model_id for record in await ProcessRecordStore(path).all()] == ["good"]
    assert len(list(path.parent.glob("processes.json.corrupt-*"))) == 1


@pytest.mark.parametrize("document", [[], {"processes": []}, {"version": 2, "processes": []}])
async def test_an_unknown_shape_or_version_is_kept_aside(path: Path, document: object) -> None:
    _write(path, json.dumps(document))

    assert await ProcessRecordStore(path).all() == []
    assert len(list(path.parent.glob("processes.json.corrupt-*"))) == 1


async def test_temporary_files_of_a_crashed_writer_are_removed(path: Path) -> None:
    stale = path.parent / ".processes.json.abc123.tmp"
    _write(stale, "half")

    await ProcessRecordStore(path).all()

    assert not stale.exists()


def test_a_record_gives_its_identity_and_log_file() -> None:
    record = _record()

    assert record.identity == ProcessIdentity(
        pid=4242, start_time="boot:1234", executable="/opt/llama/llama-server", group=4242
    )
    assert record.log_file == Path("/state/logs/tiny.log")


def test_a_record_of_an_older_agent_without_a_group_still_reads() -> None:
    wire = _record().model_dump(mode="json", by_alias=True)
    del wire["group"]

    assert ProcessRecord.model_validate(wire).identity.group is None
