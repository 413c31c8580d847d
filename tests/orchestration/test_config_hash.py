"""The config hash: canonical vLLM arguments, stable for an unchanged definition and for raw overrides."""

from __future__ import annotations

import hashlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion
from tests._support.vllm_strategies import EXTRA_ARGS, OTHER_ARGS, TOTAL_GIB, definitions

from mirbad_orchestration.commandline import (
    build_vllm_args,
    canonicalize_vllm_args,
    config_hash,
    normalize_vllm,
)
from mirbad_orchestration.exceptions import UnreadableFlagError
from mirbad_protocol import ModelDefinition, SpeculativeDecoding

IMAGE = "vllm/vllm-openai:v0.11.0"
MODEL = ModelDefinition(
    id="qwen",
    served_name="qwen",
    model_path="Qwen/Qwen3-8B",
    memory_budget_gib=40.0,
    speculative=SpeculativeDecoding(method="mtp", num_speculative_tokens=2),
    cudagraph_mode="FULL",
)


def raw_line(model: ModelDefinition) -> list[str]:
    """The line a launcher that skipped normalization would run: typed flags, then raw extra args."""
    typed_only = model.model_copy(update={"extra_args": []})
    return [*build_vllm_args(typed_only, total_gib=TOTAL_GIB), *model.extra_args]


def test_the_hash_is_sixteen_hex_digits_of_sha256_over_a_json_array() -> None:
    args = ["--model", "/models/é"]
    expected = hashlib.sha256(b'["img","--model","/models/\\u00e9"]').hexdigest()[:16]
    assert config_hash("img", args) == expected
    assert re.fullmatch(r"[0-9a-f]{16}", expected)


def test_golden_hashes(snapshot_json: SnapshotAssertion) -> None:
    argv = build_vllm_args(MODEL, total_gib=80.0)
    assert {"argv": argv, "hash": config_hash(IMAGE, argv)} == snapshot_json


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (("img", ["a b"]), ("img", ["a", "b"])),
        (("img", ["a", "b"]), ("img", ["a,b"])),
        (("img", ["x"]), ("img:x", [])),
        (("img", []), ("img", [""])),
        (("a", ["b"]), ("b", ["a"])),
    ],
)
def test_different_lines_hash_differently(left: tuple[str, list[str]], right: tuple[str, list[str]]) -> None:
    assert config_hash(*left) != config_hash(*right)


def test_a_builder_line_is_canonical() -> None:
    argv = build_vllm_args(MODEL, total_gib=80.0)
    assert canonicalize_vllm_args(argv) == argv


def test_canonicalization_keeps_the_utilization_text() -> None:
    argv = ["--model", "/models/m", "--gpu-memory-utilization", "0.85", "--max_num_seqs=4"]
    canonical = canonicalize_vllm_args(argv)
    assert canonical[canonical.index("--gpu-memory-utilization") + 1] == "0.85"
    assert canonical[canonical.index("--max-num-seqs") + 1] == "4"


def test_a_line_without_utilization_canonicalizes_with_vllms_default() -> None:
    canonical = canonicalize_vllm_args(["vllm", "serve", "/models/m"])
    assert canonical[canonical.index("--gpu-memory-utilization") + 1] == "0.9000"


def test_a_raw_override_hashes_like_the_definition_vllm_ran() -> None:
    raw = MODEL.model_copy(update={"extra_args": ["--speculative-config.num_speculative_tokens=4", "-O3"]})
    ran = MODEL.model_copy(
        update={"speculative": SpeculativeDecoding(num_speculative_tokens=4), "extra_args": ["-O3"]}
    )
    assert config_hash(IMAGE, canonicalize_vllm_args(raw_line(raw))) == config_hash(
        IMAGE, build_vllm_args(ran, total_gib=TOTAL_GIB)
    )


def test_a_changed_setting_changes_the_hash() -> None:
    changed = MODEL.model_copy(update={"max_num_seqs": 32})
    assert config_hash(IMAGE, build_vllm_args(MODEL, total_gib=80.0)) != config_hash(
        IMAGE, build_vllm_args(changed, total_gib=80.0)
    )


def test_an_unreadable_line_is_refused() -> None:
    with pytest.raises(UnreadableFlagError):
        canonicalize_vllm_args(["--model", "/models/m", "--max-num-seqs", "x"])


@settings(max_examples=150, deadline=None)
@given(definitions())
def test_the_hash_is_stable_under_normalization(model: ModelDefinition) -> None:
    built = build_vllm_args(model, total_gib=TOTAL_GIB)
    assert config_hash(model.image, built) == config_hash(
        model.image, build_vllm_args(normalize_vllm(model), total_gib=TOTAL_GIB)
    )
    assert canonicalize_vllm_args(built) == built


@settings(max_examples=150, deadline=None)
@given(definitions())
def test_a_raw_line_canonicalizes_to_the_builder_line(model: ModelDefinition) -> None:
    canonical = canonicalize_vllm_args(raw_line(model))
    assert canonical == build_vllm_args(model, total_gib=TOTAL_GIB)
    assert canonicalize_vllm_args(canonical) == canonical


TYPED_ARGS = st.sampled_from(
    [
        ["--model", "/models/other"],
        ["--served_model_name=alias"],
        ["-q", "fp8"],
        ["--max-model-len", "32k"],
        ["--max-model-len=2048"],
        ["--gpu-memory-utilization", "0.5"],
        ["--gpu-memory-utilization", "2"],
        ["--enable-auto-tool-choice"],
        ["--tool-call-parser", "hermes"],
        ["--reasoning-parser", "qwen3"],
        ["--disable-access-log-for-endpoints", "/health,/metrics"],
        ["--disable-access-log-for-endpoints=/health"],
    ]
)
FOREIGN_LINES = st.tuples(
    st.sampled_from([["vllm", "serve", "/models/m"], ["serve", "--model", "/models/m"], ["--model=/data/m"]]),
    st.lists(st.one_of(TYPED_ARGS, OTHER_ARGS), max_size=8).map(
        lambda pieces: [a for p in pieces for a in p]
    ),
    EXTRA_ARGS,
).map(lambda parts: [*parts[0], *parts[1], *parts[2]])


@settings(max_examples=150, deadline=None)
@given(FOREIGN_LINES)
def test_canonicalization_of_any_line_is_idempotent(argv: list[str]) -> None:
    canonical = canonicalize_vllm_args(argv)
    assert canonicalize_vllm_args(canonical) == canonical
