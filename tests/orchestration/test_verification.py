"""The /v1 API-key lookup, ``find_api_key``: a bearer secret in, its stored key (whatever its state) out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_orchestration.keys import find_api_key, secret_sha256
from mirbad_protocol.admin import ApiKeyRecord

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _record(key_id: str, secret: str, **changes: object) -> ApiKeyRecord:
    fields: dict[str, object] = {
        "id": key_id,
        "name": f"key {key_id}",
        "prefix": "mb-abcdef",
        "secret_sha256": secret_sha256(secret),
        "created_at": NOW - timedelta(days=1),
    }
    return ApiKeyRecord.model_validate({**fields, **changes})


SECRETS = st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=5, unique=True)


@given(secrets=SECRETS, guess=st.text(max_size=40))
def test_a_secret_finds_its_own_key_and_nothing_else_finds_any(secrets: list[str], guess: str) -> None:
    records = [_record(f"k{index}", secret) for index, secret in enumerate(secrets)]
    for index, secret in enumerate(secrets):
        assert find_api_key(records, secret) == records[index]
    if guess not in secrets:
        assert find_api_key(records, guess) is None


@pytest.mark.parametrize(
    "state",
    [
        {"revoked_at": NOW - timedelta(hours=1), "expires_at": NOW - timedelta(hours=2)},
        {"expires_at": NOW - timedelta(microseconds=1)},
    ],
    ids=["revoked", "expired"],
)
def test_a_revoked_or_expired_key_is_found_as_it_stands(state: dict[str, object]) -> None:
    # The lookup decides nothing: the gate drops a revoked key, the router alone decides expiry.
    record = _record("k1", "s1", **state)
    assert find_api_key([record], "s1") == record
