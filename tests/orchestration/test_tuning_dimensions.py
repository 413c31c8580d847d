"""Tuning dimensions: the plans per runtime, unknown steps, the extra-flag rewrite and the fingerprint."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_orchestration.exceptions import UnknownTuningStepError
from mirbad_orchestration.tuning import (
    ModelShape,
    apply_best,
    effective_config,
    fingerprint,
    kv_auto_fits,
    kv_cache_bytes_per_token,
    llamacpp_dimensions,
    plan_for,
    pooling_dimensions,
    set_extra_flag,
)
from mirbad_protocol import ExecutableRef, ModelDefinition

LLAMA = ModelDefinition(
    id="tiny",
    served_name="tiny",
    runtime="llamacpp",
    executable=ExecutableRef(name="llama-server", version="1"),
    model_path="tiny.gguf",
    max_num_seqs=2,
)
VLLM = ModelDefinition(id="m", served_name="m", model_path="m")


def test_llama_server_tunes_its_own_dimensions_in_order() -> None:
    assert llamacpp_dimensions(cpu_count=8).steps == [
        "parallel",
        "threads",
        "batch_size",
        "ubatch_size",
        "flash_attn",
        "kv_cache_dtype",
    ]
    assert llamacpp_dimensions(cpu_count=8).dimensions[1].values == (4, 8)
    assert plan_for(LLAMA).steps == ["parallel", "flash_attn"]
    assert len(plan_for(LLAMA, search="full").steps) == 6


def test_unknown_steps_are_refused_naming_each() -> None:
    with pytest.raises(UnknownTuningStepError) as refused:
        plan_for(VLLM, steps=["max_num_seqs", "threads", "warp"])
    assert refused.value.field == "steps"
    assert refused.value.unknown == ["threads", "warp"]
    assert "threads, warp" in str(refused.value)


def test_a_candidate_is_normalized_so_a_raw_flag_cannot_override_it() -> None:
    raw = LLAMA.model_copy(update={"extra_args": ["--parallel", "4", "--flash-attn", "on"]})
    [parallel] = [d for d in plan_for(raw).dimensions if d.name == "parallel"]
    candidate = parallel.candidate(raw, 1)
    assert candidate.max_num_seqs == 1
    assert "--parallel" not in candidate.extra_args
    [flash] = [d for d in plan_for(raw).dimensions if d.name == "flash_attn"]
    assert flash.candidate(raw, "off").extra_args == ["--flash-attn", "off"]


def test_the_fingerprint_is_the_effective_configurations() -> None:
    spelled = LLAMA.model_copy(update={"extra_args": ["--parallel=2"]})
    assert fingerprint(spelled) == fingerprint(LLAMA)
    assert fingerprint(LLAMA.model_copy(update={"max_num_seqs": 4})) != fingerprint(LLAMA)


_OTHER = st.sampled_from(["--jinja", "--seed", "7", "--temp", "0.5", "-ngl", "12", "--no-mmap"])
_FLAG = st.sampled_from(["--threads", "-t", "--threads=3", "--threads 5", "-t=2"])


@given(st.lists(st.one_of(_OTHER, st.tuples(_FLAG, st.sampled_from(["1", "9"])).map(" ".join)), max_size=8))
def test_set_extra_flag_leaves_exactly_one_setting_and_keeps_the_rest(extra: list[str]) -> None:
    result = set_extra_flag(extra, ("--threads", "-t"), "4")
    assert result[-2:] == ["--threads", "4"]
    rest = result[:-2]
    assert not any(element.split("=")[0].split(" ")[0] in ("--threads", "-t") for element in rest)
    assert rest == [
        element for element in extra if element.split("=")[0].split(" ")[0] not in ("--threads", "-t")
    ]


def test_apply_best_takes_only_the_tuned_settings_and_leaves_no_owned_flag() -> None:
    saved = LLAMA.model_copy(update={"extra_args": ["--threads", "2", "--jinja", "-np", "2"]})
    best = LLAMA.model_copy(
        update={"max_num_seqs": 1, "extra_args": ["--threads", "8", "--flash-attn", "on"]}
    )
    edited = saved.model_copy(update={"max_model_len": 512})  # changed by the user after the run

    applied = apply_best(edited, best)

    assert applied.max_num_seqs == 1
    assert applied.max_model_len == 512
    assert applied.extra_args == ["--jinja", "--threads", "8", "--flash-attn", "on"]
    assert "-np" not in applied.extra_args
    vllm = apply_best(VLLM.model_copy(update={"extra_args": ["--max-num-seqs", "64"]}), VLLM)
    assert (vllm.max_num_seqs, vllm.extra_args) == (16, [])


# ---------------------------------------------------------------- the KV gate and pooling models

QWEN_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "hidden_size": 4096,
    "head_dim": 128,
    "torch_dtype": "bfloat16",
}
GIB = 1024**3


def test_the_kv_bytes_of_a_token_follow_the_config() -> None:
    shape = ModelShape.from_config(QWEN_CONFIG, weights_bytes=16 * GIB)
    assert shape is not None
    # K and V, 36 layers, 8 KV heads of 128, two bytes: 144 KiB a token at auto, half of it at fp8.
    assert kv_cache_bytes_per_token(shape) == 2 * 36 * 8 * 128 * 2 == 147_456
    assert kv_cache_bytes_per_token(shape, "fp8_e4m3") == 73_728
    # Without head_dim the width is hidden / heads; without KV heads there is no GQA.
    plain = ModelShape.from_config({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64})
    assert plain is not None
    assert (plain.kv_heads, plain.head_dim, plain.dtype_bytes) == (4, 16, 2)
    nested = ModelShape.from_config({"text_config": QWEN_CONFIG, "vision_config": {}})
    assert nested == ModelShape(layers=36, kv_heads=8, head_dim=128, dtype_bytes=2)
    assert ModelShape.from_config({"architectures": ["X"]}) is None


def test_the_kv_dimension_is_tried_only_when_one_full_length_request_fits_at_auto() -> None:
    shape = ModelShape.from_config(QWEN_CONFIG, weights_bytes=16 * GIB)
    # 32k tokens x 144 KiB = 4.5 GiB of KV: 24 GiB less 16 of weights holds it, 20 GiB does not.
    roomy = VLLM.model_copy(update={"max_model_len": 32_768, "memory_budget_gib": 24.0})
    tight = roomy.model_copy(update={"memory_budget_gib": 20.0})
    assert kv_auto_fits(roomy, shape) is True
    assert kv_auto_fits(tight, shape) is False
    assert kv_auto_fits(roomy, None) is None
    assert kv_auto_fits(roomy, ModelShape(layers=36, kv_heads=8, head_dim=128)) is None  # weights unknown

    assert "kv_cache_dtype" in plan_for(roomy, search="full", shape=shape).steps
    skipped = plan_for(tight, search="full", shape=shape)
    assert "kv_cache_dtype" not in skipped.steps
    assert any("kv_cache_dtype: not tried" in note and ": no)" in note for note in skipped.notes)
    unknown = plan_for(roomy, search="full")
    assert any(": unknown)" in note for note in unknown.notes)
    # The MTP layers come from the config too.
    mtp = ModelShape.from_config({**QWEN_CONFIG, "num_nextn_predict_layers": 1}, weights_bytes=GIB)
    assert plan_for(roomy, shape=mtp).dimensions[0].values == ("off", "mtp-1", "mtp-2", "mtp-3")


@given(st.dictionaries(st.text(max_size=30), st.one_of(st.integers(), st.text(max_size=10), st.none())))
def test_reading_any_config_never_raises(config: dict[str, object]) -> None:
    shape = ModelShape.from_config(config)
    assert shape is None or min(shape.layers, shape.kv_heads, shape.head_dim, shape.dtype_bytes) > 0


def test_a_pooling_model_tunes_only_its_batching() -> None:
    assert pooling_dimensions().steps == ["max_num_seqs", "max_num_batched_tokens"]
    assert pooling_dimensions().dimensions[0].values == (4, 8, 16, 32, 64)
    assert pooling_dimensions().dimensions[1].values == (2048, 8192, 32768)
    assert plan_for(VLLM, pooling=True).steps == ["max_num_seqs"]
    assert plan_for(VLLM, pooling=True, search="full").steps == ["max_num_seqs", "max_num_batched_tokens"]
    with pytest.raises(UnknownTuningStepError) as refused:
        plan_for(VLLM, pooling=True, steps=["speculative", "max_num_seqs"])
    assert refused.value.unknown == ["speculative"]


def test_the_effective_configuration_shows_the_preset_search_s_switches() -> None:
    switched = VLLM.model_copy(
        update={
            "enable_prefix_caching": False,
            "async_scheduling": True,
            "cudagraph_mode": "PIECEWISE",
            "mamba_cache_mode": "align",
        }
    )
    line = effective_config(switched)
    assert line.endswith(
        "speculative=off prefix-caching=off async-scheduling=on cudagraph=PIECEWISE mamba-cache=align"
    )
    # Candidates that differ only in a switch read differently, as their fingerprints do.
    other = switched.model_copy(update={"async_scheduling": False})
    assert effective_config(other) != line
    assert "async-scheduling" not in effective_config(VLLM)  # unset: vLLM's default, nothing to show
