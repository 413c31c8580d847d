"""The llama.cpp admission estimate: KV cache by cache type, llama.cpp's cell padding, the total."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_orchestration.commandline import (
    COMPUTE_ALLOWANCE_BYTES,
    LLAMACPP_CACHE_TYPES,
    estimate_llamacpp_definition_gib,
    estimate_llamacpp_gib,
    llamacpp_kv_cache_bytes,
    llamacpp_kv_cells,
)
from mirbad_protocol import ExecutableRef, InvalidFieldError, ModelDefinition
from mirbad_protocol.agent import GgufInfo

GIB = 1024**3
# Shaped like Llama 3 8B: 32 layers, 4096 wide, 32 heads of 128, 8 KV heads, 128256 tokens.
LLAMA3_8B = GgufInfo(
    version=3,
    architecture="llama",
    block_count=32,
    embedding_length=4096,
    head_count=32,
    head_count_kv=8,
    vocab_size=128_256,
    size_bytes=int(4.5 * GIB),
)
# One K or V row of one layer and token holds 8 heads x 128 = 1024 elements.
ROW = 1024


@pytest.mark.parametrize(
    ("cache_type", "row_bytes"),
    [
        ("f32", ROW * 4),
        ("f16", ROW * 2),
        ("bf16", ROW * 2),
        ("q8_0", ROW // 32 * 34),
        ("q4_0", ROW // 32 * 18),
        ("q4_1", ROW // 32 * 20),
        ("iq4_nl", ROW // 32 * 18),
        ("q5_0", ROW // 32 * 22),
        ("q5_1", ROW // 32 * 24),
    ],
)
def test_kv_cache_bytes_per_cache_type(cache_type: str, row_bytes: int) -> None:
    cache = llamacpp_kv_cache_bytes(
        LLAMA3_8B, context_tokens=8192, cache_type_k=cache_type, cache_type_v=cache_type
    )
    assert cache == 32 * 8192 * 2 * row_bytes


def test_every_llama_cpp_cache_type_has_a_size() -> None:
    for cache_type in LLAMACPP_CACHE_TYPES:
        assert llamacpp_kv_cache_bytes(LLAMA3_8B, context_tokens=1, cache_type_k=cache_type) > 0


def test_the_well_known_figure_one_gib_for_8k_of_llama3_8b() -> None:
    assert llamacpp_kv_cache_bytes(LLAMA3_8B, context_tokens=8192) == GIB


def test_k_and_v_types_count_separately() -> None:
    mixed = llamacpp_kv_cache_bytes(LLAMA3_8B, context_tokens=100, cache_type_k="q8_0", cache_type_v="f16")
    assert mixed == 32 * 100 * (1088 + 2048)


def test_explicit_head_widths_and_missing_gqa() -> None:
    info = GgufInfo(
        version=3,
        architecture="x",
        block_count=2,
        embedding_length=64,
        head_count=4,
        key_length=24,
        value_length=8,
    )
    # No head_count_kv: every head has its own K and V; rows of 4 x 24 and 4 x 8 elements in f16.
    assert llamacpp_kv_cache_bytes(info, context_tokens=10) == 2 * 10 * (4 * 24 * 2 + 4 * 8 * 2)


@pytest.mark.parametrize(
    ("missing", "field"),
    [
        ({"block_count": None}, "blockCount"),
        ({"head_count": None, "head_count_kv": None}, "headCountKv"),
        ({"embedding_length": None}, "keyLength"),
    ],
)
def test_missing_hyperparameters_name_the_field(missing: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidFieldError) as caught:
        llamacpp_kv_cache_bytes(LLAMA3_8B.model_copy(update=missing), context_tokens=1)
    assert caught.value.field == field


def test_an_unknown_cache_type_is_refused() -> None:
    with pytest.raises(InvalidFieldError, match="fp8") as caught:
        llamacpp_kv_cache_bytes(LLAMA3_8B, context_tokens=1, cache_type_v="fp8")
    assert caught.value.field == "cacheTypeV"


@pytest.mark.parametrize(
    ("ctx_size", "slots", "cells"),
    [
        (256, 1, 256),
        (512, 2, 512),
        (100, 1, 256),  # rounded up to 256
        (300, 2, 512),  # 512 total, 256 a slot
        (1000, 3, 1536),  # 1024 total, 341 a slot rounded to 512
        (16384, 4, 16384),
        (8192 * 16, 16, 8192 * 16),
    ],
)
def test_kv_cells_follow_llama_cpp_padding(ctx_size: int, slots: int, cells: int) -> None:
    assert llamacpp_kv_cells(ctx_size, slots) == cells


def test_estimate_by_hand() -> None:
    logits = 512 * 128_256 * 4
    expected = (int(4.5 * GIB) + GIB + COMPUTE_ALLOWANCE_BYTES + logits) / GIB
    assert estimate_llamacpp_gib(LLAMA3_8B, context_tokens=8192) == pytest.approx(expected)
    assert expected == pytest.approx(5.9946, abs=1e-4)


def test_estimate_with_the_size_of_all_split_files() -> None:
    split = estimate_llamacpp_gib(LLAMA3_8B, context_tokens=8192, file_size_bytes=9 * GIB)
    assert split - estimate_llamacpp_gib(LLAMA3_8B, context_tokens=8192) == pytest.approx(4.5)


def _definition(**changes: Any) -> ModelDefinition:
    fields: dict[str, Any] = {
        "id": "llama3",
        "served_name": "llama3",
        "runtime": "llamacpp",
        "executable": ExecutableRef(name="llama-server", version="b7000"),
        "model_path": "llama3/llama3-8b-q4_k_m.gguf",
        "max_model_len": 2048,
        "max_num_seqs": 4,
    }
    return ModelDefinition.model_validate(fields | changes)


def test_definition_estimate_uses_the_builder_context_and_cache_type() -> None:
    auto = estimate_llamacpp_definition_gib(_definition(), LLAMA3_8B)
    assert auto == pytest.approx(estimate_llamacpp_gib(LLAMA3_8B, context_tokens=8192))
    q8 = estimate_llamacpp_definition_gib(_definition(kv_cache_dtype="q8_0"), LLAMA3_8B)
    assert q8 == pytest.approx(
        estimate_llamacpp_gib(LLAMA3_8B, context_tokens=8192, cache_type_k="q8_0", cache_type_v="q8_0")
    )
    # Owned flags in extraArgs count as llama-server reads them.
    lifted = estimate_llamacpp_definition_gib(
        _definition(extra_args=["-ctk", "q8_0", "-ctv", "q8_0"]), LLAMA3_8B
    )
    assert lifted == pytest.approx(q8)


def test_definition_estimate_pads_each_slot() -> None:
    padded = estimate_llamacpp_definition_gib(_definition(max_model_len=1000, max_num_seqs=3), LLAMA3_8B)
    # --ctx-size 3000 --parallel 3: 3072 in all, 1024 a slot (1000 rounded up to 256s).
    assert padded == pytest.approx(estimate_llamacpp_gib(LLAMA3_8B, context_tokens=3072))


@given(
    small=st.integers(1, 1 << 20), extra=st.integers(1, 1 << 20), cache=st.sampled_from(LLAMACPP_CACHE_TYPES)
)
def test_more_context_never_costs_less(small: int, extra: int, cache: str) -> None:
    less = estimate_llamacpp_gib(LLAMA3_8B, context_tokens=small, cache_type_k=cache, cache_type_v=cache)
    more = estimate_llamacpp_gib(
        LLAMA3_8B, context_tokens=small + extra, cache_type_k=cache, cache_type_v=cache
    )
    assert less < more
    assert less <= estimate_llamacpp_gib(
        LLAMA3_8B, context_tokens=small, cache_type_k="f32", cache_type_v="f32"
    )
