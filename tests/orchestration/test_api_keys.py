"""The API key store: secrets shown once and stored hashed, refusals, usage, fail-closed files."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import stat
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from syrupy.assertion import SnapshotAssertion

from mirbad_orchestration.exceptions import (
    ApiKeyError,
    ApiKeyStoreError,
    MirbadOrchestrationError,
    UnknownApiKeyError,
)
from mirbad_orchestration.keys import (
    API_KEY_USAGE_FILE,
    API_KEYS_FILE,
    OTHER_MODELS,
    ApiKeyImport,
    ApiKeyStore,
)
from mirbad_orchestration.testing import FakeClock
from mirbad_protocol import InvalidFieldError
from mirbad_protocol.admin import ApiKeyCreate, ApiKeyCreated, ApiKeyInfo, KeyUsage

pytestmark = pytest.mark.anyio

START = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
TIMEOUT = 10


class FailingWrites:
    """A before_replace hook that fails the writes of the files a test names."""

    def __init__(self) -> None:
        self.failing: set[str] = set()

    def __call__(self, temp: Path) -> None:
        if any(temp.name.startswith(f".{name}.") for name in self.failing):
            raise OSError(28, "No space left on device")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def writes() -> FailingWrites:
    return FailingWrites()


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock, writes: FailingWrites) -> ApiKeyStore:
    return ApiKeyStore(tmp_path, clock=clock, before_replace=writes)


def reopened(tmp_path: Path, clock: FakeClock, **options: Any) -> ApiKeyStore:
    return ApiKeyStore(tmp_path, clock=clock, **options)


async def create(store: ApiKeyStore, name: str = "ci", **fields: Any) -> ApiKeyCreated:
    return await store.create(ApiKeyCreate(name=name, **fields))


def totals(usage: list[KeyUsage]) -> dict[tuple[str, str], tuple[int, int, int]]:
    return {
        (entry.key_id, entry.served_name): (entry.prompt_tokens, entry.completion_tokens, entry.requests)
        for entry in usage
    }


# ---------------------------------------------------------------- secrets


async def test_the_secret_is_returned_once_and_never_stored_in_clear(
    store: ApiKeyStore, tmp_path: Path
) -> None:
    created = await create(store, allowed_models=("qwen",), requests_per_minute=60)
    text = (tmp_path / API_KEYS_FILE).read_text(encoding="utf-8")

    assert re.fullmatch(r"mb-[A-Za-z0-9_-]{43}", created.secret)
    assert created.secret.startswith(created.prefix)
    assert created.secret not in text
    assert created.secret[len(created.prefix) :] not in text
    assert json.loads(text)["keys"][0]["secretSha256"] == hashlib.sha256(created.secret.encode()).hexdigest()
    listed = await store.get(created.id)
    assert type(listed) is ApiKeyInfo
    assert listed == ApiKeyInfo(**created.model_dump(exclude={"secret"}))
    if os.name == "posix":
        assert stat.S_IMODE((tmp_path / API_KEYS_FILE).stat().st_mode) == 0o600


async def test_every_key_gets_its_own_secret_and_id(store: ApiKeyStore) -> None:
    keys = [await create(store, f"key {index}") for index in range(5)]

    assert len({key.secret for key in keys}) == 5
    assert len({key.id for key in keys}) == 5
    assert [key.name for key in await store.list()] == [f"key {index}" for index in range(5)]


async def test_a_secret_finds_its_key_and_a_use_is_stamped_with_the_callers_time(
    store: ApiKeyStore, tmp_path: Path, clock: FakeClock
) -> None:
    created = await create(store)
    reopened_store = reopened(tmp_path, clock)
    used_at = START + timedelta(minutes=3)  # the caller's (the router's) time, not the store's clock

    found = await reopened_store.find_by_secret(created.secret)
    assert found is not None
    assert found.last_used_at is None  # finding a key is not using it: the router decides that
    reopened_store.mark_used(created.id, used_at)
    info = await reopened_store.find_by_secret(created.secret)

    assert info is not None
    assert info.id == created.id
    assert info.last_used_at == used_at


async def test_a_forged_or_altered_secret_is_unknown(store: ApiKeyStore) -> None:
    created = await create(store)
    altered = created.secret[:-1] + ("A" if created.secret[-1] != "A" else "B")

    for attempt in (altered, created.prefix, created.secret + "x", "", "mb-", "\ud800", "é" * 300):
        assert await store.find_by_secret(attempt) is None
    assert await store.find_by_secret(created.secret) is not None


async def test_the_lookup_compares_digests_with_every_key_in_constant_time(
    store: ApiKeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = [await create(store, f"key {index}") for index in range(3)]
    compared: list[tuple[str, str]] = []
    real_compare = hmac.compare_digest

    def counting_compare(a: str, b: str) -> bool:
        compared.append((a, b))
        return real_compare(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting_compare)
    near_miss = keys[2].secret[:-2] + "zz"
    attempts = [keys[0].secret, keys[2].secret, near_miss, "mb-unknown", ""]

    for attempt in attempts:
        compared.clear()
        await store.find_by_secret(attempt)

        # Every stored hash is compared, whether the first, the last or no key matches ...
        assert len(compared) == len(keys)
        # ... and only digests are compared, never the secret itself.
        for stored, presented in compared:
            assert re.fullmatch(r"[0-9a-f]{64}", stored)
            assert presented == hashlib.sha256(attempt.encode("utf-8", "surrogatepass")).hexdigest()


# ---------------------------------------------------------------- refusals


async def test_the_store_reports_an_expired_key_and_leaves_the_decision_to_the_router(
    store: ApiKeyStore, clock: FakeClock
) -> None:
    created = await create(store, expires_at=START + timedelta(hours=1))
    await clock.advance(timedelta(hours=2))

    info = await store.find_by_secret(created.secret)

    assert info is not None
    assert info.expires_at == START + timedelta(hours=1)
    assert info.state(clock()) == "expired"


async def test_a_revoked_key_is_reported_revoked_and_kept(store: ApiKeyStore, clock: FakeClock) -> None:
    created = await create(store, expires_at=START + timedelta(hours=1))
    await clock.advance(timedelta(minutes=5))

    revoked = await store.revoke(created.id)
    await clock.advance(timedelta(hours=2))  # past the expiry too: revocation is the state reported

    assert revoked.revoked_at == START + timedelta(minutes=5)
    found = await store.find_by_secret(created.secret)
    assert found is not None
    assert found.revoked_at == START + timedelta(minutes=5)
    assert found.name == "ci"
    assert found.state(clock()) == "revoked"
    assert [key.id for key in await store.list()] == [created.id]
    assert (await store.revoke(created.id)).revoked_at == START + timedelta(minutes=5)


async def test_a_key_cannot_be_born_expired(store: ApiKeyStore, tmp_path: Path) -> None:
    with pytest.raises(InvalidFieldError) as refused:
        await create(store, expires_at=START)

    assert refused.value.field == "expiresAt"
    assert not (tmp_path / API_KEYS_FILE).exists()


@pytest.mark.parametrize("action", ["get", "revoke", "delete", "usage"])
async def test_an_unknown_id_is_reported(store: ApiKeyStore, action: str) -> None:
    await create(store)

    with pytest.raises(UnknownApiKeyError, match="nope") as refused:
        await getattr(store, action)("nope")
    assert refused.value.key_id == "nope"


def test_errors_share_one_root() -> None:
    for error in (ApiKeyStoreError, UnknownApiKeyError):
        assert issubclass(error, ApiKeyError)
    assert issubclass(ApiKeyError, MirbadOrchestrationError)


# ---------------------------------------------------------------- keys required


async def test_a_fresh_install_is_open_until_its_first_key(store: ApiKeyStore, tmp_path: Path) -> None:
    assert await store.keys_required() is False
    assert not (tmp_path / API_KEYS_FILE).exists()

    created = await create(store)

    assert await store.keys_required() is True
    await store.delete(created.id)
    assert await store.keys_required() is True  # deleting every key never opens the endpoint


async def test_requiring_keys_is_an_explicit_persisted_setting(
    store: ApiKeyStore, tmp_path: Path, clock: FakeClock
) -> None:
    await create(store)

    await store.set_keys_required(False)
    assert await reopened(tmp_path, clock).keys_required() is False

    await store.set_keys_required(True)
    assert await reopened(tmp_path, clock).keys_required() is True


# ---------------------------------------------------------------- delete, concurrency


async def test_delete_forgets_the_key_and_its_usage(
    store: ApiKeyStore, tmp_path: Path, clock: FakeClock
) -> None:
    kept, gone = await create(store, "kept"), await create(store, "gone")
    for key in (kept, gone):
        store.record_usage(key.id, "qwen", 10, 1)
    await store.flush_usage()

    deleted = await store.delete(gone.id)
    store.record_usage(gone.id, "qwen", 5, 5)  # a request that finished after the delete
    await store.aclose()

    assert deleted.id == gone.id
    assert await store.find_by_secret(gone.secret) is None
    document = json.loads((tmp_path / API_KEY_USAGE_FILE).read_text())
    assert {entry["keyId"] for entry in document["usage"]} == {kept.id}
    assert [entry.key_id for entry in await reopened(tmp_path, clock).usage()] == [kept.id]


async def test_concurrent_creates_lose_nothing(store: ApiKeyStore, tmp_path: Path, clock: FakeClock) -> None:
    created: list[ApiKeyCreated] = []

    async def create_one(index: int) -> None:
        created.append(await create(store, f"key {index}"))

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as group:
            for index in range(25):
                group.start_soon(create_one, index)

    restarted = reopened(tmp_path, clock)
    assert sorted(key.id for key in await restarted.list()) == sorted(key.id for key in created)
    for key in created:
        info = await restarted.find_by_secret(key.secret)
        assert info is not None
        assert info.id == key.id


# ---------------------------------------------------------------- usage


async def test_usage_accumulates_across_concurrent_counts_and_flushes(
    store: ApiKeyStore, tmp_path: Path, clock: FakeClock
) -> None:
    first, second = await create(store, "first"), await create(store, "second")
    counting_done = anyio.Event()

    async def count(key_id: str, served_name: str) -> None:
        for _ in range(40):
            store.record_usage(key_id, served_name, 3, 2)
            await anyio.lowlevel.checkpoint()

    async def flush_while_counting() -> None:
        while not counting_done.is_set():
            await store.flush_usage()
            await anyio.lowlevel.checkpoint()

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as flushing:
            flushing.start_soon(flush_while_counting)
            async with anyio.create_task_group() as counting:
                for _ in range(5):
                    counting.start_soon(count, first.id, "qwen")
                    counting.start_soon(count, first.id, "llama")
                    counting.start_soon(count, second.id, "qwen")
            counting_done.set()

    expected = {
        (first.id, "llama"): (600, 400, 200),
        (first.id, "qwen"): (600, 400, 200),
        (second.id, "qwen"): (600, 400, 200),
    }
    assert totals(await store.usage()) == expected
    await store.aclose()
    assert totals(await reopened(tmp_path, clock).usage()) == expected


async def test_usage_survives_a_restart_through_async_with(tmp_path: Path, clock: FakeClock) -> None:
    async with ApiKeyStore(tmp_path, clock=clock) as store:
        created = await create(store)
        store.mark_used(created.id, clock())
        store.record_usage(created.id, "qwen", 120, 30)
        store.record_usage(created.id, "qwen", 80, 0)

    async with ApiKeyStore(tmp_path, clock=clock) as restarted:
        assert await restarted.usage(created.id) == [
            KeyUsage(
                key_id=created.id, served_name="qwen", prompt_tokens=200, completion_tokens=30, requests=2
            )
        ]
        assert (await restarted.get(created.id)).last_used_at == START


async def test_unflushed_usage_is_reported_too(store: ApiKeyStore) -> None:
    created = await create(store)
    store.record_usage(created.id, "qwen", 1, 2)
    await store.flush_usage()
    store.record_usage(created.id, "qwen", 10, 20)

    assert totals(await store.usage(created.id)) == {(created.id, "qwen"): (11, 22, 2)}


async def test_each_key_keeps_a_bounded_number_of_models(tmp_path: Path, clock: FakeClock) -> None:
    store = ApiKeyStore(tmp_path, clock=clock, max_models_per_key=2)
    created = await create(store)
    for name in ("a", "b", "c", "d", "a"):
        store.record_usage(created.id, name, 1, 1)
    await store.aclose()

    assert totals(await ApiKeyStore(tmp_path, clock=clock, max_models_per_key=2).usage()) == {
        (created.id, "a"): (2, 2, 2),
        (created.id, "b"): (1, 1, 1),
        (created.id, OTHER_MODELS): (2, 2, 2),
    }


@pytest.mark.parametrize(("prompt", "completion", "served"), [(-1, 0, "qwen"), (0, -1, "qwen"), (0, 0, "")])
async def test_impossible_counts_are_refused(
    store: ApiKeyStore, prompt: int, completion: int, served: str
) -> None:
    created = await create(store)

    with pytest.raises(ValueError, match=r"negative|served name"):
        store.record_usage(created.id, served, prompt, completion)


async def test_a_failed_flush_keeps_the_counts_for_the_next_one(
    store: ApiKeyStore, writes: FailingWrites, tmp_path: Path, clock: FakeClock
) -> None:
    created = await create(store)
    store.record_usage(created.id, "qwen", 5, 5)
    await store.flush_usage()
    before = (tmp_path / API_KEY_USAGE_FILE).read_bytes()
    store.record_usage(created.id, "qwen", 1, 1)
    writes.failing.add(API_KEY_USAGE_FILE)

    with pytest.raises(ApiKeyStoreError, match="No space left"):
        await store.flush_usage()
    assert (tmp_path / API_KEY_USAGE_FILE).read_bytes() == before

    store.record_usage(created.id, "qwen", 2, 2)
    writes.failing.clear()
    await store.flush_usage()
    assert totals(await reopened(tmp_path, clock).usage()) == {(created.id, "qwen"): (8, 8, 3)}


async def test_the_flusher_saves_usage_on_its_cadence(tmp_path: Path, clock: FakeClock) -> None:
    store = ApiKeyStore(tmp_path, clock=clock, flush_interval=0.01)
    created = await create(store)
    store.record_usage(created.id, "qwen", 4, 2)

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as group:
            group.start_soon(store.run_usage_flusher)
            while not (tmp_path / API_KEY_USAGE_FILE).exists():  # noqa: ASYNC110 - polling a file
                await anyio.sleep(0.01)
            group.cancel_scope.cancel()

    assert totals(await reopened(tmp_path, clock).usage()) == {(created.id, "qwen"): (4, 2, 1)}


# ---------------------------------------------------------------- fail closed


CORRUPT_KEY_FILES = {
    "empty": "",
    "not json": "{not json",
    "an array": "[]",
    "no fields": "{}",
    "another version": '{"schemaVersion": 2, "requireKeys": true, "keys": []}',
    "a bad hash": (
        '{"schemaVersion": 1, "requireKeys": true, "keys": [{"id": "k1", "name": "ci", "prefix": "mb-x",'
        ' "secretSha256": "cleartext", "createdAt": "2025-03-01T12:00:00Z"}]}'
    ),
    "a repeated id": (
        '{"schemaVersion": 1, "requireKeys": true, "keys": ['
        '{"id": "k1", "name": "a", "prefix": "mb-a", "secretSha256": "' + "a" * 64 + '",'
        ' "createdAt": "2025-03-01T12:00:00Z"},'
        '{"id": "k1", "name": "b", "prefix": "mb-b", "secretSha256": "' + "b" * 64 + '",'
        ' "createdAt": "2025-03-01T12:00:00Z"}]}'
    ),
}


@pytest.mark.parametrize("content", CORRUPT_KEY_FILES.values(), ids=CORRUPT_KEY_FILES.keys())
async def test_a_corrupt_key_file_fails_closed_and_is_never_overwritten(
    store: ApiKeyStore, tmp_path: Path, content: str
) -> None:
    path = tmp_path / API_KEYS_FILE
    path.write_text(content, encoding="utf-8")

    attempts: list[Callable[[], Awaitable[object]]] = [
        lambda: store.find_by_secret("mb-anything"),
        store.keys_required,
        lambda: store.create(ApiKeyCreate(name="new")),
        lambda: store.import_records([]),
        lambda: store.set_keys_required(False),
        store.list,
    ]
    for attempt in attempts:
        with pytest.raises(ApiKeyStoreError, match=re.escape(str(path))):
            await attempt()
    with pytest.raises(ApiKeyStoreError):
        async with store:
            pass

    assert path.read_text(encoding="utf-8") == content


async def test_a_repaired_key_file_is_read_again(
    store: ApiKeyStore, tmp_path: Path, clock: FakeClock
) -> None:
    created = await create(reopened(tmp_path, clock))
    path = tmp_path / API_KEYS_FILE
    good = path.read_bytes()
    path.write_text("{broken", encoding="utf-8")
    with pytest.raises(ApiKeyStoreError):
        await store.find_by_secret(created.secret)

    path.write_bytes(good)

    assert await store.find_by_secret(created.secret) is not None


async def test_a_corrupt_usage_file_blocks_usage_reports_not_requests(
    store: ApiKeyStore, tmp_path: Path
) -> None:
    usage_path = tmp_path / API_KEY_USAGE_FILE
    usage_path.write_text('{"schemaVersion": 1, "usage": "lots"}', encoding="utf-8")
    created = await create(store)

    assert await store.find_by_secret(created.secret) is not None
    store.record_usage(created.id, "qwen", 1, 1)
    for attempt in (store.usage, store.list, store.flush_usage):
        with pytest.raises(ApiKeyStoreError, match=re.escape(str(usage_path))):
            await attempt()
    assert usage_path.read_text(encoding="utf-8") == '{"schemaVersion": 1, "usage": "lots"}'
    assert (await store.revoke(created.id)).revoked_at == START  # key changes still work


# ---------------------------------------------------------------- backup and restore


async def test_exported_records_restore_working_keys_elsewhere(
    store: ApiKeyStore, tmp_path: Path, clock: FakeClock
) -> None:
    created = await create(store, allowed_models=("qwen",), tokens_per_minute=1000)
    records = await store.export_records()
    elsewhere = ApiKeyStore(tmp_path / "other-machine", clock=clock)

    outcome = await elsewhere.import_records(records)

    assert outcome == ApiKeyImport(added=(created.id,))
    restored = await elsewhere.find_by_secret(created.secret)
    assert restored is not None
    assert restored.model_dump(exclude={"last_used_at"}) == created.model_dump(
        exclude={"secret", "last_used_at"}
    )
    assert await elsewhere.keys_required() is True
    assert await elsewhere.import_records(records) == ApiKeyImport(unchanged=(created.id,))


async def test_a_restore_never_changes_or_doubles_a_local_key(store: ApiKeyStore, clock: FakeClock) -> None:
    local = await create(store, "local")
    (record,) = await store.export_records()
    await store.revoke(local.id)
    renamed = record.model_copy(update={"name": "from backup"})
    same_id_other_secret = record.model_copy(update={"secret_sha256": "c" * 64})
    same_secret_other_id = record.model_copy(update={"id": "otherid"})

    outcome = await store.import_records([renamed, same_id_other_secret, same_secret_other_id])

    assert outcome == ApiKeyImport(unchanged=(local.id,), conflicts=(local.id, "otherid"))
    (kept,) = await store.list()
    assert (kept.name, kept.revoked_at) == ("local", START)


async def test_a_dry_run_import_writes_nothing(store: ApiKeyStore, tmp_path: Path, clock: FakeClock) -> None:
    await create(store)
    records = await store.export_records()
    elsewhere = ApiKeyStore(tmp_path / "other-machine", clock=clock)

    outcome = await elsewhere.import_records(records, dry_run=True)

    assert outcome.added == (records[0].id,)
    assert not (tmp_path / "other-machine" / API_KEYS_FILE).exists()
    assert await elsewhere.list() == []


# ---------------------------------------------------------------- file shapes


async def test_file_shapes(
    store: ApiKeyStore, tmp_path: Path, clock: FakeClock, snapshot_json: SnapshotAssertion
) -> None:
    full = await create(
        store,
        "nightly batch",
        allowed_models=("Qwen3-8B", "llama-3.1-8b"),
        expires_at=START + timedelta(days=30),
        requests_per_minute=60,
        tokens_per_minute=100_000,
    )
    await clock.advance(timedelta(minutes=1))
    minimal = await create(store, "laptop")
    await clock.advance(timedelta(minutes=1))
    revoked = await create(store, "old script")
    await store.revoke(revoked.id)
    store.mark_used(full.id, clock())
    store.record_usage(full.id, "Qwen3-8B", 1200, 300)
    store.record_usage(full.id, "llama-3.1-8b", 50, 7)
    store.record_usage(minimal.id, "Qwen3-8B", 9, 1)
    await store.aclose()

    masks = {key.id: f"<id of {key.name}>" for key in (full, minimal, revoked)}
    keys = json.loads((tmp_path / API_KEYS_FILE).read_text(encoding="utf-8"))
    for record in keys["keys"]:
        assert re.fullmatch(r"[0-9a-f]{12}", record["id"])
        assert re.fullmatch(r"mb-[A-Za-z0-9_-]{6}", record["prefix"])
        assert re.fullmatch(r"[0-9a-f]{64}", record["secretSha256"])
        record.update(id=masks[record["id"]], prefix="mb-<6 random>", secretSha256="<sha256 of the secret>")
    usage_text = (tmp_path / API_KEY_USAGE_FILE).read_text(encoding="utf-8")
    for key_id, mask in masks.items():
        usage_text = usage_text.replace(key_id, mask)

    assert {API_KEYS_FILE: keys, API_KEY_USAGE_FILE: json.loads(usage_text)} == snapshot_json
