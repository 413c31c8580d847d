"""The model definition on the wire: names, defaults, validation that names the field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from syrupy.assertion import SnapshotAssertion

from mirbad_protocol import InvalidFieldError, ModelDefinition, SpeculativeDecoding

FULL: dict[str, Any] = {
    "id": "qwen3-30b",
    "servedName": "qwen3-30b-a3b",
    "runtime": "vllm",
    "image": "vllm/vllm-openai:v0.11.0",
    "modelPath": "Qwen3-30B-A3B-FP8",
    "quantization": "fp8",
    "kvCacheDtype": "fp8",
    "maxModelLen": 32768,
    "maxNumSeqs": 32,
    "maxNumBatchedTokens": 8192,
    "memoryBudgetGiB": 48.5,
    "toolCallParser": "hermes",
    "reasoningParser": "qwen3",
    "enablePrefixCaching": False,
    "speculative": {"method": "mtp", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 1},
    "compilationConfig": {"level": 3, "custom_ops": ["none"]},
    "cudaGraphMode": "FULL_AND_PIECEWISE",
    "asyncScheduling": True,
    "mambaCacheMode": "align",
    "extraArgs": ["--trust-remote-code", "--max-log-len", "100"],
    "tags": ["chat", "moe"],
    "sources": [{"repoId": "Qwen/Qwen3-30B-A3B-FP8", "folder": "Qwen3-30B-A3B-FP8", "revision": "main"}],
    "placement": {"nodeId": "spark-1", "gpuUuids": ["GPU-1234"]},
    "autoStart": True,
    "autoStartOnRequest": True,
}

LLAMA: dict[str, Any] = {
    "id": "tiny",
    "servedName": "tiny",
    "runtime": "llamacpp",
    "executable": {"name": "llama-server", "version": "b6000"},
    "modelPath": "tiny/tiny.gguf",
    "kvCacheDtype": "q8_0",
    "gpuLayers": 99,
    "memoryBudgetGiB": 1,
}


def test_full_definition_round_trips_with_camel_case_names(snapshot_json: SnapshotAssertion) -> None:
    definition = ModelDefinition.from_wire(FULL)
    wire = definition.to_wire()
    assert wire == snapshot_json
    assert ModelDefinition.from_wire(wire) == definition
    assert definition.memory_budget_gib == 48.5
    assert definition.cudagraph_mode == "FULL_AND_PIECEWISE"


def test_llamacpp_definition_snapshot(snapshot_json: SnapshotAssertion) -> None:
    assert ModelDefinition.from_wire(LLAMA).to_wire() == snapshot_json


def test_a_process_runtime_stores_no_container_image() -> None:
    # The field's default is vLLM's image: a llama.cpp model stored it although it runs no container.
    stored = ModelDefinition.from_wire(LLAMA)
    assert stored.image == ""
    assert ModelDefinition.from_wire({**LLAMA, "image": "vllm/vllm-openai:latest"}).image == ""
    assert ModelDefinition.from_wire(stored.to_wire()) == stored
    assert ModelDefinition.from_wire({"id": "m", "servedName": "m", "modelPath": "m"}).image == (
        "vllm/vllm-openai:latest"
    )


def test_defaults_are_omitted_on_the_wire() -> None:
    minimal = {"id": "m", "servedName": "m", "modelPath": "m"}
    assert ModelDefinition.from_wire(minimal).to_wire() == minimal


def test_unknown_fields_are_tolerated() -> None:
    definition = ModelDefinition.from_wire({**FULL, "someFutureField": {"x": 1}})
    assert "someFutureField" not in definition.to_wire()


def test_python_names_work_too() -> None:
    definition = ModelDefinition(id="a", served_name="A", model_path="a", memory_budget_gib=2)
    assert definition.to_wire()["memoryBudgetGiB"] == 2


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"id": "Bad_Id"}, "id"),
        ({"id": "a" * 41}, "id"),
        ({"id": "-lead"}, "id"),
        ({"servedName": "has space"}, "servedName"),
        ({"servedName": ""}, "servedName"),
        ({"modelPath": "../etc"}, "modelPath"),
        ({"modelPath": "/abs/path"}, "modelPath"),
        ({"modelPath": "a//b"}, "modelPath"),
        ({"maxModelLen": 0}, "maxModelLen"),
        ({"maxNumSeqs": "many"}, "maxNumSeqs"),
        ({"memoryBudgetGiB": -1}, "memoryBudgetGiB"),
        ({"memoryBudgetGiB": "nan"}, "memoryBudgetGiB"),
        ({"runtime": "ollama"}, "runtime"),
        ({"enablePrefixCaching": "maybe"}, "enablePrefixCaching"),
        ({"speculative": {"num_speculative_tokens": -1}}, "speculative.num_speculative_tokens"),
        ({"sources": [{"repoId": "no-slash", "folder": "x"}]}, "sources.0.repoId"),
        ({"sources": [{"repoId": "a/b", "folder": "x/y"}]}, "sources.0.folder"),
        ({"image": ""}, "image"),
        ({"gpuLayers": 10}, "gpuLayers"),
        ({"runtime": "llamacpp"}, "executable"),
    ],
)
def test_invalid_fields_are_named(patch: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidFieldError) as caught:
        ModelDefinition.from_wire({**FULL, **patch, "gpuLayers": patch.get("gpuLayers")})
    assert caught.value.field == field
    assert field in str(caught.value)


def test_vllm_only_settings_are_refused_on_a_process_runtime() -> None:
    with pytest.raises(InvalidFieldError) as caught:
        ModelDefinition.from_wire({**LLAMA, "speculative": {"method": "mtp"}})
    assert caught.value.field == "speculative"
    assert "vLLM setting" in caught.value.reason


def test_invalid_json_document_is_reported() -> None:
    with pytest.raises(InvalidFieldError) as caught:
        ModelDefinition.from_wire_json("{not json")
    assert caught.value.field == "(document)"


def test_speculative_reads_the_dotnet_and_camel_spellings() -> None:
    pascal = SpeculativeDecoding.from_wire({"Method": "mtp", "NumSpeculativeTokens": 3})
    camel = SpeculativeDecoding.from_wire({"method": "mtp", "numSpeculativeTokens": 3})
    vllm = SpeculativeDecoding.from_wire({"method": "mtp", "num_speculative_tokens": 3})
    assert pascal == camel == vllm
    assert vllm.as_vllm_object() == {"method": "mtp", "num_speculative_tokens": 3}


def test_speculative_keeps_every_key_sorted() -> None:
    spec = SpeculativeDecoding.from_wire({"z_key": [1], "model": "/models/draft", "a_key": {"b": 1}})
    assert list(spec.as_vllm_object()) == ["a_key", "model", "z_key"]
    assert spec.extra == {"z_key": [1], "a_key": {"b": 1}}
    assert SpeculativeDecoding.from_wire(spec.to_wire()) == spec


def test_empty_speculative_is_empty() -> None:
    assert SpeculativeDecoding().is_empty()
    assert SpeculativeDecoding(method="").is_empty()


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**31), 2**31), st.text(max_size=8))


TYPED_KEYS = {
    "method",
    "Method",
    "model",
    "Model",
    "extra",
    "num_speculative_tokens",
    "NumSpeculativeTokens",
    "numSpeculativeTokens",
}
extra_keys = st.text(min_size=1, max_size=10).filter(lambda key: key not in TYPED_KEYS)


@given(extra=st.dictionaries(extra_keys, json_scalars, max_size=5))
def test_speculative_round_trips_any_extra_keys(extra: dict[str, Any]) -> None:
    spec = SpeculativeDecoding.from_wire({**extra, "method": "ngram", "num_speculative_tokens": 4})
    assert SpeculativeDecoding.from_wire(json.loads(json.dumps(spec.to_wire()))) == spec
