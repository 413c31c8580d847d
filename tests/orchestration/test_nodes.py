"""The node registry: nodes.json, atomic and fail closed."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from mirbad_orchestration.exceptions import DuplicateNodeError, NodeRegistryError, UnknownNodeError
from mirbad_orchestration.fleet import LOCAL_NODE_ID, NODES_FILE_NAME, NodeRecord, NodeRegistry

pytestmark = pytest.mark.anyio

ENROLLED = datetime(2025, 3, 1, 9, 30, tzinfo=UTC)


def node(node_id: str, url: str | None = None, **changes: object) -> NodeRecord:
    return NodeRecord.model_validate(
        {
            "id": node_id,
            "name": node_id.upper(),
            "agent_url": url or f"https://{node_id}.lan:9443",
            "enrolled_at": ENROLLED,
            **changes,
        }
    )


async def test_a_missing_file_is_an_empty_fleet(tmp_path: Path) -> None:
    registry = NodeRegistry(tmp_path)

    assert await registry.list() == []
    assert not (tmp_path / NODES_FILE_NAME).exists()


async def test_add_get_list_remove_persist(tmp_path: Path) -> None:
    registry = NodeRegistry(tmp_path)
    await registry.add(node("spark-2"))
    await registry.add(node("spark-1", labels={"gpu": "gb10"}))

    reread = NodeRegistry(tmp_path)
    assert [record.id for record in await reread.list()] == ["spark-1", "spark-2"]
    assert (await reread.get("spark-1")).labels == {"gpu": "gb10"}

    removed = await reread.remove("spark-2")
    assert removed.id == "spark-2"
    assert [record.id for record in await NodeRegistry(tmp_path).list()] == ["spark-1"]


async def test_the_file_is_readable_json(tmp_path: Path) -> None:
    registry = NodeRegistry(tmp_path)
    await registry.add(node("spark-1", pin_sha256="A" * 43 + "="))

    document = json.loads((tmp_path / NODES_FILE_NAME).read_text())

    assert document == {
        "schemaVersion": 1,
        "nodes": [
            {
                "id": "spark-1",
                "name": "SPARK-1",
                "agentUrl": "https://spark-1.lan:9443",
                "pinSha256": "A" * 43 + "=",
                "enrolledAt": "2025-03-01T09:30:00Z",
                "labels": {},
                "local": False,
            }
        ],
    }


async def test_unknown_nodes(tmp_path: Path) -> None:
    registry = NodeRegistry(tmp_path)
    with pytest.raises(UnknownNodeError) as unknown:
        await registry.get("nope")
    with pytest.raises(UnknownNodeError):
        await registry.remove("nope")
    with pytest.raises(UnknownNodeError):
        await registry.update(node("nope"))

    assert unknown.value.node_id == "nope"
    assert isinstance(unknown.value, KeyError)
    assert str(unknown.value) == "no node with id 'nope'"


async def test_duplicates_are_conflicts(tmp_path: Path) -> None:
    registry = NodeRegistry(tmp_path)
    await registry.add(node("spark-1"))

    with pytest.raises(DuplicateNodeError, match="already registered"):
        await registry.add(node("spark-1", "https://elsewhere:9443"))
    with pytest.raises(DuplicateNodeError, match="'spark-1' is already registered at"):
        await registry.add(node("spark-2", "https://SPARK-1.lan:9443"))
    assert [record.id for record in await registry.list()] == ["spark-1"]


async def test_update_replaces_a_record(tmp_path: Path) -> None:
    registry = NodeRegistry(tmp_path)
    await registry.add(node("spark-1"))
    await registry.add(node("spark-2"))

    await registry.update(node("spark-1", "https://10.0.0.5:9443", labels={"rack": "a"}))
    with pytest.raises(DuplicateNodeError):
        await registry.update(node("spark-1", "https://spark-2.lan:9443"))

    updated = await NodeRegistry(tmp_path).get("spark-1")
    assert (updated.agent_url, updated.labels) == ("https://10.0.0.5:9443", {"rack": "a"})


async def test_ensure_local_registers_once_and_follows_changes(tmp_path: Path) -> None:
    registry = NodeRegistry(tmp_path)
    first = await registry.ensure_local("https://127.0.0.1:9443", "mirbad-local")
    again = await registry.ensure_local("https://127.0.0.1:9443", "mirbad-local")
    moved = await registry.ensure_local("https://127.0.0.1:9444", "mirbad-local")

    assert first == again
    assert first.id == LOCAL_NODE_ID
    assert first.local
    assert first.expected_certificate_name == "mirbad-local"
    assert moved.agent_url == "https://127.0.0.1:9444"
    assert moved.enrolled_at == first.enrolled_at
    assert await NodeRegistry(tmp_path).list() == [moved]


async def test_only_one_local_node(tmp_path: Path) -> None:
    registry = NodeRegistry(tmp_path)
    await registry.add(node("box", local=True))

    with pytest.raises(DuplicateNodeError, match="local node"):
        await registry.ensure_local("https://127.0.0.1:9443", "local")


async def test_a_corrupt_file_fails_closed_and_is_kept(tmp_path: Path) -> None:
    path = tmp_path / NODES_FILE_NAME
    path.write_text('{"schemaVersion": 1, "nodes": [{"id": "Bad Id", "name": "x", "agentUrl": "https://x"}]}')
    registry = NodeRegistry(tmp_path)

    with pytest.raises(NodeRegistryError, match=r"nodes\.0\.id"):
        await registry.list()
    with pytest.raises(NodeRegistryError):
        await registry.add(node("spark-1"))
    assert "Bad Id" in path.read_text()


@pytest.mark.parametrize(
    "text",
    ["not json", '{"schemaVersion": 2, "nodes": []}', '{"nodes": [{"id": "a"}]}'],
)
async def test_unreadable_documents(tmp_path: Path, text: str) -> None:
    (tmp_path / NODES_FILE_NAME).write_text(text)

    with pytest.raises(NodeRegistryError):
        await NodeRegistry(tmp_path).list()


async def test_a_repeated_id_in_the_file_fails_closed(tmp_path: Path) -> None:
    records = [
        node("a").model_dump(mode="json", by_alias=True),
        node("a", "https://b:9443").model_dump(mode="json"),
    ]
    (tmp_path / NODES_FILE_NAME).write_text(json.dumps({"nodes": records}))

    with pytest.raises(NodeRegistryError, match="twice"):
        await NodeRegistry(tmp_path).list()


async def test_concurrent_adds_are_all_kept(tmp_path: Path) -> None:
    registry = NodeRegistry(tmp_path)
    async with anyio.create_task_group() as group:
        for index in range(12):
            group.start_soon(registry.add, node(f"node-{index:02d}"))

    assert len(await NodeRegistry(tmp_path).list()) == 12


@pytest.mark.parametrize(
    "url",
    ["http://spark:9443", "https://", "https://spark:9443/agent/v1", "https://user@spark:9443", "spark:9443"],
)
def test_agent_urls_are_plain_https(url: str) -> None:
    with pytest.raises(ValidationError):
        node("spark", url)


def test_a_trailing_slash_is_dropped() -> None:
    assert node("spark", "https://spark:9443/").agent_url == "https://spark:9443"


@given(
    st.from_regex(r"[a-z0-9][a-z0-9._-]{0,20}", fullmatch=True),
    st.sampled_from(["h.lan", "10.1.2.3", "[::1]"]),
)
def test_records_survive_the_file_format(node_id: str, host: str) -> None:
    record = node(node_id, f"https://{host}:9443", labels={"k": node_id})

    assert NodeRecord.model_validate_json(record.model_dump_json(by_alias=True)) == record


# ---------------------------------------------------------------- crash safety


class SimulatedCrashError(Exception):
    """Raised between writing the temporary file and renaming it over nodes.json."""


def listing(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


async def test_a_crash_between_temp_write_and_replace_keeps_the_old_file(tmp_path: Path) -> None:
    armed = False

    def crash(temp: Path) -> None:
        if armed:
            raise SimulatedCrashError(temp.name)

    registry = NodeRegistry(tmp_path, before_replace=crash)
    await registry.add(node("spark-1"))
    before = (tmp_path / NODES_FILE_NAME).read_bytes()
    armed = True
    with pytest.raises(SimulatedCrashError):
        await registry.add(node("spark-2"))

    assert (tmp_path / NODES_FILE_NAME).read_bytes() == before
    assert listing(tmp_path) == [NODES_FILE_NAME]
    with pytest.raises(UnknownNodeError):
        await registry.get("spark-2")  # memory still matches the file
    assert [record.id for record in await NodeRegistry(tmp_path).list()] == ["spark-1"]


async def test_a_crash_on_the_first_write_leaves_no_file_and_an_empty_fleet(tmp_path: Path) -> None:
    def crash(temp: Path) -> None:
        raise SimulatedCrashError(temp.name)

    with pytest.raises(SimulatedCrashError):
        await NodeRegistry(tmp_path, before_replace=crash).add(node("spark-1"))

    assert listing(tmp_path) == []
    assert await NodeRegistry(tmp_path).list() == []
