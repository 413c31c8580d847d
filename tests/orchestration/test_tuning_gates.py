"""The preset search's gates, decided without measuring: MTP, drafts, Mamba, KV, seqs, batched tokens."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_orchestration.tuning import (
    BATCHED_TOKENS,
    MAX_NUM_SEQS,
    MTP_DEPTHS,
    VLLM_MTP_ARCHITECTURES,
    architecture_base,
    batched_tokens_gate,
    draft_depth_gate,
    estimated_parameters_b,
    is_mamba_hybrid,
    kv_gate,
    max_num_seqs_gate,
    mtp_architecture,
    mtp_gate,
    prefix_pairs,
    weights_format,
)
from mirbad_protocol import ModelDefinition, SpeculativeDecoding

SAVED = ModelDefinition(id="m", served_name="m", model_path="m", max_model_len=16384)
QWEN_MTP = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"],
    "text_config": {"mtp_num_hidden_layers": 1},
}
SAVED_MTP = SAVED.model_copy(
    update={"speculative": SpeculativeDecoding(method="mtp", num_speculative_tokens=2)}
)
DRAFTED = SAVED.model_copy(
    update={
        "speculative": SpeculativeDecoding(method="dflash", model="z-lab/drafter", num_speculative_tokens=5)
    }
)


def test_the_architecture_base_name_drops_the_head_suffix() -> None:
    assert architecture_base("Qwen3_5MoeForConditionalGeneration") == "Qwen3_5Moe"
    assert architecture_base("DeepseekV3ForCausalLM") == "DeepseekV3"
    assert architecture_base("Mamba") == "Mamba"


def test_mtp_needs_layers_and_an_architecture_the_image_registers() -> None:
    assert mtp_gate(QWEN_MTP, ["Qwen3_5MoeMTP"], SAVED).values == MTP_DEPTHS
    refused = mtp_gate(QWEN_MTP, ["DeepseekV3MTP"], SAVED)
    assert (refused.values, refused.note) == ((), "MTP not tried: the image does not register Qwen3_5MoeMTP")
    no_layers = mtp_gate({"architectures": ["Qwen3_5MoeForConditionalGeneration"]}, ["Qwen3_5MoeMTP"], SAVED)
    assert no_layers.values == ()
    assert no_layers.note is not None
    assert "no MTP layers" in no_layers.note


def test_without_an_image_list_the_pinned_vllms_mtp_architectures_decide() -> None:
    # No saved MTP config needed: vLLM 0.32.0 registers Qwen3_5MoeMTP.
    assert mtp_gate(QWEN_MTP, [], SAVED).values == MTP_DEPTHS
    deepseek = {
        "model_type": "deepseek_v3",
        "architectures": ["DeepseekV3ForCausalLM"],
        "num_nextn_predict_layers": 1,
    }
    assert mtp_architecture(deepseek) == "DeepSeekMTPModel"
    assert mtp_gate(deepseek, [], SAVED).values == MTP_DEPTHS
    llama = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "mtp_num_hidden_layers": 1}
    refused = mtp_gate(llama, [], SAVED)
    assert (refused.values, refused.note) == ((), "MTP not tried: vLLM 0.32.0 does not register LlamaMTP")
    # The node's image may be newer than the pinned list: a saved MTP config is proof it runs there.
    assert mtp_gate(llama, [], SAVED_MTP).values == MTP_DEPTHS
    # An image's own list is the last word.
    assert mtp_gate(llama, ["LlamaMTP"], SAVED).values == MTP_DEPTHS
    assert mtp_gate(llama, ["Qwen3NextMTP"], SAVED_MTP).values == ()


@pytest.mark.parametrize(
    ("config", "architecture"),
    [
        ({"model_type": "deepseek_v32"}, "DeepseekV32MTPModel"),
        ({"model_type": "glm_moe_dsa"}, "DeepseekV32MTPModel"),
        ({"model_type": "qwen3_next"}, "Qwen3NextMTP"),
        ({"text_config": {"model_type": "qwen3_5_moe_text"}}, "Qwen3_5MoeMTP"),
        ({"model_type": "nemotron_h"}, "NemotronHMTPModel"),
        ({"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe"}, "Glm4MoeMTPModel"),
        ({"architectures": ["MiMoV2FlashForCausalLM"]}, "MiMoV2MTPModel"),
        ({"model_type": "deepseek_v41"}, None),  # V4.1 ships no classic MTP draft
        ({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, None),
    ],
)
def test_the_mtp_architecture_is_vllms_rewrite_of_the_checkpoint(
    config: dict[str, Any], architecture: str | None
) -> None:
    assert mtp_architecture(config) == architecture
    assert architecture is None or architecture in VLLM_MTP_ARCHITECTURES


_NAMES = st.from_regex(r"[A-Z][A-Za-z0-9_]{0,20}", fullmatch=True)
_SUFFIXES = st.sampled_from(["ForCausalLM", "ForConditionalGeneration", "Model", ""])


@given(_NAMES, _SUFFIXES, st.integers(min_value=-2, max_value=4), st.booleans())
def test_mtp_is_tried_exactly_with_layers_and_a_registered_family(
    base: str, suffix: str, layers: int, registered: bool
) -> None:
    config = {"architectures": [base + suffix], "num_nextn_predict_layers": layers}
    family = architecture_base(base + suffix) + "MTP"
    verdict = mtp_gate(config, [family] if registered else ["NoSuchMTP"], SAVED_MTP)
    assert verdict.values == (MTP_DEPTHS if layers > 0 and registered else ())
    assert (verdict.note is None) == bool(verdict.values)


_KNOWN_TYPES = {
    "qwen3_next": "Qwen3NextMTP",
    "deepseek_v3": "DeepSeekMTPModel",
    "step3p7": "Step3p5MTP",
    "hy_v4": "HYV4MTPModel",
}


@given(st.sampled_from(sorted(_KNOWN_TYPES)), st.lists(st.booleans(), min_size=12, max_size=12), st.text())
def test_a_model_type_is_matched_in_any_case_and_an_unknown_one_is_none(
    model_type: str, upper: list[bool], other: str
) -> None:
    spelled = "".join(c.upper() if up else c for c, up in zip(model_type, upper, strict=False))
    assert mtp_architecture({"model_type": spelled}) == _KNOWN_TYPES[model_type]
    assert mtp_architecture({"text_config": {"model_type": spelled}}) == _KNOWN_TYPES[model_type]
    found = mtp_architecture({"model_type": other})
    assert found is None or found in VLLM_MTP_ARCHITECTURES


def test_draft_depths_are_capped_by_the_drafters_block_size() -> None:
    assert draft_depth_gate(DRAFTED, {"block_size": 8}).values == (3, 5, 7)
    assert draft_depth_gate(DRAFTED, {"dflash_config": {"block_size": 16}}).values == (3, 5, 7, 11)
    unknown = draft_depth_gate(DRAFTED, {})
    assert unknown.values == (5,)
    assert draft_depth_gate(SAVED, {"block_size": 16}).values == ()
    assert draft_depth_gate(SAVED_MTP, {"block_size": 16}).values == ()


@given(st.integers(min_value=1, max_value=20), st.integers(min_value=1, max_value=40))
def test_no_draft_depth_is_over_the_block_size(saved_depth: int, block: int) -> None:
    saved = DRAFTED.model_copy(
        update={
            "speculative": SpeculativeDecoding(method="eagle", model="d", num_speculative_tokens=saved_depth)
        }
    )
    verdict = draft_depth_gate(saved, {"block_size": block})
    assert all(0 < depth <= block for depth in verdict.values)
    assert list(verdict.values) == sorted(set(verdict.values))
    assert (saved_depth in verdict.values) == (saved_depth <= block)


def test_mamba_hybrids_pair_prefix_caching_with_the_mamba_cache_mode() -> None:
    configs: list[dict[str, object]] = [
        {"hybrid_override_pattern": "M-M*"},
        {"layers_block_type": ["mamba", "attention"]},
        {"mamba_d_state": 128},
        {"ssm_cfg": {}},
        {"architectures": ["NemotronHForCausalLM"]},
        {"architectures": ["FalconMambaForCausalLM"]},
    ]
    for config in configs:
        assert is_mamba_hybrid(config), config
        assert prefix_pairs(config) == ((True, "align"), (False, "none"))
    dense = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32}
    assert not is_mamba_hybrid(dense)
    assert prefix_pairs(dense) == ((True, None), (False, None))


def test_kv_auto_only_when_the_memory_gate_admits_it() -> None:
    assert kv_gate(True).values == ("fp8", "auto")
    assert kv_gate(False).values == ("fp8",)
    assert kv_gate(None).values == ("fp8",)
    assert kv_gate(None).note is not None


def test_dense_models_over_20b_also_try_one_and_two_seqs() -> None:
    params = estimated_parameters_b(64 * 10**9, "bf16")
    assert params == 32.0
    assert max_num_seqs_gate({}, params).values == (1, 2, *MAX_NUM_SEQS)
    assert max_num_seqs_gate({}, estimated_parameters_b(16 * 10**9, "bf16")).values == MAX_NUM_SEQS
    # The same size as a MoE model: its active parameters are far fewer, so no small seqs.
    assert max_num_seqs_gate({"num_experts": 128}, params).values == MAX_NUM_SEQS
    assert max_num_seqs_gate({}, None).values == MAX_NUM_SEQS
    assert estimated_parameters_b(None, "bf16") is None
    assert estimated_parameters_b(10, "no-such-format") is None


@given(st.integers(min_value=1, max_value=2**40), st.sampled_from(["bf16", "fp8", "awq", "nvfp4"]))
def test_a_smaller_format_means_more_parameters_for_the_same_bytes(size: int, fmt: str) -> None:
    wide = estimated_parameters_b(size, "bf16")
    assert wide is not None
    narrow = estimated_parameters_b(size, fmt)
    assert narrow is not None
    assert narrow >= wide


def test_batched_tokens_include_the_saved_value() -> None:
    saved = SAVED.model_copy(update={"max_num_batched_tokens": 6144})
    assert batched_tokens_gate(saved).values == (2048, 4096, 6144, 8192, 16384, 32768)
    assert batched_tokens_gate(SAVED).values == (None, *BATCHED_TOKENS)


def test_without_chunked_prefill_values_below_the_max_model_len_are_dropped() -> None:
    saved = SAVED.model_copy(
        update={"max_num_batched_tokens": 4096, "extra_args": ["--no-enable-chunked-prefill"]}
    )
    verdict = batched_tokens_gate(saved)
    assert verdict.values == (4096, 16384, 32768)  # the saved value always stays
    assert verdict.note is not None
    assert "[2048, 8192]" in verdict.note


@given(
    st.integers(min_value=256, max_value=131072),
    st.one_of(st.none(), st.integers(min_value=256, max_value=65536)),
    st.booleans(),
)
def test_the_batched_tokens_gate_keeps_the_saved_value_and_the_rule(
    max_len: int, saved_tokens: int | None, chunked_off: bool
) -> None:
    saved = SAVED.model_copy(
        update={
            "max_model_len": max_len,
            "max_num_batched_tokens": saved_tokens,
            "extra_args": ["--no-enable-chunked-prefill"] if chunked_off else [],
        }
    )
    values = batched_tokens_gate(saved).values
    assert saved_tokens in values
    if chunked_off:
        assert all(value is None or value >= max_len or value == saved_tokens for value in values)
    else:
        assert set(BATCHED_TOKENS) <= set(values)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"torch_dtype": "bfloat16"}, "bf16"),
        ({"text_config": {"dtype": "float16"}}, "fp16"),
        ({}, None),
        ({"quantization_config": {"quant_method": "fp8"}, "torch_dtype": "bfloat16"}, "fp8"),
        ({"quantization_config": {"quant_method": "awq", "bits": 4}}, "awq"),
        ({"quantization_config": {"quant_method": "gptq_marlin"}}, "gptq"),
        ({"quantization_config": {"quant_method": "mxfp4"}}, "mxfp4"),
        ({"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}, "nvfp4"),
        ({"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}}, "int4"),
        (
            {
                "quantization_config": {
                    "quant_method": "compressed-tensors",
                    "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}},
                }
            },
            "fp8",
        ),
        (
            {
                "quantization_config": {
                    "quant_method": "compressed-tensors",
                    "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int"}}},
                }
            },
            "int4",
        ),
        ({"quantization_config": {"quant_method": "hqq"}}, "hqq"),
    ],
)
def test_the_weights_format_comes_from_the_quantization_config_else_the_dtype(
    config: dict[str, Any], expected: str | None
) -> None:
    assert weights_format(config) == expected


def test_an_unknown_quantization_leaves_the_parameter_estimate_unknown() -> None:
    hqq = weights_format({"quantization_config": {"quant_method": "hqq"}})
    fp8 = weights_format({"quantization_config": {"quant_method": "fp8"}})
    assert estimated_parameters_b(30 * 10**9, hqq) is None
    assert estimated_parameters_b(30 * 10**9, fp8) == 30


_JSON = st.recursive(
    st.none() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@given(
    st.dictionaries(st.sampled_from(["quant_method", "config_groups", "quant_algo", "load_in_4bit"]), _JSON),
    st.sampled_from(["compressed-tensors", "modelopt", "bitsandbytes", "fp8", None]),
)
def test_weights_format_never_fails_on_a_quantization_config(
    config: dict[str, Any], method: str | None
) -> None:
    quantization = config | ({"quant_method": method} if method else {})
    result = weights_format({"quantization_config": quantization})
    assert result is None or isinstance(result, str)
