"""llama-server's command line: golden argv, every spelling and precedence rule, and the parser."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion

from mirbad_orchestration.commandline import (
    LLAMACPP_CACHE_TYPES,
    build_llamacpp_args,
    llamacpp_ctx_size,
    normalize_llamacpp,
    parse_llamacpp_args,
)
from mirbad_orchestration.commandline._llamacpp_flags import split_flag
from mirbad_orchestration.exceptions import UnreadableFlagError
from mirbad_protocol import ExecutableRef, InvalidFieldError, ModelDefinition

EXE = ExecutableRef(name="llama-server", version="b7000")


def _definition(**changes: Any) -> ModelDefinition:
    fields: dict[str, Any] = {
        "id": "tiny",
        "served_name": "tiny-chat",
        "runtime": "llamacpp",
        "executable": EXE,
        "model_path": "tiny/tiny.gguf",
        "max_model_len": 4096,
        "max_num_seqs": 4,
    }
    return ModelDefinition.model_validate(fields | changes)


def _outcome(**changes: Any) -> list[str] | dict[str, str]:
    try:
        return build_llamacpp_args(_definition(**changes))
    except InvalidFieldError as exc:
        return {"error": type(exc).__name__, "field": exc.field, "reason": exc.reason}


BUILDS: dict[str, dict[str, Any]] = {
    "minimal": {},
    "registry defaults (8192 x 16)": {"max_model_len": 8192, "max_num_seqs": 16},
    "every typed setting": {
        "max_num_batched_tokens": 1024,
        "kv_cache_dtype": "q8_0",
        "gpu_layers": 99,
        "extra_args": ["--jinja", "--temp", "0.7"],
    },
    "gpu layers -1 is llama.cpp's auto": {"gpu_layers": -1},
    "gpu layers 0 keeps everything on the CPU": {"gpu_layers": 0},
    "windows model path": {"model_path": "Qwen\\qwen3-8b-q4_k_m.gguf"},
    # every spelling of every owned flag
    "-c": {"extra_args": ["-c", "8192"]},
    "--ctx-size=": {"extra_args": ["--ctx-size=8192"]},
    "--ctx_size one element": {"extra_args": ["--ctx_size 8192"]},
    "-np": {"extra_args": ["-np", "2"]},
    "--parallel=": {"extra_args": ["--parallel=8"]},
    "-b": {"extra_args": ["-b", "256"]},
    "--batch_size=": {"extra_args": ["--batch_size=256"]},
    "-ctk -ctv": {"extra_args": ["-ctk", "q4_0", "-ctv", "q4_0"]},
    "--cache-type-k= --cache_type_v one element": {
        "extra_args": ["--cache-type-k=iq4_nl", "--cache_type_v iq4_nl"]
    },
    "-ngl": {"extra_args": ["-ngl", "20"]},
    "--gpu-layers": {"extra_args": ["--gpu-layers", "20"]},
    "--n_gpu_layers=auto": {"extra_args": ["--n_gpu_layers=auto"]},
    # precedence: extraArgs come last, llama-server keeps the last value
    "extra -np splits the typed context": {"extra_args": ["-np", "8"]},
    "extra -c and -np together": {"extra_args": ["-np", "2", "-c", "16384"]},
    "-c not a multiple of -np keeps the per-slot floor": {"extra_args": ["-c", "1000", "-np", "3"]},
    "last of repeated flags wins": {
        "extra_args": ["-c", "1024", "--ctx-size", "2048", "-b", "1", "-b", "64"]
    },
    "extra cache type replaces the typed one": {
        "kv_cache_dtype": "q8_0",
        "extra_args": ["-ctk", "f16", "-ctv", "f16"],
    },
    "extra V alone matching the typed K": {"kv_cache_dtype": "q5_1", "extra_args": ["-ctv", "q5_1"]},
    "f16 named for K only equals llama.cpp's default V": {"extra_args": ["-ctk", "f16"]},
    "extra -ngl replaces typed gpu layers": {"gpu_layers": 10, "extra_args": ["-ngl", "33"]},
    "--metrics in extra args is written once": {"extra_args": ["--metrics", "--jinja"]},
    "unknown flags stay verbatim and in order": {
        "extra_args": [
            "--flash-attn on",
            "--reasoning-format=none",
            "-fa",
            "auto",
            "--no-host",
            "--host-x",
            "1",
        ]
    },
}

REFUSALS: dict[str, dict[str, Any]] = {
    "--host": {"extra_args": ["--host", "0.0.0.0"]},
    "--port=": {"extra_args": ["--port=9000"]},
    "--api-key one element": {"extra_args": ["--api-key secret"]},
    "--api_key_file": {"extra_args": ["--api_key_file", "keys.txt"]},
    "-m": {"extra_args": ["-m", "other.gguf"]},
    "--model=": {"extra_args": ["--model=other.gguf"]},
    "-a": {"extra_args": ["-a", "other"]},
    "--alias": {"extra_args": ["--alias", "other"]},
    "-c not a number": {"extra_args": ["-c", "lots"]},
    "-c 0 (the model's own context)": {"extra_args": ["-c", "0"]},
    "-c without a value": {"extra_args": ["--jinja", "-c"]},
    "-c smaller than the slots": {"extra_args": ["-c", "3", "-np", "4"]},
    "-c beyond int32": {"extra_args": ["-c", "99999999999"]},
    "-np 0": {"extra_args": ["-np", "0"]},
    "-np -1 (auto)": {"extra_args": ["-np", "-1"]},
    "-np above 256": {"extra_args": ["--parallel", "300"]},
    "-b 0": {"extra_args": ["-b", "0"]},
    "-ctk fp8 (a vLLM type)": {"extra_args": ["-ctk", "fp8"]},
    "K and V differ": {"extra_args": ["-ctk", "q8_0", "-ctv", "q4_0"]},
    "K alone differs from the default V": {"extra_args": ["-ctk", "q8_0"]},
    "-ngl all": {"extra_args": ["-ngl", "all"]},
    "-ngl -2": {"extra_args": ["-ngl", "-2"]},
    "typed kv cache dtype fp8": {"kv_cache_dtype": "fp8"},
    "typed 300 slots": {"max_num_seqs": 300},
    "typed context beyond int32": {"max_model_len": 2**30, "max_num_seqs": 4},
    "served name with a comma": {"served_name": "a,b"},
}


def test_golden_command_lines(snapshot_json: SnapshotAssertion) -> None:
    assert {name: _outcome(**changes) for name, changes in BUILDS.items()} == snapshot_json


def test_refusals(snapshot_json: SnapshotAssertion) -> None:
    outcomes = {name: _outcome(**changes) for name, changes in REFUSALS.items()}
    assert all(isinstance(outcome, dict) for outcome in outcomes.values())
    assert outcomes == snapshot_json


def test_plumbing_is_refused_as_an_extra_args_error() -> None:
    with pytest.raises(InvalidFieldError) as caught:
        build_llamacpp_args(_definition(extra_args=["--port", "1"]))
    assert (caught.value.field, caught.value.reason) == ("extraArgs", "--port is set by the agent")
    assert not isinstance(caught.value, UnreadableFlagError)


def test_unreadable_values_name_the_flag_as_written() -> None:
    with pytest.raises(UnreadableFlagError) as caught:
        normalize_llamacpp(_definition(extra_args=["--cache_type_k=turbo4"]))
    assert caught.value.field == "--cache_type_k"


def test_other_runtimes_are_refused() -> None:
    vllm = ModelDefinition(id="v", served_name="v", model_path="v")
    with pytest.raises(InvalidFieldError, match="runtime"):
        build_llamacpp_args(vllm)


def test_normalize_lifts_everything_and_the_context_is_per_slot() -> None:
    raw = _definition(
        extra_args=["--ctx-size=12288", "-np", "3", "-b", "512", "-ctk", "q8_0", "-ctv", "q8_0"]
    )
    normalized = normalize_llamacpp(raw)
    assert (normalized.max_model_len, normalized.max_num_seqs) == (4096, 3)
    assert (normalized.max_num_batched_tokens, normalized.kv_cache_dtype) == (512, "q8_0")
    assert normalized.extra_args == []
    assert llamacpp_ctx_size(normalized) == 12288


@pytest.mark.parametrize(
    ("element", "expected"),
    [
        ("--flag=value", ("--flag", "value")),
        ("--flag value with spaces", ("--flag", "value with spaces")),
        ("--flag=a b", ("--flag", "a b")),
        ("--flag  padded ", ("--flag", "padded")),
        ("--flag", ("--flag", None)),
        ("value=x", ("value=x", None)),
        ("-c=5", ("-c", "5")),
    ],
)
def test_split_flag(element: str, expected: tuple[str, str | None]) -> None:
    assert split_flag(element) == expected


# ---------------------------------------------------------------- the parser


def test_parse_reads_the_builder_output_back() -> None:
    definition = _definition(
        max_num_batched_tokens=2048, kv_cache_dtype="q4_1", gpu_layers=12, extra_args=["--jinja"]
    )
    parsed = parse_llamacpp_args(build_llamacpp_args(definition), model_id="tiny", executable=EXE)
    assert parsed == normalize_llamacpp(definition)


def test_parse_drops_the_agent_plumbing_and_reads_every_spelling(snapshot_json: SnapshotAssertion) -> None:
    argv = [
        "-m",
        "models/qwen.gguf",
        "--alias=qwen",
        "--host",
        "127.0.0.1",
        "--port=40001",
        "--api_key",
        "secret",
        "--metrics",
        "-c",
        "65536",
        "-np",
        "8",
        "-ngl",
        "99",
        "--ctx-size 32768",
        "--jinja",
        "--temp",
        "0.6",
    ]
    parsed = parse_llamacpp_args(argv, model_id="qwen", executable=EXE)
    assert (parsed.max_model_len, parsed.max_num_seqs, parsed.gpu_layers) == (4096, 8, 99)
    assert parsed.to_wire() == snapshot_json


def test_parse_skips_a_leading_program_name() -> None:
    argv = ["/opt/llama/llama-server", "--model", "a.gguf", "-c", "512", "-np", "2"]
    parsed = parse_llamacpp_args(argv, model_id="plain", executable=EXE)
    assert (parsed.model_path, parsed.max_model_len, parsed.extra_args) == ("a.gguf", 256, [])


def test_parse_without_alias_serves_under_the_model_id() -> None:
    parsed = parse_llamacpp_args(["--model", "a.gguf"], model_id="plain", executable=EXE)
    assert parsed.served_name == "plain"
    assert (parsed.max_model_len, parsed.max_num_seqs) == (8192, 16)  # the registry defaults


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--alias", "x"], "--model"),
        (["--model"], "--model"),
        (["--model", "/abs/x.gguf"], "modelPath"),
        (["--model", "x.gguf", "-c", "many"], "-c"),
        (["--model", "x.gguf", "--alias", "bad name"], "servedName"),
    ],
)
def test_parse_errors_name_the_field(argv: list[str], field: str) -> None:
    with pytest.raises(InvalidFieldError) as caught:
        parse_llamacpp_args(argv, model_id="x", executable=EXE)
    assert caught.value.field == field


# ---------------------------------------------------------------- properties


def _spelled(spellings: list[str], value: str) -> st.SearchStrategy[list[str]]:
    return st.sampled_from(spellings).flatmap(
        lambda flag: st.sampled_from([[flag, value], [f"{flag}={value}"], [f"{flag} {value}"]])
    )


_COUNT = st.integers(1, 256).map(str)
_CACHE = st.sampled_from(LLAMACPP_CACHE_TYPES)
_OWNED_GROUP = st.one_of(
    st.integers(256, 1 << 20).flatmap(lambda n: _spelled(["-c", "--ctx-size", "--ctx_size"], str(n))),
    _COUNT.flatmap(lambda n: _spelled(["-np", "--parallel"], n)),
    st.integers(1, 8192).flatmap(lambda n: _spelled(["-b", "--batch-size", "--batch_size"], str(n))),
    st.one_of(st.integers(-1, 200).map(str), st.just("auto")).flatmap(
        lambda n: _spelled(["-ngl", "--gpu-layers", "--n-gpu-layers", "--n_gpu_layers"], n)
    ),
    _CACHE.flatmap(
        lambda t: st.tuples(
            _spelled(["-ctk", "--cache-type-k"], t), _spelled(["-ctv", "--cache_type_v"], t)
        ).map(lambda pair: pair[0] + pair[1])
    ),
    st.just(["--metrics"]),
)
_OTHER_GROUP = st.sampled_from(
    [
        ["--jinja"],
        ["--temp", "0.7"],
        ["--flash-attn=on"],
        ["--reasoning-format none"],
        ["-fa", "auto"],
        ["--no-host"],
    ]
)
_EXTRA_ARGS = st.lists(st.one_of(_OWNED_GROUP, _OTHER_GROUP), max_size=8).map(
    lambda groups: [element for group in groups for element in group]
)
DEFINITIONS = st.builds(
    _definition,
    max_model_len=st.integers(256, 1 << 16),
    max_num_seqs=st.integers(1, 256),
    max_num_batched_tokens=st.none() | st.integers(1, 1 << 16),
    kv_cache_dtype=st.sampled_from(["auto", *LLAMACPP_CACHE_TYPES]),
    gpu_layers=st.none() | st.integers(-1, 200),
    extra_args=_EXTRA_ARGS,
)


@settings(max_examples=300, deadline=None)
@given(DEFINITIONS)
def test_normalize_is_idempotent(definition: ModelDefinition) -> None:
    once = normalize_llamacpp(definition)
    assert normalize_llamacpp(once) == once


@settings(max_examples=300, deadline=None)
@given(DEFINITIONS)
def test_build_parse_build_is_the_identity(definition: ModelDefinition) -> None:
    argv = build_llamacpp_args(definition)
    parsed = parse_llamacpp_args(argv, model_id=definition.id, executable=EXE)
    assert build_llamacpp_args(parsed) == argv
    assert parsed == normalize_llamacpp(definition)
    assert argv.count("--metrics") == 1


_ANY_ELEMENT = st.one_of(
    st.sampled_from(
        ["-c", "-np", "-b", "-ctk", "-ctv", "-ngl", "--ctx-size", "--parallel", "--metrics", "--host"]
    ),
    st.sampled_from(["--alias", "-m", "--api_key", "8", "q8_0", "auto", "all", "-1", "0"]),
    st.text(min_size=0, max_size=12),
    st.from_regex(r"--[a-z_]{1,12}(=| )?[a-z0-9_-]{0,6}", fullmatch=True),
)


@settings(max_examples=400, deadline=None)
@given(extra=st.lists(_ANY_ELEMENT, max_size=8))
def test_any_extra_args_normalize_or_raise_a_field_error(extra: list[str]) -> None:
    try:
        normalized = normalize_llamacpp(_definition(extra_args=extra))
    except InvalidFieldError as exc:
        refused = exc
    else:
        assert normalize_llamacpp(normalized) == normalized
        return
    assert refused.field
    assert refused.reason


# ---------------------------------------------------------------- the prompt cache cap (issue 8)

CACHE_RAM_SPELLINGS = [
    ["--cache-ram", "512"],
    ["-cram", "512"],
    ["--cache_ram=512"],
    ["--cache-ram 512"],
]


def _cache_ram(argv: list[str]) -> int:
    return int(argv[argv.index("--cache-ram") + 1])


@pytest.mark.parametrize(
    ("budget_gib", "mib"), [(0.5, 128), (1.0, 256), (8.0, 2048), (32.0, 8192), (512.0, 8192)]
)
def test_the_prompt_cache_is_capped_from_the_budget(budget_gib: float, mib: int) -> None:
    argv = build_llamacpp_args(_definition(memory_budget_gib=budget_gib))
    assert _cache_ram(argv) == mib
    assert argv.index("--cache-ram") == argv.index("--metrics") + 1


@pytest.mark.parametrize("spelling", CACHE_RAM_SPELLINGS)
def test_a_cache_ram_in_extra_args_is_the_only_one(spelling: list[str]) -> None:
    argv = build_llamacpp_args(_definition(memory_budget_gib=0.5, extra_args=["--jinja", *spelling]))
    assert argv[-len(spelling) :] == spelling
    assert "--cache-ram" not in argv[: -len(spelling)]


@settings(max_examples=200, deadline=None)
@given(
    DEFINITIONS,
    st.floats(0.05, 1024.0),
    st.none() | st.sampled_from([*CACHE_RAM_SPELLINGS, ["--cache-ram", "2048"], ["--cache-ram", "128"]]),
)
def test_any_budget_builds_parses_and_builds_to_the_same_argv(
    definition: ModelDefinition, budget_gib: float, cache_ram: list[str] | None
) -> None:
    extra = [*definition.extra_args, *(cache_ram or [])]
    changed = definition.model_copy(update={"memory_budget_gib": budget_gib, "extra_args": extra})
    argv = build_llamacpp_args(changed)
    parsed = parse_llamacpp_args(argv, model_id=changed.id, executable=EXE)
    assert build_llamacpp_args(parsed) == argv
    if cache_ram is None:
        assert 0 <= _cache_ram(argv) <= budget_gib * 1024 / 4
