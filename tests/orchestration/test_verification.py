"""The /v1 API-key check, ``verify_api_key``: a bearer secret in, its stored key or a refusal out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_orchestration.exceptions import ApiKeyExpiredError, ApiKeyRevokedError
from mirbad_orchestration.keys import secret_sha256, verify_api_key
from mirbad_protocol import ApiKeyRecord

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
        assert verify_api_key(records, secret, NOW) == records[index]
    if guess not in secrets:
        assert verify_api_key(records, guess, NOW) is None


def test_a_revoked_key_is_refused_even_before_its_expiry_is_looked_at() -> None:
    record = _record("k1", "s1", revoked_at=NOW - timedelta(hours=1), expires_at=NOW - timedelta(hours=2))
    with pytest.raises(ApiKeyRevokedError):
        verify_api_key([record], "s1", NOW)


def test_a_key_is_refused_from_the_instant_it_expires() -> None:
    record = _record("k1", "s1", expires_at=NOW)
    assert verify_api_key([record], "s1", NOW - timedelta(microseconds=1)) == record
    with pytest.raises(ApiKeyExpiredError):
        verify_api_key([record], "s1", NOW)
