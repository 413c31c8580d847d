"""The download envelopes: their wire form, the kind discriminator, and where a token may appear."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import TypeAdapter
from syrupy.assertion import SnapshotAssertion

from mirbad_protocol import (
    DownloadFile,
    DownloadJob,
    DownloadRequest,
    HuggingFaceDownload,
    InvalidFieldError,
    OllamaDownload,
)

WHEN = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
REQUEST = TypeAdapter(DownloadRequest)


def test_the_requests_and_a_job_on_the_wire(snapshot_json: SnapshotAssertion) -> None:
    job = DownloadJob(
        id="dl-1",
        kind="huggingface",
        source="mirbad/tiny@main",
        revision="c" * 40,
        folder="tiny",
        state="running",
        files=[DownloadFile(path="w.gguf", size_bytes=10, done_bytes=4, sha256="a" * 64)],
        total_bytes=10,
        done_bytes=4,
        bytes_per_second=2.0,
        eta_seconds=3.0,
        created_at=WHEN,
        updated_at=WHEN,
    )
    payloads = {
        "huggingface": HuggingFaceDownload(repo_id="mirbad/tiny", folder="tiny", allow_patterns=["*.gguf"]),
        "ollama": OllamaDownload(model="qwen3:0.6b", folder="qwen3"),
        "job": job,
    }
    assert {name: model.to_wire() for name, model in payloads.items()} == snapshot_json


def test_the_kind_picks_the_variant() -> None:
    assert isinstance(
        REQUEST.validate_python({"kind": "ollama", "model": "x", "folder": "x"}), OllamaDownload
    )
    hf = REQUEST.validate_python({"kind": "huggingface", "repoId": "a/b", "folder": "x"})
    assert isinstance(hf, HuggingFaceDownload)
    assert hf.source == "a/b@main"
    assert OllamaDownload(model="user/m:v1", folder="x").source == "user/m:v1"
    assert OllamaDownload(model="m", folder="x").source == "library/m:latest"


def test_a_token_travels_on_the_wire_but_never_in_repr_or_str() -> None:
    request = HuggingFaceDownload(repo_id="a/b", folder="x", token="hf_secret")
    assert request.to_wire()["token"] == "hf_secret"  # the master forwards it to the agent
    assert "hf_secret" not in repr(request)
    assert "hf_secret" not in str(request)
    assert "token" not in DownloadJob.model_fields


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"repoId": "a", "folder": "x"}, "repoId"),
        ({"repoId": "a/b/c", "folder": "x"}, "repoId"),
        ({"repoId": "a/..", "folder": "x"}, "repoId"),
        ({"repoId": "a/b", "folder": "x/y"}, "folder"),
        ({"repoId": "a/b", "folder": ".hidden"}, "folder"),
        ({"repoId": "a/b", "folder": "x", "revision": "../main"}, "revision"),
        ({"repoId": "a/b", "folder": "x", "root": -1}, "root"),
        ({"repoId": "a/b", "folder": "x", "allowPattern": ["*"]}, "allowPattern"),
    ],
)
def test_bad_user_input_names_the_field(body: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidFieldError) as refused:
        HuggingFaceDownload.from_user_input({"kind": "huggingface", **body})
    assert refused.value.field == field
