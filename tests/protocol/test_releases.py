"""Image references as Docker parses them, and a pull's fraction."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion

from mirbad_protocol import InvalidFieldError
from mirbad_protocol.releases import (
    AgentVersion,
    ImageInfo,
    ImagePull,
    ImagePullRequest,
    LayerProgress,
    LlamaServerBinary,
    NodeReleases,
    ReleasesView,
    split_image_reference,
)

_COMPONENT = st.from_regex(r"[a-z0-9]{1,8}(?:[._-][a-z0-9]{1,8}){0,2}", fullmatch=True)
_TAG = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True)
_HOST = st.sampled_from(["", "127.0.0.1:5000/", "registry.example.com/", "localhost:1/", "ghcr.io/"])


@pytest.mark.parametrize(
    ("reference", "parts"),
    [
        ("vllm/vllm-openai:v0.8.5", ("vllm/vllm-openai", "v0.8.5")),
        ("vllm/vllm-openai", ("vllm/vllm-openai", "latest")),
        ("127.0.0.1:5000/mirbad-test-vllm:abc", ("127.0.0.1:5000/mirbad-test-vllm", "abc")),
        ("ubuntu@sha256:" + "a" * 64, ("ubuntu", "sha256:" + "a" * 64)),
        ("nvcr.io/nvidia/vllm:25.01-py3", ("nvcr.io/nvidia/vllm", "25.01-py3")),
    ],
)
def test_references_docker_pulls(reference: str, parts: tuple[str, str]) -> None:
    assert split_image_reference(reference) == parts


@pytest.mark.parametrize(
    "reference",
    [
        "",
        "vllm/X",
        "VLLM",
        "vllm//x",
        "vllm/x:",
        "vllm/x:bad tag",
        "-vllm",
        "vllm/x@sha256:short",
        "a" * 256,
        "x:" + "t" * 129,
    ],
)
def test_references_that_do_not_parse_are_refused_naming_the_field(reference: str) -> None:
    with pytest.raises(InvalidFieldError) as refused:
        ImagePullRequest.from_user_input({"image": reference})
    assert refused.value.field == "image"


@given(host=_HOST, path=st.lists(_COMPONENT, min_size=1, max_size=3), tag=st.none() | _TAG)
def test_every_reference_of_the_grammar_splits_back_into_its_parts(
    host: str, path: list[str], tag: str | None
) -> None:
    name = host + "/".join(path)
    reference = name if tag is None else f"{name}:{tag}"
    assert split_image_reference(reference) == (name, tag or "latest")


def test_a_pull_fraction_is_known_once_a_layer_size_is() -> None:
    now = datetime.now(UTC)
    assert ImagePull(id="p", image="a", state="running", started_at=now).fraction is None
    assert (
        ImagePull(
            id="p", image="a", state="running", started_at=now, current_bytes=5, total_bytes=20
        ).fraction
        == 0.25
    )
    assert ImagePull(id="p", image="a", started_at=now, state="completed").fraction == 1.0


def test_the_release_payloads_on_the_wire(snapshot_json: SnapshotAssertion) -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    build = LlamaServerBinary(
        name="llama-server",
        version="b6123",
        path="/opt/llama/llama-server",
        sha256="ab" * 32,
        reported="6123 (a1b2c3d)",
        built_with="built with cc for x86_64-linux-gnu",
    )
    image = ImageInfo(
        id="sha256:" + "1" * 64, tags=["vllm/vllm-openai:v0.8.5"], size_bytes=9 << 30, created=now
    )
    layer = LayerProgress(id="a0ffb7f4220c", status="Downloading", current_bytes=65536, total_bytes=4195794)
    pull = ImagePull(
        id="pull-1", image="vllm/vllm-openai:v0.8.5", state="running", started_at=now, layers=[layer],
        current_bytes=65536, total_bytes=4195794,
    )  # fmt: skip
    node = NodeReleases(node_id="gpu-1", builds=[build], images=[image], pulls=[pull], can_pull=True)
    view = ReleasesView(
        master_version="0.1.0",
        agents=[AgentVersion(node_id="gpu-1", version="0.2.0", reachable=True, skew="agent 0.2.0 differs")],
        skew_rule="an agent whose major.minor version differs from the master's gets a warning",
    )
    assert {"node": node.to_wire(), "view": view.to_wire()} == snapshot_json
    assert NodeReleases.from_wire({**node.to_wire(), "someFutureField": 1}) == node  # newer peers tolerated
