"""The download envelopes: their wire form, the kind discriminator, and where a token may appear."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter
from syrupy.assertion import SnapshotAssertion

from mirbad_protocol import InvalidFieldError
from mirbad_protocol.downloads import (
    DownloadFile,
    DownloadJob,
    DownloadList,
    DownloadRequest,
    DownloadSize,
    HuggingFaceDownload,
    OllamaDownload,
    check_download_id,
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


# issue 31 item 12: "$" with re.match let a trailing newline through each of these.
@pytest.mark.parametrize(
    ("model", "body", "field"),
    [
        (HuggingFaceDownload, {"repoId": "a/b\n", "folder": "x"}, "repoId"),
        (HuggingFaceDownload, {"repoId": "a/b", "folder": "x", "revision": "main\n"}, "revision"),
        (OllamaDownload, {"model": "tiny\n", "folder": "x"}, "model"),
        (OllamaDownload, {"model": "tiny:latest\n", "folder": "x"}, "model"),
    ],
)
def test_a_trailing_newline_is_refused_naming_the_field(
    model: type[HuggingFaceDownload | OllamaDownload], body: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidFieldError) as refused:
        model.from_user_input(body)
    assert refused.value.field == field


@given(st.text(max_size=20))
def test_only_the_agents_own_shape_is_a_download_id(text: str) -> None:
    well_formed = re.fullmatch(r"dl-[0-9a-f]{12}", text) is not None
    try:
        check_download_id(text)
    except ValueError:
        assert not well_formed
    else:
        assert well_formed


@pytest.mark.parametrize(
    "download_id", ["dl-0123456789ab\n", "..", "\n", "dl-0123456789ab/..", "DL-0123456789AB"]
)
def test_hostile_download_ids_are_refused(download_id: str) -> None:
    with pytest.raises(ValueError, match="download id"):
        check_download_id(download_id)
    assert check_download_id("dl-0123456789ab") == "dl-0123456789ab"


def test_a_queued_jobs_admin_form_carries_every_documented_field() -> None:
    job = DownloadJob(
        id="dl-1", kind="ollama", source="library/tiny:latest", folder="x", created_at=WHEN, updated_at=WHEN
    )
    full = job.to_full_wire()
    assert (full["state"], full["doneBytes"], full["root"], full["totalBytes"]) == ("queued", 0, 0, 0)
    assert set(full) >= {"revision", "files", "bytesPerSecond", "etaSeconds", "error", "createdAt"}
    assert DownloadList(downloads=[job]).to_full_wire()["downloads"][0]["state"] == "queued"
    # The agent contract keeps omitting defaults, as every agent wire model does.
    assert "state" not in job.to_wire()
    assert DownloadJob.from_wire(job.to_wire()) == DownloadJob.from_wire(full) == job


_NAME_PART = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,10}", fullmatch=True)


@given(_NAME_PART, _NAME_PART, st.sampled_from(["\n", "\r", " ", "\t", "\x00", "\u2028"]))
def test_a_valid_repo_id_with_anything_after_it_is_refused(owner: str, name: str, tail: str) -> None:
    assert HuggingFaceDownload(repo_id=f"{owner}/{name}", folder="x").repo_id == f"{owner}/{name}"
    with pytest.raises(InvalidFieldError):
        HuggingFaceDownload.from_user_input({"repoId": f"{owner}/{name}{tail}", "folder": "x"})
    with pytest.raises(InvalidFieldError):
        HuggingFaceDownload.from_user_input({"repoId": "a/b", "revision": f"{name}{tail}", "folder": "x"})
    with pytest.raises(InvalidFieldError):
        OllamaDownload.from_user_input({"model": f"{name.lower()}{tail}", "folder": "x"})


def test_a_download_size_on_the_wire() -> None:
    size = DownloadSize(revision="c" * 40, total_bytes=10, file_count=2)
    assert size.to_wire() == {"revision": "c" * 40, "totalBytes": 10, "fileCount": 2}
    assert DownloadSize.from_wire(size.to_wire()) == size


@given(total=st.integers(max_value=-1))
def test_a_download_size_is_never_negative(total: int) -> None:
    with pytest.raises(ValueError, match="totalBytes"):
        DownloadSize.from_wire({"revision": "r", "totalBytes": total, "fileCount": 1})
