"""The client's error mapping: by code to one class, ids from the envelope's fields, never the message."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_client import (
    AdminApiError,
    AdminAuthError,
    AdmissionRefusedError,
    InvalidRequestError,
    LaunchSpecRejectedError,
    LogFollowError,
    MirbadClientError,
    NodeBadAnswerError,
    NodeExistsError,
    NodeOfflineError,
    NodeRefusedError,
    NodeTimedOutError,
    NoSuchApiKeyError,
    NoSuchModelError,
    NoSuchNodeError,
    ServedNameTakenError,
    StartBlockedError,
    StartRefusedError,
)
from mirbad_client import _calls as calls
from mirbad_client._errors import ErrorAnswer, admin_error, read_refusal
from mirbad_protocol import InvalidFieldError
from mirbad_protocol.admin import AdminError, AdminErrorCode, admin_error_body

# The table of mirbad_client.exceptions and docs/api.md, restated: the mapping must follow the docs.
DOCUMENTED: dict[AdminErrorCode, type[AdminApiError]] = {
    AdminErrorCode.INVALID_REQUEST: InvalidRequestError,
    AdminErrorCode.UNAUTHORIZED: AdminAuthError,
    AdminErrorCode.TOO_MANY_ATTEMPTS: AdminAuthError,
    AdminErrorCode.MODEL_NOT_FOUND: NoSuchModelError,
    AdminErrorCode.NODE_NOT_FOUND: NoSuchNodeError,
    AdminErrorCode.KEY_NOT_FOUND: NoSuchApiKeyError,
    AdminErrorCode.SERVED_NAME_TAKEN: ServedNameTakenError,
    AdminErrorCode.NODE_EXISTS: NodeExistsError,
    AdminErrorCode.NODE_CONFLICT: StartRefusedError,
    AdminErrorCode.ADMISSION_REFUSED: AdmissionRefusedError,
    AdminErrorCode.START_CONFLICT: StartBlockedError,
    AdminErrorCode.START_LANE_BUSY: StartBlockedError,
    AdminErrorCode.SPEC_REJECTED: LaunchSpecRejectedError,
    AdminErrorCode.NODE_REFUSED: NodeRefusedError,
    AdminErrorCode.BAD_GATEWAY: NodeBadAnswerError,
    AdminErrorCode.LOG_STREAM_FAILED: LogFollowError,
    AdminErrorCode.NODE_UNREACHABLE: NodeOfflineError,
    AdminErrorCode.NODE_TIMEOUT: NodeTimedOutError,
}


def refusal(
    status: int, code: str, message: str, *, subject: str = "", retry_after: str | None = None, **ids: Any
) -> ErrorAnswer:
    return ErrorAnswer(status, AdminError(code=code, message=message, **ids), message, subject, retry_after)


def answer(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, json=body, headers=headers, request=httpx.Request("GET", "http://m/api"))


def test_node_conflicts_keep_the_node_and_the_message() -> None:
    message = "node 'gpu-1': busy with something else"
    error = admin_error(refusal(409, "node_conflict", message, node_id="gpu-1"))

    assert type(error) is StartRefusedError
    assert (error.node_id, error.message, error.code, error.status_code) == (
        "gpu-1",
        "busy with something else",
        "node_conflict",
        409,
    )
    assert str(error) == message


def test_a_busy_start_lane_is_a_start_conflict() -> None:
    message = "node 'local' is starting 'qwen'; gave up after 5s"
    error = admin_error(refusal(409, "start_lane_busy", message, node_id="local"))

    assert type(error) is StartBlockedError
    assert error.node_id == "local"


@pytest.mark.parametrize(
    ("code", "raised"), [("bad_gateway", NodeBadAnswerError), ("log_stream_failed", LogFollowError)]
)
def test_bad_gateways_are_node_errors(code: str, raised: type[Exception]) -> None:
    message = "node 'gpu-1' (https://gpu-1:9443) answered unreadably: x"
    error = admin_error(refusal(502, code, message, node_id="gpu-1"))

    assert type(error) is raised
    assert getattr(error, "node_id", None) == "gpu-1"


def test_ids_come_from_the_fields_never_from_the_message() -> None:
    # The message quotes another node, as a message may; only the field says which one it is about.
    misleading = admin_error(refusal(503, "node_unreachable", "node 'gpu-9' is unreachable", node_id="gpu-1"))
    unnamed = admin_error(refusal(503, "node_unreachable", "node 'gpu-9' is unreachable"))

    assert (misleading.node_id, unnamed.node_id) == ("gpu-1", None)
    assert str(misleading) == "node 'gpu-9' is unreachable"


@pytest.mark.parametrize(
    ("code", "raised", "attribute"),
    [
        ("model_not_found", NoSuchModelError, "model_id"),
        ("key_not_found", NoSuchApiKeyError, "key_id"),
        ("node_not_found", NoSuchNodeError, "node_id"),
    ],
)
def test_not_found_names_the_missing_id(code: str, raised: type[Exception], attribute: str) -> None:
    message = "no such thing with id 'other'"
    named = admin_error(refusal(404, code, message, subject="asked", **{attribute: "named"}))
    unnamed = admin_error(refusal(404, code, "node 'local' has no instance of it", subject="asked"))

    assert isinstance(named, raised)
    assert (getattr(named, attribute), getattr(unnamed, attribute)) == ("named", "asked")


def test_a_missing_instance_names_its_node_and_its_model() -> None:
    message = "node 'local' has no instance of model 'qwen'"
    error = admin_error(refusal(404, "model_not_found", message, node_id="local", model_id="qwen"))

    assert isinstance(error, NoSuchModelError)
    assert (error.node_id, error.model_id) == ("local", "qwen")


def test_a_served_name_conflict_reads_the_name_and_its_owner_from_the_fields() -> None:
    fields = {"field": "servedName", "served_name": "a b", "model_id": "x"}
    odd = admin_error(refusal(409, "served_name_taken", "taken", **fields))
    usual = admin_error(
        refusal(409, "served_name_taken", "servedName: 'a b' is already served by model 'x'", **fields)
    )

    for error in (odd, usual):
        assert isinstance(error, ServedNameTakenError)
        assert (error.served_name, error.owner_id, error.field) == ("a b", "x", "servedName")
    assert isinstance(usual, ServedNameTakenError)
    assert isinstance(usual, InvalidFieldError)
    assert usual.reason == "'a b' is already served by model 'x'"


def test_a_400_without_a_field_names_the_document() -> None:
    error = admin_error(refusal(400, "invalid_request", "not valid JSON"))

    assert isinstance(error, InvalidRequestError)
    assert isinstance(error, InvalidFieldError)
    assert (error.field, error.reason) == ("(document)", "not valid JSON")


def test_an_answer_without_an_envelope_is_an_admin_api_error() -> None:
    plain = httpx.Response(500, text="Internal Server Error", request=httpx.Request("GET", "http://m/api"))
    error = admin_error(read_refusal(plain))

    assert type(error) is AdminApiError
    assert (error.status_code, error.code, error.message) == (500, None, "HTTP 500: Internal Server Error")
    assert isinstance(error, MirbadClientError)


def test_a_code_of_a_newer_master_is_an_admin_api_error_with_its_code_and_ids() -> None:
    body = {"error": {"code": "quota_exceeded", "message": "later", "nodeId": "gpu-1", "newerField": 1}}
    error = admin_error(read_refusal(answer(409, body)))

    assert type(error) is AdminApiError
    assert (error.status_code, error.code, error.message) == (409, "quota_exceeded", "later")
    assert error.node_id == "gpu-1"


def test_a_lockout_reads_retry_after_from_the_envelope_then_the_header() -> None:
    enveloped = admin_error(refusal(429, "too_many_attempts", "slow down", retry_after="7", retry_after_s=30))
    headed = admin_error(refusal(429, "too_many_attempts", "slow down", retry_after="7"))
    unreadable = admin_error(refusal(429, "too_many_attempts", "slow down", retry_after="soon"))

    assert isinstance(enveloped, AdminAuthError)
    assert isinstance(headed, AdminAuthError)
    assert isinstance(unreadable, AdminAuthError)
    assert (enveloped.retry_after_s, headed.retry_after_s, unreadable.retry_after_s) == (30, 7, None)


def test_a_success_outside_the_contract_is_an_admin_api_error() -> None:
    request = httpx.Request("GET", "http://m/api/models")
    not_json = httpx.Response(200, text="<html>", request=request)
    not_a_list = httpx.Response(200, json={"models": []}, request=request)

    for outside in (not_json, not_a_list):
        with pytest.raises(AdminApiError, match="outside its contract"):
            calls.finish(calls.models(()), outside)


_ids = st.text(st.characters(codec="utf-8"), min_size=1, max_size=20)


@given(
    code=st.sampled_from(AdminErrorCode),
    message=st.text(max_size=80),
    node_id=st.none() | _ids,
    model_id=st.none() | _ids,
    key_id=_ids,
    field=_ids,
    served_name=_ids,
    retry_after_s=st.integers(min_value=1, max_value=3600),
)
def test_every_code_maps_to_its_documented_class_with_its_subjects(
    code: AdminErrorCode,
    message: str,
    node_id: str | None,
    model_id: str | None,
    key_id: str,
    field: str,
    served_name: str,
    retry_after_s: int,
) -> None:
    # An envelope as the master sends it (its builder, its status for the code).
    if code is AdminErrorCode.SERVED_NAME_TAKEN:
        field = "servedName"
    body = admin_error_body(
        code,
        message,
        field=field,
        node_id=node_id,
        model_id=model_id,
        key_id=key_id,
        served_name=served_name,
        retry_after_s=retry_after_s,
    )
    error = admin_error(read_refusal(answer(code.http_status, body), subject="asked"))

    assert type(error) is DOCUMENTED.get(code, AdminApiError)
    assert (error.status_code, error.code, error.field) == (code.http_status, code.value, field)
    assert str(error) == message
    assert error.node_id == (node_id or ("asked" if code is AdminErrorCode.NODE_NOT_FOUND else None))
    assert error.model_id == (model_id or ("asked" if code is AdminErrorCode.MODEL_NOT_FOUND else None))
    if isinstance(error, NoSuchApiKeyError):
        assert error.key_id == key_id
    if isinstance(error, ServedNameTakenError):
        assert (error.served_name, error.owner_id) == (served_name, model_id or "")
    if isinstance(error, AdminAuthError):
        assert error.retry_after_s == retry_after_s
