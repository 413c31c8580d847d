"""The canonical effective configuration: owned flags lifted out of extra args with vLLM's precedence."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from tests._support.vllm_strategies import definitions

from mirbad_orchestration.commandline import normalize_vllm
from mirbad_orchestration.exceptions import UnreadableFlagError
from mirbad_protocol import ExecutableRef, InvalidFieldError, ModelDefinition, SpeculativeDecoding

MTP3 = SpeculativeDecoding(method="mtp", num_speculative_tokens=3)


def definition(*extra_args: str, **fields: Any) -> ModelDefinition:
    return ModelDefinition(id="m", served_name="m", model_path="m", extra_args=list(extra_args), **fields)


def test_a_definition_without_owned_extras_is_unchanged() -> None:
    plain = definition("--trust-remote-code", "-O3", max_num_seqs=4, speculative=MTP3, cudagraph_mode="FULL")
    assert normalize_vllm(plain) == plain


def test_scalars_and_switches_are_lifted_last_wins() -> None:
    lifted = normalize_vllm(
        definition(
            "--max-num-seqs=8",
            "--kv_cache_dtype",
            "fp8",
            "--max-num-batched-tokens 4096",
            "--no-async-scheduling",
            "--async_scheduling",
            "--max_num_seqs",
            "12",
            max_num_seqs=2,
        )
    )
    assert (lifted.max_num_seqs, lifted.kv_cache_dtype, lifted.max_num_batched_tokens) == (12, "fp8", 4096)
    assert lifted.async_scheduling is True
    assert lifted.extra_args == []


def test_a_full_speculative_object_keeps_every_key() -> None:
    lifted = normalize_vllm(
        definition(
            "--speculative-config", '{"method":"ngram","prompt_lookup_max":4,"num_speculative_tokens":2}'
        )
    )
    assert lifted.speculative == SpeculativeDecoding(
        method="ngram", num_speculative_tokens=2, extra={"prompt_lookup_max": 4}
    )


def test_dotted_keys_discard_the_typed_object_and_every_full_one() -> None:
    lifted = normalize_vllm(
        definition(
            "--speculative-config",
            '{"method":"ngram","model":"/models/x"}',
            "--speculative_config.num_speculative_tokens=2",
            '--speculative-config={"method":"eagle"}',
            speculative=MTP3,
        )
    )
    assert lifted.speculative == SpeculativeDecoding(num_speculative_tokens=2)


def test_cudagraph_mode_leaves_the_compilation_object() -> None:
    lifted = normalize_vllm(definition('-cc={"cudagraph_mode":"FULL","level":3}'))
    assert (lifted.cudagraph_mode, lifted.compilation_config) == ("FULL", {"level": 3})


def test_a_full_compilation_object_without_a_mode_clears_the_typed_mode() -> None:
    lifted = normalize_vllm(definition("--compilation-config", '{"mode":3}', cudagraph_mode="FULL"))
    assert (lifted.cudagraph_mode, lifted.compilation_config) == (None, {"mode": 3})


def test_a_typed_compilation_key_wins_over_the_typed_mode() -> None:
    lifted = normalize_vllm(definition(cudagraph_mode="FULL", compilation_config={"cudagraph_mode": "NONE"}))
    assert (lifted.cudagraph_mode, lifted.compilation_config) == ("NONE", {})


def test_dotted_spellings_of_one_config_form_separate_objects() -> None:
    # vLLM appends one object per spelling, ordered by each spelling's first dotted key; the last wins.
    lifted = normalize_vllm(
        definition("--compilation-config.mode=2", "-cc.level=3", "--compilation-config.x=1")
    )
    assert lifted.compilation_config == {"level": 3}


def test_dotted_values_are_json_when_they_parse_and_text_otherwise() -> None:
    lifted = normalize_vllm(
        definition("-cc.a=1", "-cc.b=1.5", "-cc.c=true", "-cc.d=null", "-cc.e=FULL", '-cc.f="2"', "-cc.g=[1]")
    )
    assert lifted.compilation_config == {
        "a": 1,
        "b": 1.5,
        "c": True,
        "d": None,
        "e": "FULL",
        "f": "2",
        "g": [1],
    }


def test_a_dotted_key_takes_the_next_element_whatever_it_looks_like() -> None:
    lifted = normalize_vllm(definition("-cc.backend", "-x", "--seed", "1"))
    assert (lifted.compilation_config, lifted.extra_args) == ({"backend": "-x"}, ["--seed", "1"])


def test_empty_optional_texts_read_as_unset() -> None:
    lifted = normalize_vllm(
        definition(mamba_cache_mode="", cudagraph_mode="", speculative=SpeculativeDecoding())
    )
    assert (lifted.mamba_cache_mode, lifted.cudagraph_mode, lifted.speculative) == (None, None, None)


def test_an_owned_flag_with_an_equals_inside_a_spaced_element_is_not_split() -> None:
    # vLLM reads `--flag=value with spaces` as one flag and its value, so the normalizer does too.
    lifted = normalize_vllm(definition('--speculative-config={"method": "mtp"}'))
    assert lifted.speculative == SpeculativeDecoding(method="mtp")


def test_a_non_vllm_definition_is_refused() -> None:
    llama = ModelDefinition(
        id="t",
        served_name="t",
        model_path="t.gguf",
        runtime="llamacpp",
        executable=ExecutableRef(name="llama-server", version="b1"),
    )
    with pytest.raises(InvalidFieldError) as caught:
        normalize_vllm(llama)
    assert caught.value.field == "runtime"


@pytest.mark.parametrize(
    ("extra_args", "flag"),
    [
        (["--max-num-seqs", "many"], "--max-num-seqs"),
        (["--max_num_seqs=0"], "--max_num_seqs"),
        (["--max-num-seqs=-3"], "--max-num-seqs"),
        (["--max-num-seqs"], "--max-num-seqs"),
        (["--max-num-seqs", "--trust-remote-code"], "--max-num-seqs"),
        (["--max-num-batched-tokens=1.5"], "--max-num-batched-tokens"),
        (["--max-num-batched-tokens 2k"], "--max-num-batched-tokens"),
        (["--kv-cache-dtype="], "--kv-cache-dtype"),
        (["--mamba_cache_mode"], "--mamba_cache_mode"),
        (["--speculative-config", "{not json"], "--speculative-config"),
        (["--speculative-config", "[1, 2]"], "--speculative-config"),
        (["-cc", "3"], "-cc"),
        (['--compilation-config={"level": NaN}'], "--compilation-config"),
        (["--compilation_config", '{"x": 1e999}'], "--compilation_config"),
        (["--async-scheduling=true"], "--async-scheduling"),
        (["--no-enable-prefix-caching=1"], "--no-enable-prefix-caching"),
        (["--speculative-config.num_speculative_tokens=many"], "--speculative-config.num_speculative_tokens"),
        (["--speculative-config.num_speculative_tokens=-1"], "--speculative-config.num_speculative_tokens"),
        (["--speculative-config.num_speculative_tokens=true"], "--speculative-config.num_speculative_tokens"),
        (["--speculative_config.method=5"], "--speculative_config.method"),
        (["--speculative-config.model"], "--speculative-config.model"),
        (['--speculative-config={"num_speculative_tokens": "3"}'], "--speculative-config"),
        (["-cc.cudagraph_mode=2"], "-cc.cudagraph_mode"),
        (["-cc.level=Infinity"], "-cc.level"),
        (["--max-num-seqs 8 'unbalanced"], "--max-num-seqs"),
    ],
)
def test_an_unreadable_owned_flag_is_named_as_written(extra_args: list[str], flag: str) -> None:
    with pytest.raises(UnreadableFlagError) as caught:
        normalize_vllm(definition(*extra_args))
    assert caught.value.field == flag
    assert caught.value.reason


def test_an_unreadable_typed_mode_names_the_field() -> None:
    with pytest.raises(UnreadableFlagError) as caught:
        normalize_vllm(definition(compilation_config={"cudagraph_mode": 2}))
    assert caught.value.field == "compilationConfig"


@settings(max_examples=150, deadline=None)
@given(definitions())
def test_normalization_is_idempotent(model: ModelDefinition) -> None:
    once = normalize_vllm(model)
    assert normalize_vllm(once) == once


OWNED = {
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--kv-cache-dtype",
    "--mamba-cache-mode",
    "--enable-prefix-caching",
    "--no-enable-prefix-caching",
    "--async-scheduling",
    "--no-async-scheduling",
    "--speculative-config",
    "--compilation-config",
    "-cc",
}


@settings(max_examples=100, deadline=None)
@given(definitions())
def test_a_normalized_definition_keeps_no_owned_flag_in_extra_args(model: ModelDefinition) -> None:
    for arg in normalize_vllm(model).extra_args:
        name = arg.split()[0].split("=")[0].split(".")[0] if arg.strip() else arg
        assert (name.replace("_", "-") if name.startswith("--") else name) not in OWNED
