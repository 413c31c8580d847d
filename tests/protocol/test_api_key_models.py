"""API key wire models: the create body's rules, the listed form, the stored record and usage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion

from mirbad_protocol import InvalidFieldError
from mirbad_protocol.admin import (
    API_KEY_NAME_MAX_LENGTH,
    MAX_ALLOWED_MODELS,
    MAX_KEY_RATE_LIMIT,
    ApiKeyCreate,
    ApiKeyCreated,
    ApiKeyInfo,
    ApiKeyRecord,
    KeyUsage,
)

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
HASH = "ab" * 32


def _refused_field(data: dict[str, Any]) -> str:
    with pytest.raises(InvalidFieldError) as refused:
        ApiKeyCreate.from_wire(data)
    return refused.value.field


# Characters a name may hold: anything printable, no control or line/paragraph separators.
name_chars = st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"))
good_names = st.text(name_chars, min_size=1, max_size=API_KEY_NAME_MAX_LENGTH).filter(
    lambda name: 1 <= len(name.strip()) <= API_KEY_NAME_MAX_LENGTH
)
served_names = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Zs", "Zl", "Zp")), min_size=1, max_size=40
).filter(lambda name: not any(ch.isspace() for ch in name))


@given(name=good_names)
def test_any_printable_name_of_1_to_64_characters_is_accepted_stripped(name: str) -> None:
    request = ApiKeyCreate.from_wire({"name": name})

    assert request.name == name.strip()
    assert ApiKeyCreate.from_wire(request.to_wire()) == request


@given(name=st.text(name_chars, max_size=100))
def test_a_name_is_refused_exactly_when_it_breaks_the_length_rule(name: str) -> None:
    valid = 1 <= len(name.strip()) <= API_KEY_NAME_MAX_LENGTH
    if valid:
        assert ApiKeyCreate.from_wire({"name": name}).name == name.strip()
    else:
        assert _refused_field({"name": name}) == "name"


@given(name=good_names, bad=st.sampled_from(["\n", "\r", "\x00", "\x1b", "\u2028", "\x7f"]))
def test_control_characters_inside_a_name_are_refused(name: str, bad: str) -> None:
    assert _refused_field({"name": "a" + bad + name}) == "name"


def test_outer_white_space_including_a_trailing_newline_is_stripped() -> None:
    assert ApiKeyCreate.from_wire({"name": "\t ci bot \n"}).name == "ci bot"


@pytest.mark.parametrize("field", ["requestsPerMinute", "tokensPerMinute"])
@given(value=st.integers(-(2**40), 2**40))
def test_limits_are_positive_integers(field: str, value: int) -> None:
    if value > 0:
        assert ApiKeyCreate.from_wire({"name": "k", field: value}).to_wire()[field] == value
    else:
        assert _refused_field({"name": "k", field: value}) == field


@pytest.mark.parametrize("field", ["requestsPerMinute", "tokensPerMinute"])
@pytest.mark.parametrize("value", [True, 1.5, 60.0, "60", [], {}])
def test_limits_are_never_coerced(field: str, value: object) -> None:
    assert _refused_field({"name": "k", field: value}) == field


def test_null_limits_mean_unlimited() -> None:
    request = ApiKeyCreate.from_wire({"name": "k", "requestsPerMinute": None, "tokensPerMinute": None})

    assert request.requests_per_minute is None
    assert request.tokens_per_minute is None


@given(models=st.lists(served_names, max_size=20))
def test_allowed_models_keep_the_first_spelling_of_each_name(models: list[str]) -> None:
    request = ApiKeyCreate.from_wire({"name": "k", "allowedModels": models})

    folded = [name.casefold() for name in request.allowed_models]
    assert len(folded) == len(set(folded))
    assert {name.casefold() for name in models} == set(folded)
    assert all(name in models for name in request.allowed_models)
    assert ApiKeyCreate.from_wire(request.to_wire()) == request


@pytest.mark.parametrize("models", [[""], ["two words"], ["x" * 201], ["ok", " "]])
def test_allowed_models_must_be_served_names(models: list[str]) -> None:
    assert _refused_field({"name": "k", "allowedModels": models}).startswith("allowedModels")


def test_an_allow_list_has_a_bounded_length() -> None:
    models = [f"model-{index}" for index in range(MAX_ALLOWED_MODELS + 1)]

    assert _refused_field({"name": "k", "allowedModels": models}) == "allowedModels"


def test_an_expiry_needs_a_time_zone_and_is_kept_in_utc() -> None:
    assert _refused_field({"name": "k", "expiresAt": "2030-01-01T00:00:00"}) == "expiresAt"

    request = ApiKeyCreate.from_wire({"name": "k", "expiresAt": "2030-01-01T02:00:00+02:00"})

    assert request.expires_at == datetime(2030, 1, 1, tzinfo=UTC)
    assert request.expires_at is not None
    assert request.expires_at.tzinfo == UTC


@given(offset=st.integers(-(10**9), 10**9))
def test_an_expiry_must_be_after_now(offset: int) -> None:
    request = ApiKeyCreate(name="k", expires_at=NOW + timedelta(seconds=offset))

    if offset > 0:
        request.check_expiry(NOW)
    else:
        with pytest.raises(InvalidFieldError) as refused:
            request.check_expiry(NOW)
        assert refused.value.field == "expiresAt"


def test_no_expiry_never_expires() -> None:
    ApiKeyCreate(name="k").check_expiry(datetime.max.replace(tzinfo=UTC))


def test_unknown_fields_are_ignored() -> None:
    assert ApiKeyCreate.from_wire({"name": "k", "colour": "blue"}) == ApiKeyCreate(name="k")


def _info(**changes: Any) -> ApiKeyInfo:
    return ApiKeyInfo(id="0a1b2c3d4e5f", name="ci", prefix="mb-AbCdEf", created_at=NOW, **changes)


def test_an_empty_allow_list_allows_every_model_and_a_list_compares_case_insensitively() -> None:
    assert _info().allows_model("anything")
    restricted = _info(allowed_models=("Qwen3-8B",))

    assert restricted.allows_model("qwen3-8b")
    assert not restricted.allows_model("llama")


def test_a_key_state_follows_revocation_then_expiry() -> None:
    assert _info().state(NOW) == "active"
    expiring = _info(expires_at=NOW + timedelta(hours=1))
    assert expiring.state(NOW + timedelta(minutes=59)) == "active"
    assert expiring.state(NOW + timedelta(hours=1)) == "expired"
    revoked = _info(expires_at=NOW + timedelta(hours=1), revoked_at=NOW)
    assert revoked.state(NOW + timedelta(days=1)) == "revoked"


def test_the_secret_stays_out_of_repr() -> None:
    created = ApiKeyCreated(**_info().model_dump(), secret="mb-very-secret")

    assert "very-secret" not in repr(created)
    assert created.to_wire()["secret"] == "mb-very-secret"


def test_a_record_lists_without_its_hash() -> None:
    record = ApiKeyRecord(
        id="0a1b2c3d4e5f", name="ci", prefix="mb-AbCdEf", secret_sha256=HASH, created_at=NOW
    )

    info = record.info(last_used_at=NOW)

    assert HASH not in str(info.to_wire())
    assert info == _info(last_used_at=NOW)


@pytest.mark.parametrize("digest", ["AB" * 32, "ab" * 31, "zz" * 32, ""])
def test_a_record_hash_is_64_lowercase_hex(digest: str) -> None:
    data = {"id": "k1", "name": "ci", "prefix": "mb-x", "secretSha256": digest, "createdAt": NOW.isoformat()}

    with pytest.raises(InvalidFieldError) as refused:
        ApiKeyRecord.from_wire(data)
    assert refused.value.field == "secretSha256"


def test_usage_counts_are_non_negative() -> None:
    usage = KeyUsage(key_id="k1", served_name="qwen", prompt_tokens=10, completion_tokens=5, requests=2)

    assert usage.total_tokens == 15
    with pytest.raises(InvalidFieldError) as refused:
        KeyUsage.from_wire(
            {"keyId": "k1", "servedName": "qwen", "promptTokens": -1, "completionTokens": 0, "requests": 1}
        )
    assert refused.value.field == "promptTokens"


def test_wire_shapes(snapshot_json: SnapshotAssertion) -> None:
    plus_two = timezone(timedelta(hours=2))
    full = {
        "name": "  nightly batch ",
        "allowedModels": ["Qwen3-8B", "qwen3-8b", "llama-3.1-8b"],
        "expiresAt": datetime(2030, 1, 1, 2, 0, tzinfo=plus_two).isoformat(),
        "requestsPerMinute": 60,
        "tokensPerMinute": 100_000,
    }
    info = _info(allowed_models=("Qwen3-8B",), expires_at=NOW + timedelta(days=30), last_used_at=NOW)
    record = ApiKeyRecord(
        id="0a1b2c3d4e5f", name="ci", prefix="mb-AbCdEf", secret_sha256=HASH, created_at=NOW
    )

    assert {
        "createFull": ApiKeyCreate.from_wire(full).to_wire(),
        "createMinimal": ApiKeyCreate.from_wire({"name": "laptop"}).to_wire(),
        "info": info.to_wire(),
        "created": ApiKeyCreated(**_info().model_dump(), secret="mb-<secret>").to_wire(),
        "record": record.to_wire(),
        "usage": KeyUsage(
            key_id="0a1b2c3d4e5f", served_name="qwen", prompt_tokens=7, completion_tokens=0, requests=1
        ).to_wire(),
    } == snapshot_json


@pytest.mark.parametrize("expires_at", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_an_expiry_beyond_the_calendar_in_utc_names_the_field(expires_at: str) -> None:
    # Converting to UTC moves these past year 1 or 9999, which datetime cannot hold (was an OverflowError).
    with pytest.raises(InvalidFieldError) as caught:
        ApiKeyCreate.from_wire({"name": "ci", "expiresAt": expires_at})

    assert caught.value.field == "expiresAt"


def test_a_person_sets_rate_limits_up_to_the_user_input_limit_and_stored_keys_load_beyond() -> None:
    over = {"name": "k", "requestsPerMinute": MAX_KEY_RATE_LIMIT + 1}

    with pytest.raises(InvalidFieldError) as refused:
        ApiKeyCreate.from_user_input(over)
    assert refused.value.field == "requestsPerMinute"
    assert ApiKeyCreate.from_wire(over).requests_per_minute == MAX_KEY_RATE_LIMIT + 1
