"""The admin client's error mapping, for the refusals an in-process master cannot easily be made to send."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from mirbad_client import (
    AdminApiError,
    AdminAuthError,
    InvalidRequestError,
    LogFollowError,
    MirbadClientError,
    NodeBadAnswerError,
    NoSuchApiKeyError,
    NoSuchModelError,
    NoSuchNodeError,
    ServedNameTakenError,
    StartBlockedError,
    StartRefusedError,
)
from mirbad_client import _calls as calls
from mirbad_client._errors import Refusal, admin_error, read_refusal
from mirbad_client._streams import LogEvents
from mirbad_protocol import InvalidFieldError


def test_node_conflicts_keep_the_node_and_the_message() -> None:
    message = "node 'gpu-1': busy with something else"
    error = admin_error(Refusal(409, "node_conflict", message))

    assert type(error) is StartRefusedError
    assert (error.node_id, error.message, error.code, error.status_code) == (
        "gpu-1",
        "busy with something else",
        "node_conflict",
        409,
    )
    assert str(error) == message


def test_a_busy_start_lane_is_a_start_conflict() -> None:
    error = admin_error(Refusal(409, "start_lane_busy", "node 'local' is starting 'qwen'; gave up after 5s"))

    assert type(error) is StartBlockedError
    assert error.node_id == "local"


@pytest.mark.parametrize(
    ("code", "raised"), [("bad_gateway", NodeBadAnswerError), ("log_stream_failed", LogFollowError)]
)
def test_bad_gateways_are_node_errors(code: str, raised: type[Exception]) -> None:
    error = admin_error(Refusal(502, code, "node 'gpu-1' (https://gpu-1:9443) answered unreadably: x"))

    assert type(error) is raised
    assert getattr(error, "node_id", None) == "gpu-1"


@pytest.mark.parametrize(
    ("code", "raised", "attribute"),
    [
        ("model_not_found", NoSuchModelError, "model_id"),
        ("key_not_found", NoSuchApiKeyError, "key_id"),
        ("node_not_found", NoSuchNodeError, "node_id"),
    ],
)
def test_not_found_names_the_missing_id(code: str, raised: type[Exception], attribute: str) -> None:
    named = admin_error(Refusal(404, code, "no such thing with id 'named'", subject="asked"))
    unnamed = admin_error(Refusal(404, code, "node 'local' has no instance of it", subject="asked"))

    assert isinstance(named, raised)
    assert (getattr(named, attribute), getattr(unnamed, attribute)) == ("named", "asked")


def test_a_served_name_conflict_without_the_usual_message_is_still_a_409() -> None:
    odd = admin_error(Refusal(409, "served_name_taken", "taken", field="servedName"))
    usual = admin_error(Refusal(409, "served_name_taken", "servedName: 'a b' is already served by model 'x'"))

    assert type(odd) is AdminApiError
    assert isinstance(usual, ServedNameTakenError)
    assert (usual.served_name, usual.owner_id) == ("a b", "x")


def test_a_400_without_a_field_names_the_document() -> None:
    error = admin_error(Refusal(400, "invalid_request", "not valid JSON"))

    assert isinstance(error, InvalidRequestError)
    assert isinstance(error, InvalidFieldError)
    assert (error.field, error.reason) == ("(document)", "not valid JSON")


def test_an_answer_without_an_envelope_is_an_admin_api_error() -> None:
    answer = httpx.Response(500, text="Internal Server Error", request=httpx.Request("GET", "http://m/api"))
    error = admin_error(read_refusal(answer))

    assert type(error) is AdminApiError
    assert (error.status_code, error.code, error.message) == (500, None, "HTTP 500: Internal Server Error")
    assert isinstance(error, MirbadClientError)


def test_a_lockout_without_a_readable_retry_after_has_none() -> None:
    error = admin_error(Refusal(429, "too_many_attempts", "slow down", retry_after="soon"))

    assert isinstance(error, AdminAuthError)
    assert error.retry_after_s is None


def test_a_success_outside_the_contract_is_an_admin_api_error() -> None:
    request = httpx.Request("GET", "http://m/api/models")
    not_json = httpx.Response(200, text="<html>", request=request)
    not_a_list = httpx.Response(200, json={"models": []}, request=request)

    for answer in (not_json, not_a_list):
        with pytest.raises(AdminApiError, match="outside its contract"):
            calls.finish(calls.models(()), answer)


STREAM = [
    *(": keep-alive", ""),
    *("data: first", "data: second", ""),
    *("data:  indented", ""),
    *("data: ", ""),
    *("event: newer", "data: ignored", ""),
    *("event: end", "data: exited", ""),
    *("data: after the end", ""),
]


def test_log_events_join_data_lines_keep_empty_lines_and_skip_the_rest() -> None:
    events = LogEvents()

    assert list(events.read(STREAM)) == ["first\nsecond", " indented", ""]
    assert events.ended


def test_log_events_stop_at_the_limit_without_reading_on() -> None:
    seen: list[str] = []

    def texts() -> Iterator[str]:
        for text in STREAM:
            seen.append(text)
            yield text

    assert list(LogEvents(2).read(texts())) == ["first\nsecond", " indented"]
    assert seen[-2:] == ["data:  indented", ""]  # nothing read after the second line
    assert list(LogEvents(0).read(texts())) == []


def test_an_error_event_ends_the_stream_with_the_masters_reason() -> None:
    events = LogEvents()
    lines = events.read(["data: one", "", "event: error", "data: node 'gpu-1' stopped answering", ""])

    assert next(lines) == "one"
    with pytest.raises(LogFollowError) as broken:
        next(lines)
    assert broken.value.node_id == "gpu-1"
    assert events.ended
