"""The vLLM command line: golden argv for every flag, spelling and precedence rule, and its errors."""

from __future__ import annotations

from typing import Any

import pytest
from syrupy.assertion import SnapshotAssertion

from mirbad_orchestration.commandline import build_vllm_args, format_gpu_memory_utilization
from mirbad_orchestration.commandline._vllm_args import compact_json
from mirbad_orchestration.exceptions import UnreadableFlagError
from mirbad_protocol import ExecutableRef, InvalidFieldError, ModelDefinition, SpeculativeDecoding

BASE: dict[str, Any] = {
    "id": "qwen3",
    "served_name": "qwen3-8b",
    "model_path": "Qwen/Qwen3-8B",
    "memory_budget_gib": 24.0,
}
MTP3 = SpeculativeDecoding(method="mtp", num_speculative_tokens=3)


def definition(**fields: Any) -> ModelDefinition:
    return ModelDefinition(**{**BASE, **fields})


def extra(*args: str, **fields: Any) -> dict[str, Any]:
    return {"extra_args": list(args), **fields}


# Each case: definition fields over BASE; the node's GPU total is 80 GiB unless the case says otherwise.
GOLDEN: dict[str, dict[str, Any]] = {
    # ------------------------------------------------ typed fields, one flag at a time
    "minimal": {},
    "quantization": {"quantization": "fp8"},
    "kv-cache-dtype": {"kv_cache_dtype": "fp8_e5m2"},
    "max-model-len-and-seqs": {"max_model_len": 32768, "max_num_seqs": 64},
    "max-num-batched-tokens": {"max_num_batched_tokens": 8192},
    "utilization-third": {"memory_budget_gib": 80 / 3},
    "utilization-tiny-share": {"memory_budget_gib": 0.00005 * 80 * 1.01},
    "utilization-whole-gpu": {"memory_budget_gib": 80.0},
    "tool-call-parser": {"tool_call_parser": "hermes"},
    "reasoning-parser": {"reasoning_parser": "qwen3"},
    "prefix-caching-unset": {"enable_prefix_caching": None},
    "prefix-caching-on": {"enable_prefix_caching": True},
    "prefix-caching-off": {"enable_prefix_caching": False},
    "async-scheduling-unset": {"async_scheduling": None},
    "async-scheduling-on": {"async_scheduling": True},
    "async-scheduling-off": {"async_scheduling": False},
    "speculative-mtp": {"speculative": MTP3},
    "speculative-draft-extra-keys-sorted": {
        "speculative": SpeculativeDecoding(
            model="/models/draft",
            extra={"draft_tensor_parallel_size": 1, "b": {"z": 1, "a": [2, {"y": 0, "x": 1}]}},
        )
    },
    "speculative-empty-is-dropped": {"speculative": SpeculativeDecoding()},
    "cudagraph-mode-only": {"cudagraph_mode": "FULL_AND_PIECEWISE"},
    "compilation-config-only-sorted": {
        "compilation_config": {"mode": 3, "pass_config": {"fuse_norm_quant": True, "eliminate_noops": False}}
    },
    "cudagraph-mode-leads-compilation": {
        "cudagraph_mode": "FULL",
        "compilation_config": {"mode": 3, "backend": "inductor"},
    },
    "compilation-dict-cudagraph-key-is-lifted": {
        "compilation_config": {"cudagraph_mode": "PIECEWISE", "mode": 3}
    },
    "mamba-cache-mode": {"mamba_cache_mode": "align"},
    "everything": {
        "quantization": "awq",
        "kv_cache_dtype": "fp8",
        "max_model_len": 131072,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 16384,
        "memory_budget_gib": 70.5,
        "tool_call_parser": "qwen3_coder",
        "reasoning_parser": "deepseek_r1",
        "enable_prefix_caching": True,
        "speculative": MTP3,
        "cudagraph_mode": "FULL",
        "compilation_config": {"mode": 3},
        "async_scheduling": True,
        "mamba_cache_mode": "align",
        "extra_args": ["--trust-remote-code", "-tp", "2"],
    },
    # ------------------------------------------------ extra args: non-owned pass through verbatim
    "extra-non-owned-verbatim": extra(
        "--trust-remote-code", "--chat-template", "/models/t.jinja", "-tp", "2"
    ),
    "extra-typed-but-not-owned-stay": extra("--max-model-len", "4096", "--quantization=awq"),
    "extra-optimization-level-not-owned": extra("-O3", "-O.level=3", "-O", "2"),
    "extra-non-owned-line-is-split": extra("--seed 7"),
    # ------------------------------------------------ extra args: every spelling of an owned flag
    "extra-scalar-space": extra("--max-num-seqs", "32"),
    "extra-scalar-equals": extra("--max-num-seqs=32"),
    "extra-scalar-one-line": extra("--max-num-seqs 32"),
    "extra-scalar-underscores": extra("--max_num_seqs", "32"),
    "extra-kv-cache-dtype-underscores-equals": extra("--kv_cache_dtype=fp8_e5m2"),
    "extra-batched-tokens-one-line": extra("--max-num-batched-tokens 16384"),
    "extra-mamba-cache-mode-underscores": extra("--mamba_cache_mode", "align"),
    "extra-prefix-caching-on-over-typed-off": extra("--enable-prefix-caching", enable_prefix_caching=False),
    "extra-no-prefix-caching-underscores": extra("--no_enable_prefix_caching"),
    "extra-async-scheduling": extra("--async-scheduling"),
    "extra-no-async-scheduling-over-typed-on": extra("--no_async_scheduling", async_scheduling=True),
    "extra-one-line-splits-off-non-owned": extra("--max-num-seqs 8 --seed 7"),
    "extra-owned-among-non-owned-keeps-order": extra(
        "--trust-remote-code",
        "--max-num-seqs",
        "4",
        "--chat-template",
        "t",
        "--async-scheduling",
        "--seed",
        "7",
    ),
    # ------------------------------------------------ precedence: scalars and switches, last wins
    "scalar-last-wins": extra("--max-num-seqs", "8", "--max_num_seqs=24", max_num_seqs=16),
    "switch-last-wins": extra("--enable-prefix-caching", "--no-enable-prefix-caching"),
    # ------------------------------------------------ precedence: whole JSON objects
    "speculative-full-replaces-typed": extra(
        "--speculative-config",
        '{"method":"ngram","num_speculative_tokens":5,"prompt_lookup_max":4}',
        speculative=MTP3,
    ),
    "speculative-last-full-wins": extra(
        '--speculative-config={"method":"ngram"}', "--speculative-config", '{"method":"mtp"}'
    ),
    "speculative-full-underscores-equals": extra(
        '--speculative_config={"method":"eagle","model":"/models/e"}'
    ),
    "speculative-full-one-line-unquoted": extra(
        '--speculative-config {"method": "mtp", "num_speculative_tokens": 2}'
    ),
    "speculative-full-one-line-quoted": extra('--speculative-config \'{"method": "mtp"}\''),
    "speculative-full-empty-clears": extra("--speculative-config", "{}", speculative=MTP3),
    "compilation-full-replaces-typed-and-mode": extra(
        "--compilation-config", '{"mode":3}', cudagraph_mode="FULL", compilation_config={"backend": "eager"}
    ),
    "compilation-full-cc-equals-with-mode": extra(
        '-cc={"custom_ops":["none"],"cudagraph_mode":"FULL_DECODE_ONLY"}', cudagraph_mode="FULL"
    ),
    "compilation-full-underscores": extra('--compilation_config={"mode":2}'),
    # ------------------------------------------------ precedence: dotted keys
    "speculative-dotted-discards-typed": extra(
        "--speculative-config.num_speculative_tokens=4", speculative=MTP3
    ),
    "speculative-dotted-underscores-space": extra("--speculative_config.model", "/models/draft"),
    "speculative-dotted-one-line": extra("--speculative-config.method mtp"),
    "speculative-dotted-discards-later-full": extra(
        "--speculative-config.num_speculative_tokens=2", "--speculative-config", '{"method":"ngram"}'
    ),
    "speculative-dotted-discards-earlier-full": extra(
        "--speculative-config", '{"method":"ngram"}', "--speculative-config.num_speculative_tokens=2"
    ),
    "speculative-dotted-last-wins-per-key": extra(
        "--speculative-config.num_speculative_tokens=2",
        "--speculative-config.method=mtp",
        "--speculative-config.num_speculative_tokens=4",
    ),
    "speculative-dotted-unknown-nested-key": extra(
        "--speculative-config.method=mtp", "--speculative-config.hf_overrides.rope.factor=2.5"
    ),
    "cc-dotted-cudagraph-mode": extra(
        "-cc.cudagraph_mode=PIECEWISE", cudagraph_mode="FULL", compilation_config={"mode": 3}
    ),
    "compilation-dotted-nested-json-values": extra(
        "--compilation-config.pass_config.fuse_norm_quant=true",
        "--compilation_config.pass_config.eliminate_noops=false",
        "--compilation-config.compile_sizes=[1,2]",
        "--compilation-config.backend",
        "inductor",
    ),
    "compilation-dotted-discards-full-either-order": extra(
        "-cc", '{"cudagraph_mode":"FULL"}', "-cc.mode=3", "-cc", '{"mode":1}'
    ),
    "compilation-dotted-object-merges-with-later-key": extra(
        '-cc.pass_config={"fuse_norm_quant":true}',
        "-cc.pass_config.eliminate_noops=false",
        "-cc.pass_config.fuse_norm_quant=false",
    ),
    "compilation-dotted-list-append": extra("-cc.custom_ops+=-quant_fp8,+rms_norm", "-cc.custom_ops+=+silu"),
    "compilation-dotted-two-spellings-later-group-wins": extra(
        "-cc.backend=eager", "--compilation-config.mode=2", "-cc.cudagraph_mode=FULL"
    ),
    "everything-overridden-by-extra": {
        **extra(
            "--kv-cache-dtype=fp8",
            "--max-num-seqs 4",
            "--max_num_batched_tokens",
            "2048",
            "--no-enable-prefix-caching",
            "--speculative-config.method=ngram",
            "-cc.cudagraph_mode=NONE",
            "--no-async-scheduling",
            "--mamba-cache-mode=none",
            "--trust-remote-code",
        ),
        "enable_prefix_caching": True,
        "speculative": MTP3,
        "cudagraph_mode": "FULL",
        "compilation_config": {"mode": 3},
        "async_scheduling": True,
    },
}


def test_there_are_enough_golden_lines() -> None:
    assert len(GOLDEN) >= 40


@pytest.mark.parametrize("case", GOLDEN)
def test_golden_command_line(case: str, snapshot_json: SnapshotAssertion) -> None:
    args = build_vllm_args(definition(**GOLDEN[case]), total_gib=80.0)
    assert args == snapshot_json


def test_owned_flags_are_emitted_once() -> None:
    args = build_vllm_args(definition(**GOLDEN["everything-overridden-by-extra"]), total_gib=80.0)
    flags = [arg for arg in args if arg.startswith("-")]
    assert len(flags) == len(set(flags))


@pytest.mark.parametrize("empty", [SpeculativeDecoding(), SpeculativeDecoding(method=None, model=None)])
def test_an_empty_speculative_config_emits_no_flag(empty: SpeculativeDecoding) -> None:
    # vLLM reads `--speculative-config {}` as a draft-model config without a model and fails.
    args = build_vllm_args(definition(speculative=empty), total_gib=80.0)
    assert "--speculative-config" not in args
    assert args == build_vllm_args(definition(), total_gib=80.0)


def test_verbatim_utilization_is_emitted_as_given() -> None:
    args = build_vllm_args(definition(), utilization="0.85")
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.85"


@pytest.mark.parametrize(
    ("budget", "total", "expected"),
    [(24, 80, "0.3000"), (80, 80, "1.0000"), (1, 3, "0.3333"), (2, 3, "0.6667"), (0.5, 96, "0.0052")],
)
def test_utilization_has_four_decimals_and_a_point(budget: float, total: float, expected: str) -> None:
    assert format_gpu_memory_utilization(budget, total) == expected


@pytest.mark.parametrize(
    ("budget", "total"),
    [(90, 80), (80.01, 80), (0.001, 80), (8, 0), (8, -80), (8, float("nan")), (8, float("inf"))],
)
def test_utilization_outside_its_range_names_the_budget(budget: float, total: float) -> None:
    with pytest.raises(InvalidFieldError) as caught:
        build_vllm_args(definition(memory_budget_gib=budget), total_gib=total)
    assert caught.value.field == "memoryBudgetGiB"


@pytest.mark.parametrize("text", ["0", "1.5", "abc", "-0.5", "nan", ""])
def test_unusable_verbatim_utilization_is_refused(text: str) -> None:
    with pytest.raises(InvalidFieldError) as caught:
        build_vllm_args(definition(), utilization=text)
    assert caught.value.field == "memoryBudgetGiB"


def test_total_and_utilization_are_exclusive() -> None:
    with pytest.raises(TypeError):
        build_vllm_args(definition(), total_gib=80.0, utilization="0.5")
    with pytest.raises(TypeError):
        build_vllm_args(definition())


def test_builder_refuses_an_unreadable_owned_flag() -> None:
    with pytest.raises(UnreadableFlagError) as caught:
        build_vllm_args(definition(extra_args=["--max-num-seqs", "lots"]), total_gib=80.0)
    assert caught.value.field == "--max-num-seqs"


def test_builder_refuses_a_process_runtime() -> None:
    llama = ModelDefinition(
        id="tiny",
        served_name="tiny",
        model_path="tiny.gguf",
        runtime="llamacpp",
        executable=ExecutableRef(name="llama-server", version="b1"),
    )
    with pytest.raises(InvalidFieldError) as caught:
        build_vllm_args(llama, total_gib=80.0)
    assert caught.value.field == "runtime"


def test_compact_json_sorts_keys_at_every_depth() -> None:
    assert compact_json({"b": {"d": 1, "c": [{"f": 2, "e": 3}]}, "a": "é"}) == (
        '{"a":"é","b":{"c":[{"e":3,"f":2}],"d":1}}'
    )
