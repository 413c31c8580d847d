"""Reading a container's vLLM command line back into the definition vLLM effectively ran."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from tests._support.vllm_strategies import TOTAL_GIB, definitions

from mirbad_orchestration.commandline import build_vllm_args, normalize_vllm, parse_vllm_args
from mirbad_orchestration.exceptions import UnreadableFlagError
from mirbad_protocol import InvalidFieldError, ModelDefinition, SpeculativeDecoding

IMAGE = "vllm/vllm-openai:v0.11.0"


def parse(*argv: str, total_gib: float = 80.0) -> ModelDefinition:
    return parse_vllm_args(list(argv), model_id="m", image=IMAGE, total_gib=total_gib)


def test_a_builder_line_reads_back_as_its_normalized_definition() -> None:
    model = ModelDefinition(
        id="m",
        image=IMAGE,
        served_name="qwen",
        model_path="Qwen/Qwen3-8B",
        quantization="fp8",
        kv_cache_dtype="fp8",
        max_model_len=32768,
        max_num_seqs=8,
        max_num_batched_tokens=4096,
        memory_budget_gib=40.0,
        tool_call_parser="hermes",
        reasoning_parser="qwen3",
        enable_prefix_caching=False,
        speculative=SpeculativeDecoding(method="mtp", num_speculative_tokens=2, extra={"x": [1]}),
        cudagraph_mode="FULL",
        compilation_config={"level": 3},
        async_scheduling=True,
        mamba_cache_mode="align",
        extra_args=["--trust-remote-code", "--max-num-seqs=4", "--quantization", "awq"],
    )
    assert parse(*build_vllm_args(model, total_gib=80.0)) == normalize_vllm(model)


def test_vllm_serve_with_a_positional_model_and_vllm_defaults() -> None:
    model = parse("vllm", "serve", "/models/llama", "--max-model-len", "4096", total_gib=100.0)
    assert (model.model_path, model.served_name, model.max_model_len) == ("llama", "/models/llama", 4096)
    assert model.memory_budget_gib == pytest.approx(90.0)
    assert (model.id, model.image, model.extra_args) == ("m", IMAGE, [])


def test_serve_with_model_equals_and_underscore_spellings() -> None:
    model = parse(
        "serve", "--model=/models/a/b", "--served_model_name=ab", "--gpu_memory_utilization", "0.25"
    )
    assert (model.model_path, model.served_name, model.memory_budget_gib) == ("a/b", "ab", 20.0)


@pytest.mark.parametrize(
    ("model", "path"),
    [
        ("/models/x/", "x"),
        ("/data/llama", "data/llama"),
        ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B"),
        ("/modelsx", "modelsx"),
    ],
)
def test_a_model_outside_the_model_root_reads_as_a_relative_path(model: str, path: str) -> None:
    assert parse("--model", model).model_path == path


@pytest.mark.parametrize("model", ["/models/../etc", "/models", "/", "C:/models/x"])
def test_a_model_that_is_no_relative_path_is_refused(model: str) -> None:
    with pytest.raises(UnreadableFlagError) as caught:
        parse("--model", model)
    assert caught.value.field == "--model"


def test_a_line_without_a_model_is_refused() -> None:
    with pytest.raises(UnreadableFlagError) as caught:
        parse("--served-model-name", "x")
    assert caught.value.field == "--model"


def test_tool_choice_and_parser_are_read_together_only() -> None:
    both = parse("--model", "/models/m", "--tool-call-parser", "hermes", "--enable-auto-tool-choice")
    assert (both.tool_call_parser, both.extra_args) == ("hermes", [])
    alone = parse("--model", "/models/m", "--tool-call-parser", "hermes")
    assert (alone.tool_call_parser, alone.extra_args) == (None, ["--tool-call-parser", "hermes"])
    switch = parse("--model", "/models/m", "--enable-auto-tool-choice")
    assert (switch.tool_call_parser, switch.extra_args) == (None, ["--enable-auto-tool-choice"])


def test_quantization_and_reasoning_parser() -> None:
    model = parse("--model", "/models/m", "-q", "awq", "--reasoning-parser=deepseek_r1")
    assert (model.quantization, model.reasoning_parser) == ("awq", "deepseek_r1")


def test_the_default_quiet_endpoints_are_dropped_and_others_kept() -> None:
    default = parse(
        "--model", "/models/m", "--disable-access-log-for-endpoints", "/health,/metrics", "--seed", "1"
    )
    assert default.extra_args == ["--seed", "1"]
    other = parse("--model", "/models/m", "--disable-access-log-for-endpoints=/health")
    assert other.extra_args == ["--disable-access-log-for-endpoints=/health"]


def test_typed_flags_after_the_quiet_marker_stay_extra_args() -> None:
    model = parse(
        "--model",
        "/models/m",
        "--disable-access-log-for-endpoints",
        "/health,/metrics",
        "--quantization",
        "awq",
        "--served-model-name",
        "alias",
    )
    assert (model.quantization, model.served_name) == (None, "/models/m")
    assert model.extra_args == ["--quantization", "awq", "--served-model-name", "alias"]


def test_a_repeated_typed_flag_keeps_its_later_occurrence_in_extra_args() -> None:
    model = parse("--model", "/models/m", "--max-model-len", "4096", "--max-model-len", "2048")
    assert (model.max_model_len, model.extra_args) == (4096, ["--max-model-len", "2048"])


@pytest.mark.parametrize("value", ["32k", "-1", "auto"])
def test_a_typed_value_this_reader_cannot_take_stays_verbatim(value: str) -> None:
    model = parse("--model", "/models/m", "--max-model-len", value, "--max-model-len", "100")
    assert model.max_model_len == 8192
    assert model.extra_args == ["--max-model-len", value, "--max-model-len", "100"]


def test_owned_flags_anywhere_are_normalized_and_unknown_flags_keep_their_order() -> None:
    model = parse(
        "--model",
        "/models/m",
        "--seed",
        "3",
        "--max_num_seqs=4",
        "--disable-access-log-for-endpoints",
        "/health,/metrics",
        "--trust-remote-code",
        "-cc.cudagraph_mode=FULL",
        "-O3",
    )
    assert (model.max_num_seqs, model.cudagraph_mode) == (4, "FULL")
    assert model.extra_args == ["--seed", "3", "--trust-remote-code", "-O3"]


def test_an_unreadable_owned_flag_is_named() -> None:
    with pytest.raises(UnreadableFlagError) as caught:
        parse("--model", "/models/m", "--speculative-config", "{")
    assert caught.value.field == "--speculative-config"


@pytest.mark.parametrize("total", [0.0, -1.0, float("nan")])
def test_a_total_that_is_not_positive_is_refused(total: float) -> None:
    with pytest.raises(InvalidFieldError) as caught:
        parse("--model", "/models/m", total_gib=total)
    assert caught.value.field == "memoryBudgetGiB"


@settings(max_examples=150, deadline=None)
@given(definitions())
def test_build_parse_build_is_the_identity(model: ModelDefinition) -> None:
    normalized = normalize_vllm(model)
    argv = build_vllm_args(normalized, total_gib=TOTAL_GIB)
    parsed = parse_vllm_args(argv, model_id=model.id, image=model.image, total_gib=TOTAL_GIB)
    assert build_vllm_args(parsed, total_gib=TOTAL_GIB) == argv
    assert parsed == normalized.model_copy(update={"memory_budget_gib": parsed.memory_budget_gib})
