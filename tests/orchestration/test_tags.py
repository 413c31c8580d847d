"""Model tags: catalogue, normalization, the ALL-tags filter rule and suggestions."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_orchestration.registry import (
    MAX_TAGS,
    TAG_CATALOGUE,
    filter_by_tags,
    has_all,
    normalize_tags,
    suggest_tags,
)
from mirbad_protocol import InvalidFieldError, ModelDefinition

SLUG = re.compile(r"[a-z0-9-]{1,24}")
CATALOGUE_SLUGS = [info.slug for info in TAG_CATALOGUE]


def model(**fields: Any) -> ModelDefinition:
    return ModelDefinition.from_wire({"id": "m", "servedName": "m", "modelPath": "m", **fields})


def llama(**fields: Any) -> ModelDefinition:
    return model(runtime="llamacpp", executable={"name": "llama-server", "version": "b6000"}, **fields)


# ---------------------------------------------------------------- catalogue


def test_catalogue_entries_are_valid_unique_and_described() -> None:
    assert 14 <= len(TAG_CATALOGUE) <= 20
    assert len(set(CATALOGUE_SLUGS)) == len(CATALOGUE_SLUGS)
    for info in TAG_CATALOGUE:
        assert normalize_tags([info.slug]) == [info.slug]
        assert info.label
        assert info.description.endswith(".")
    assert {"chat", "code", "embedding", "reranker", "vision", "tools", "reasoning"} <= set(CATALOGUE_SLUGS)


# ---------------------------------------------------------------- normalize_tags


@pytest.mark.parametrize(
    ("given_tags", "expected"),
    [
        ([], []),
        (["Chat"], ["chat"]),
        (["  long context  "], ["long-context"]),
        (["long_context", "Long-Context", "long  -  context"], ["long-context"]),
        (["code", "", "   ", "-", "chat", "CODE"], ["code", "chat"]),
        (["-moe-"], ["moe"]),
        (["a" * 24], ["a" * 24]),
        (["qwen3", "fp8"], ["qwen3", "fp8"]),
    ],
)
def test_normalize_tags(given_tags: list[str], expected: list[str]) -> None:
    assert normalize_tags(given_tags) == expected


@pytest.mark.parametrize(
    ("given_tags", "field", "reason"),
    [
        (["chat", "c++"], "tags[1]", "a-z, 0-9"),
        (["ok", "", "über"], "tags[2]", "a-z, 0-9"),
        (["a" * 25], "tags[0]", "longer than 24"),
        ([f"tag-{i}" for i in range(MAX_TAGS + 1)], "tags", "at most 12"),
    ],
)
def test_normalize_tags_names_the_bad_tag(given_tags: list[str], field: str, reason: str) -> None:
    with pytest.raises(InvalidFieldError, match=re.escape(reason)) as caught:
        normalize_tags(given_tags)
    assert caught.value.field == field


def test_twelve_distinct_tags_after_de_duplication_are_fine() -> None:
    tags = [f"tag-{i}" for i in range(MAX_TAGS)] * 2
    assert len(normalize_tags(tags)) == MAX_TAGS


def outcome(tags: list[str]) -> list[str] | InvalidFieldError:
    try:
        return normalize_tags(tags)
    except InvalidFieldError as exc:
        return exc


TAG_TEXT = st.one_of(st.text(max_size=30), st.text(alphabet="aZ9 _-.\t", max_size=30))


@given(st.lists(TAG_TEXT, max_size=16))
def test_normalize_tags_is_idempotent_and_valid_or_raises(tags: list[str]) -> None:
    result = outcome(tags)
    if isinstance(result, InvalidFieldError):
        assert re.fullmatch(r"tags(\[\d+\])?", result.field)
        return
    assert normalize_tags(result) == result
    assert len(result) <= MAX_TAGS
    assert len(set(result)) == len(result)
    assert all(SLUG.fullmatch(tag) for tag in result)


# ---------------------------------------------------------------- has_all / filter


@pytest.mark.parametrize(
    ("tags", "selected", "expected"),
    [
        (["chat", "code"], [], True),
        ([], [], True),
        ([], ["chat"], False),
        (["chat", "code"], ["chat"], True),
        (["chat", "code"], ["code", "chat"], True),
        (["chat", "code"], ["chat", "vision"], False),
        (["long-context"], ["Long_Context"], True),
        (["chat"], ["", " "], True),
    ],
)
def test_has_all_needs_every_selected_tag(tags: list[str], selected: list[str], expected: bool) -> None:
    assert has_all(tags, selected) is expected


def test_filter_by_tags_keeps_order_and_applies_the_all_rule() -> None:
    a = model(id="a", servedName="a", tags=["chat", "code"])
    b = model(id="b", servedName="b", tags=["chat"])
    c = model(id="c", servedName="c", tags=["code", "chat", "vision"])
    assert filter_by_tags([a, b, c], []) == [a, b, c]
    assert filter_by_tags([a, b, c], ["chat", "code"]) == [a, c]
    assert filter_by_tags([a, b, c], ["vision"]) == [c]


# ---------------------------------------------------------------- suggest_tags

SUGGEST_CASES: list[tuple[str, ModelDefinition, str | None, bool, list[str]]] = [
    ("nothing known", model(), None, False, []),
    (
        "moe fp8 with parsers",
        model(
            id="qwen3-30b",
            servedName="qwen3-30b-a3b",
            modelPath="Qwen3-30B-A3B-FP8",
            quantization="fp8",
            toolCallParser="hermes",
            reasoningParser="qwen3",
        ),
        "Qwen3MoeForCausalLM",
        False,
        ["chat", "reasoning", "tools", "quantized", "moe"],
    ),
    (
        "vllm pooling runner",
        model(id="bge-m3", extraArgs=["--runner", "pooling"]),
        "XLMRobertaModel",
        False,
        ["embedding"],
    ),
    (
        "task embed on a causal lm",
        model(servedName="qwen3-embedding-0.6b", extraArgs=["--task=embed"]),
        "Qwen3ForCausalLM",
        False,
        ["embedding", "small"],
    ),
    (
        "convert classify in one-line and = forms",
        model(modelPath="Qwen3-Reranker-4B", extraArgs=["--runner pooling", "--convert=classify"]),
        "Qwen3ForCausalLM",
        False,
        ["reranker", "small"],
    ),
    ("sequence classification architecture", model(), "BertForSequenceClassification", False, ["reranker"]),
    (
        "llama.cpp coder gguf",
        llama(
            id="coder", modelPath="qwen2.5-coder-7b/qwen2.5-coder-7b-instruct-q4_k_m.gguf", maxModelLen=131072
        ),
        None,
        False,
        ["chat", "code", "quantized", "long-context", "gguf"],
    ),
    (
        "llama.cpp embeddings",
        llama(id="tiny", modelPath="tiny/tiny.gguf", extraArgs=["--embeddings", "--pooling", "mean"]),
        None,
        False,
        ["embedding", "gguf"],
    ),
    ("llama.cpp reranking", llama(extraArgs=["--reranking"]), None, False, ["reranker", "gguf"]),
    (
        "vision config",
        model(servedName="gemma-3-27b-it"),
        "Gemma3ForConditionalGeneration",
        True,
        ["chat", "vision"],
    ),
    (
        "vl architecture awq",
        model(servedName="qwen2.5-vl-3b-instruct", quantization="awq"),
        "Qwen2_5_VLForConditionalGeneration",
        False,
        ["chat", "vision", "quantized", "small"],
    ),
    ("mmproj", llama(extraArgs=["--mmproj", "mmproj.gguf"]), None, False, ["vision", "gguf"]),
    (
        "mamba hybrid",
        model(servedName="nemotron-nano-9b-v2", mambaCacheMode="align"),
        "NemotronHForCausalLM",
        False,
        ["chat", "hybrid"],
    ),
    (
        "typed mtp",
        model(speculative={"method": "mtp", "num_speculative_tokens": 2}),
        "Glm4MoeForCausalLM",
        False,
        ["chat", "speculative", "moe"],
    ),
    (
        "dotted speculative flag on a base model",
        model(servedName="llama-3.1-8b-base", extraArgs=["--speculative-config.num_speculative_tokens=3"]),
        "LlamaForCausalLM",
        False,
        ["speculative"],
    ),
    ("llama.cpp draft", llama(extraArgs=["-md", "draft.gguf"]), None, False, ["speculative", "gguf"]),
    (
        "mlx 4bit",
        model(
            runtime="mlx",
            executable={"name": "mlx-lm", "version": "0.26"},
            modelPath="mlx-community/Qwen3-4B-4bit",
        ),
        None,
        False,
        ["quantized", "small", "mlx"],
    ),
    (
        "whisper is audio, not chat",
        model(servedName="whisper-large-v3"),
        "WhisperForConditionalGeneration",
        False,
        ["audio"],
    ),
    (
        "tool flags in extra args",
        model(extraArgs=["--enable-auto-tool-choice", "--tool_call_parser", "hermes"]),
        None,
        False,
        ["tools"],
    ),
    (
        "reasoning format none is not reasoning",
        llama(extraArgs=["--reasoning-format", "none"]),
        None,
        False,
        ["gguf"],
    ),
    (
        "reasoning format deepseek",
        llama(extraArgs=["--reasoning-format", "deepseek"]),
        None,
        False,
        ["reasoning", "gguf"],
    ),
    (
        "r1 distill name",
        model(servedName="deepseek-r1-distill-qwen-1.5b"),
        None,
        False,
        ["reasoning", "small"],
    ),
    ("mixtral name", model(servedName="mixtral-8x7b-instruct"), None, False, ["chat", "moe"]),
    (
        "extra max-model-len wins",
        model(maxModelLen=8192, extraArgs=["--max-model-len", "128k"]),
        None,
        False,
        ["long-context"],
    ),
    (
        "llama.cpp -c wins over a long typed length",
        llama(maxModelLen=131072, extraArgs=["-c", "8192"]),
        None,
        False,
        ["gguf"],
    ),
    ("kv cache fp8 alone is not weight quantization", model(kvCacheDtype="fp8"), None, False, []),
    ("small by millions", model(servedName="smollm2-135m-instruct"), None, False, ["chat", "small"]),
]


@pytest.mark.parametrize(
    ("definition", "architecture", "has_vision_config", "expected"),
    [case[1:] for case in SUGGEST_CASES],
    ids=[case[0] for case in SUGGEST_CASES],
)
def test_suggest_tags(
    definition: ModelDefinition, architecture: str | None, has_vision_config: bool, expected: list[str]
) -> None:
    assert suggest_tags(definition, architecture, has_vision_config) == expected


NAMES = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,30}", fullmatch=True)
ARGS = st.lists(
    st.sampled_from(["--runner", "pooling", "--task", "embed", "-c", "9", "--mmproj", "x", "--a=b"])
)


@given(NAMES, NAMES, ARGS, st.one_of(st.none(), st.text(max_size=30)), st.booleans())
def test_suggestions_are_catalogue_slugs_in_catalogue_order(
    served_name: str, model_path: str, extra_args: list[str], architecture: str | None, vision: bool
) -> None:
    definition = model(servedName=served_name, modelPath=model_path, extraArgs=extra_args)
    suggested = suggest_tags(definition, architecture, vision)
    assert suggested == [slug for slug in CATALOGUE_SLUGS if slug in suggested]
    assert normalize_tags(suggested) == suggested
