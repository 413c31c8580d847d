"""The admin API's error mapping: each exception's status, code and the subjects its envelope names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from syrupy.assertion import SnapshotAssertion

from mirbad_master._api_errors import error_body, refusal_of
from mirbad_master.exceptions import (
    ApiError,
    LocalNodeError,
    ModelExistsError,
    NodeHasModelsError,
    TooManyAttemptsError,
    WrongPasswordError,
)
from mirbad_orchestration import (
    AgentAdmissionRefusedError,
    AgentLaunchRejectedError,
    AgentProtocolError,
    AgentRequestError,
    AgentStartConflictError,
    DuplicateNodeError,
    DuplicateServedNameError,
    LogStreamError,
    ModelNotOnNodeError,
    NodeConflictError,
    NodeTimeoutError,
    NodeUnreachableError,
    StartLaneBusyError,
    StoreFileError,
    UnknownApiKeyError,
    UnknownModelError,
    UnknownNodeError,
)
from mirbad_protocol import InvalidFieldError
from mirbad_protocol.admin import AdminErrorBody, AdminErrorCode

# One exception of each row of the master's table (and the rows it makes of no table entry).
EXCEPTIONS: dict[str, Exception] = {
    "too_many_attempts": TooManyAttemptsError(30),
    "wrong_password": WrongPasswordError("not signed in"),
    "model_exists": ModelExistsError("qwen"),
    "local_node": LocalNodeError("local", "node 'local' is the master's own agent; it stays"),
    "node_has_models": NodeHasModelsError("gpu-1", "models are placed on node 'gpu-1': 'qwen'"),
    "served_name_taken": DuplicateServedNameError("Qwen3-8B", "qwen"),
    "invalid_field": InvalidFieldError("memoryBudgetGiB", "must be greater than 0"),
    "mismatched_id": ApiError(400, AdminErrorCode.INVALID_REQUEST, "id: 'a' differs from 'b'", field="id"),
    "unknown_model": UnknownModelError("qwen"),
    "no_instance_on_node": ModelNotOnNodeError("local", "qwen", "no such model"),
    "unknown_node": UnknownNodeError("gpu-1"),
    "unknown_key": UnknownApiKeyError("07d14320566f"),
    "admission_refused": AgentAdmissionRefusedError("gpu-1", 409, "admission_refused", "needs 110 GiB"),
    "start_conflict": AgentStartConflictError("gpu-1", 409, "start_conflict", "starting 'gemma'"),
    "node_conflict": NodeConflictError("gpu-1", 409, "whatever", "not now"),
    "node_exists": DuplicateNodeError("gpu-1", "node 'gpu-1' is registered already"),
    "start_lane_busy": StartLaneBusyError("local", "gemma", 5.0),
    "spec_rejected": AgentLaunchRejectedError("gpu-1", 422, "spec_rejected", "no such runtime"),
    "node_unreachable": NodeUnreachableError("gpu-1", "node 'gpu-1' is unreachable: connection refused"),
    "node_timeout": NodeTimeoutError("gpu-1", "node 'gpu-1' did not answer within 10 s"),
    "bad_gateway": AgentProtocolError("gpu-1", "node 'gpu-1' answered unreadably"),
    "log_stream_failed": LogStreamError("gpu-1", "node 'gpu-1': the log file vanished"),
    "node_refused": AgentRequestError("gpu-1", 500, "internal_error", "boom"),
    "storage_error": StoreFileError(Path("/data/nodes.json"), "not JSON"),
    "insufficient_storage": StoreFileError(Path("/data/nodes.json"), "disk full", disk_full=True),
    "unexpected": RuntimeError("boom"),
}


def answered(exc: Exception) -> dict[str, Any]:
    return {"status": refusal_of(exc).status, "body": error_body(exc)}


def test_every_refusal_names_its_subjects(snapshot_json: SnapshotAssertion) -> None:
    assert {name: answered(exc) for name, exc in EXCEPTIONS.items()} == snapshot_json


def test_the_status_is_the_codes_and_the_body_is_the_envelope() -> None:
    for exc in EXCEPTIONS.values():
        refusal = refusal_of(exc)
        error = AdminErrorBody.from_wire(error_body(exc)).error

        assert refusal.status == AdminErrorCode(error.code).http_status
        assert (error.code, error.message, error.field) == (refusal.code, refusal.message, refusal.field)


def test_the_master_fills_the_subjects_it_knows() -> None:
    def error(name: str) -> dict[str, Any]:
        body: dict[str, Any] = error_body(EXCEPTIONS[name])["error"]
        return body

    assert error("unknown_model")["modelId"] == "qwen"
    missing = error("no_instance_on_node")
    assert (missing["nodeId"], missing["modelId"]) == ("local", "qwen")
    assert error("unknown_key")["keyId"] == "07d14320566f"
    for name in ("node_unreachable", "node_timeout", "node_conflict", "admission_refused", "start_lane_busy"):
        assert error(name)["nodeId"] == ("local" if name == "start_lane_busy" else "gpu-1"), name
    assert error("served_name_taken") | {"message": ""} == {
        "code": "served_name_taken",
        "message": "",
        "field": "servedName",
        "servedName": "Qwen3-8B",
        "modelId": "qwen",
    }
    assert error("invalid_field")["field"] == "memoryBudgetGiB"
    assert error("too_many_attempts")["retryAfterS"] == 30
    assert set(error("unexpected")) == {"code", "message"}
