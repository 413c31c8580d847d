"""The admin API's error codes and envelope: additive subject fields, omitted when absent."""

from __future__ import annotations

from syrupy.assertion import SnapshotAssertion

from mirbad_protocol.admin import AdminErrorBody, AdminErrorCode, admin_error_body


def test_every_code_has_its_status(snapshot_json: SnapshotAssertion) -> None:
    assert {code.value: code.http_status for code in AdminErrorCode} == snapshot_json


def test_the_envelope_names_only_the_subjects_it_knows(snapshot_json: SnapshotAssertion) -> None:
    bare = admin_error_body(AdminErrorCode.INTERNAL_ERROR, "boom")
    full = admin_error_body(
        AdminErrorCode.SERVED_NAME_TAKEN,
        "servedName: 'Qwen3-8B' is already served by model 'qwen'",
        field="servedName",
        node_id="gpu-1",
        model_id="qwen",
        key_id="07d14320566f",
        served_name="Qwen3-8B",
        retry_after_s=30,
    )

    assert bare == {"error": {"code": "internal_error", "message": "boom"}}
    assert {"bare": bare, "full": full} == snapshot_json


def test_a_denied_host_service_names_its_deny_pattern() -> None:
    body = admin_error_body(AdminErrorCode.DENIED, "ssh is a system service", pattern="ssh*")
    assert body == {"error": {"code": "denied", "message": "ssh is a system service", "pattern": "ssh*"}}
    assert AdminErrorBody.from_wire(body).error.pattern == "ssh*"


def test_an_envelope_of_a_newer_master_still_reads() -> None:
    newer = {"error": {"code": "quota_exceeded", "message": "later", "nodeId": "gpu-1", "quota": {"n": 1}}}
    error = AdminErrorBody.from_wire(newer).error

    assert (error.code, error.message) == ("quota_exceeded", "later")
    assert (error.node_id, error.model_id) == ("gpu-1", None)
