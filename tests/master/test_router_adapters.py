"""The master's router adapters: what the fleet tells the embedded /v1 router about a model and a key."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from tests.master._stack import running_master

from mirbad_master._router_adapters import ApiKeyGate
from mirbad_orchestration import ApiKeyStore
from mirbad_orchestration.testing import FakeClock
from mirbad_protocol import ModelDefinition
from mirbad_protocol.admin import ApiKeyCreate
from mirbad_router import RouterStats, create_router_app
from mirbad_router.testing import FakeMaintenanceGate, FakeResolver

pytestmark = pytest.mark.anyio


async def test_a_resolution_carries_the_models_context_for_token_reservations(tmp_path: Path) -> None:
    definition = ModelDefinition(id="short", served_name="Short", model_path="s", max_model_len=2048)
    async with running_master(tmp_path) as master:
        await master.services.models.upsert(definition)
        resolution = await master.services.resolver.resolve("short")

    # Without max_tokens, a token-limited key reserves the whole context (mirbad_router's bound).
    assert resolution is not None
    assert (resolution.model_id, resolution.context_tokens) == ("short", 2048)


# ---------------------------------------------------------------- the key check: the router's clock alone


class ReadCountingClock(FakeClock):
    """A fake clock that counts its readings, to show who reads it."""

    def __init__(self, start: datetime) -> None:
        super().__init__(start)
        self.reads = 0

    def __call__(self) -> datetime:
        self.reads += 1
        return super().__call__()


KEY_START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
EXPIRY = KEY_START + timedelta(hours=1)


@pytest.mark.parametrize("required", [True, False], ids=["keys required", "keys optional"])
async def test_a_key_expiring_between_two_requests_is_decided_by_the_routers_clock_alone(
    tmp_path: Path, required: bool
) -> None:
    store_clock = ReadCountingClock(KEY_START)
    store = ApiKeyStore(tmp_path, clock=store_clock)
    key = await store.create(ApiKeyCreate(name="ci", allowed_models=("qwen",), expires_at=EXPIRY))
    await store.set_keys_required(required)
    # The store's clock is far past the expiry and the router's is before it: were the store still
    # deciding, the first request would already be refused (or lose the key's allow-list).
    await store_clock.advance(timedelta(days=1))
    reads_before_requests = store_clock.reads
    router_clock = FakeClock(KEY_START)
    resolver = FakeResolver()
    resolver.add("qwen")
    resolver.add("other")
    app = create_router_app(
        resolver, ApiKeyGate(store), FakeMaintenanceGate(), RouterStats(), now=router_clock
    )
    headers = {"Authorization": f"Bearer {key.secret}"}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://router", headers=headers
    ) as http:
        await router_clock.advance(EXPIRY - KEY_START - timedelta(microseconds=1))
        before = await http.get("/models")
        await router_clock.advance(timedelta(microseconds=1))
        at_expiry = await http.get("/models")

    assert before.status_code == 200
    assert [model["id"] for model in before.json()["data"]] == ["qwen"]  # the key's own allow-list
    if required:
        assert at_expiry.status_code == 401
        error = at_expiry.json()["error"]
        assert error["code"] == "invalid_api_key"
        assert f"expired at {EXPIRY.isoformat()}" in error["message"]
    else:  # keys are optional: the expired key is ignored, with its allow-list
        assert at_expiry.status_code == 200
        assert sorted(model["id"] for model in at_expiry.json()["data"]) == ["other", "qwen"]
    assert store_clock.reads == reads_before_requests  # no request read the store's clock
    # The last use is the router's instant of admission, not the store's time.
    assert (await store.get(key.id)).last_used_at == EXPIRY - timedelta(microseconds=1)


async def test_a_revoked_key_is_no_key_whatever_its_expiry(tmp_path: Path) -> None:
    store = ApiKeyStore(tmp_path, clock=FakeClock(KEY_START))
    key = await store.create(ApiKeyCreate(name="ci", expires_at=EXPIRY))
    await store.revoke(key.id)
    app = create_router_app(
        FakeResolver(), ApiKeyGate(store), FakeMaintenanceGate(), RouterStats(), now=FakeClock(KEY_START)
    )
    headers = {"Authorization": f"Bearer {key.secret}"}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://router", headers=headers
    ) as http:
        answer = await http.get("/models")

    assert answer.status_code == 401
    assert "not valid" in answer.json()["error"]["message"]
    assert (await store.get(key.id)).last_used_at is None
