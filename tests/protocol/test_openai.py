"""The OpenAI error shape."""

from __future__ import annotations

from syrupy.assertion import SnapshotAssertion

from mirbad_protocol.openai import OpenAIErrorBody, openai_error


def test_model_not_found_shape(snapshot_json: SnapshotAssertion) -> None:
    body = openai_error("The model 'x' does not exist", code="model_not_found")
    assert body == snapshot_json
    assert body["error"]["type"] == "invalid_request_error"
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert OpenAIErrorBody.model_validate(body).error.code == "model_not_found"
