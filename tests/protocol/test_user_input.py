"""User input is validated strictly: unknown fields named (with a suggestion), limits a deployment never hits.

Wire messages and stored files stay tolerant (``from_wire``); only ``from_user_input`` /
``from_user_json`` refuse unknown fields and apply the user-input limits.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_protocol import (
    USER_INPUT_LIMITS,
    InvalidFieldError,
    ModelDefinition,
    Placement,
    WireModel,
    is_image_reference,
    unknown_field_reason,
)
from mirbad_protocol.admin import ApiKeyCreate

BASE: dict[str, Any] = {"id": "qwen", "servedName": "Qwen3-8B", "modelPath": "qwen/qwen3-8b"}


def refusal(data: object, model: type[WireModel] = ModelDefinition) -> InvalidFieldError:
    with pytest.raises(InvalidFieldError) as caught:
        model.from_user_input(data)
    return caught.value


@pytest.mark.parametrize(
    ("patch", "field", "suggestion"),
    [
        ({"maxModelLenn": 4096}, "maxModelLenn", "maxModelLen"),
        ({"memoryBudgetGIB": 8}, "memoryBudgetGIB", "memoryBudgetGiB"),
        ({"placement": {"nodeId": "gpu-1", "gpuUuid": ["GPU-1"]}}, "placement.gpuUuid", "gpuUuids"),
        ({"sources": [{"repoId": "a/b", "folder": "b", "revison": "main"}]}, "sources.0.revison", "revision"),
        (
            {"runtime": "llamacpp", "executable": {"name": "llama-server", "versoin": "1"}},
            "executable.versoin",
            "version",
        ),
        (
            {"speculative": {"method": "mtp", "num_speculative_token": 2}},
            "speculative.num_speculative_token",
            "num_speculative_tokens",
        ),
    ],
)
def test_a_misspelled_field_is_refused_with_a_suggestion(
    patch: dict[str, Any], field: str, suggestion: str
) -> None:
    error = refusal({**BASE, **patch})

    assert error.field == field
    assert f"did you mean `{suggestion}`?" in error.reason


def test_an_unknown_field_far_from_every_name_is_refused_without_a_suggestion() -> None:
    error = refusal({**BASE, "colour": "blue"})

    assert error.field == "colour"
    assert error.reason == "unknown field"


def test_free_form_maps_stay_free_form() -> None:
    definition = ModelDefinition.from_user_input(
        {
            **BASE,
            "extraArgs": ["--anything", "goes"],
            "compilationConfig": {"whatever": 1},
            "speculative": {"method": "ngram", "prompt_lookup_max": 4},
        }
    )

    assert definition.compilation_config == {"whatever": 1}
    assert definition.speculative is not None
    assert definition.speculative.extra == {"prompt_lookup_max": 4}


def test_wire_and_stored_files_stay_tolerant_of_additive_fields() -> None:
    definition = ModelDefinition.from_wire({**BASE, "maxModelLenn": 4096, "fromANewerMaster": True})

    assert definition.max_model_len == 8192


def test_user_json_is_strict_too() -> None:
    with pytest.raises(InvalidFieldError) as caught:
        ModelDefinition.from_user_json(json.dumps({**BASE, "maxModelLenn": 1}))
    with pytest.raises(InvalidFieldError) as not_json:
        ModelDefinition.from_user_json("{")

    assert caught.value.field == "maxModelLenn"
    assert not_json.value.field == "(document)"


def test_other_user_input_models_are_strict() -> None:
    error = refusal({"nodeid": "gpu-1"}, Placement)
    key = refusal({"name": "ci", "allowedModel": ["qwen"]}, ApiKeyCreate)

    assert (error.field, "did you mean `nodeId`?" in error.reason) == ("nodeid", True)
    assert (key.field, "did you mean `allowedModels`?" in key.reason) == ("allowedModel", True)


# ---------------------------------------------------------------- limits


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"memoryBudgetGiB": 1e308}, "memoryBudgetGiB"),
        ({"memoryBudgetGiB": 4096.5}, "memoryBudgetGiB"),
        ({"maxNumSeqs": 2**48}, "maxNumSeqs"),
        ({"maxModelLen": 16 * 1024 * 1024 + 1}, "maxModelLen"),
        ({"maxNumBatchedTokens": 2**40}, "maxNumBatchedTokens"),
        ({"idleUnloadSeconds": 1e12}, "idleUnloadSeconds"),
        (
            {
                "runtime": "llamacpp",
                "executable": {"name": "llama-server", "version": "1"},
                "gpuLayers": 10**9,
            },
            "gpuLayers",
        ),
        (
            {"speculative": {"method": "mtp", "num_speculative_tokens": 10**6}},
            "speculative.num_speculative_tokens",
        ),
        ({"servedName": "bell\x07"}, "servedName"),
        ({"servedName": "zero\u200bwidth"}, "servedName"),
        ({"image": "vllm/vllm-openai:latest:again"}, "image"),
        ({"image": "team/Vllm"}, "image"),
        ({"image": "x" * 300}, "image"),
    ],
)
def test_user_input_beyond_the_limits_is_refused(patch: dict[str, Any], field: str) -> None:
    assert refusal({**BASE, **patch}).field == field


def test_a_stored_definition_beyond_the_limits_still_loads() -> None:
    stored = ModelDefinition.from_wire(
        {**BASE, "memoryBudgetGiB": 1e308, "maxNumSeqs": 2**48, "image": "Odd:Image"}
    )

    assert stored.max_num_seqs == 2**48


def test_the_limits_are_the_documented_ones() -> None:
    assert USER_INPUT_LIMITS == {
        "memoryBudgetGiB": 4096,
        "maxModelLen": 16 * 1024 * 1024,
        "maxNumSeqs": 65536,
        "maxNumBatchedTokens": 16 * 1024 * 1024,
        "idleUnloadSeconds": 365 * 24 * 3600,
        "gpuLayers": 100_000,
        "speculative.num_speculative_tokens": 1024,
    }


def test_the_limits_are_in_the_json_schema() -> None:
    properties = ModelDefinition.model_json_schema(by_alias=True)["properties"]

    assert properties["memoryBudgetGiB"]["maximum"] == 4096
    assert properties["maxNumSeqs"]["maximum"] == 65536


@pytest.mark.parametrize(
    "image",
    [
        "vllm/vllm-openai:latest",
        "vllm/vllm-openai:v0.11.0",
        "registry.example.com:5000/team/vllm:cu128",
        "localhost/vllm",
        "ubuntu",
        "nvcr.io/nvidia/vllm@sha256:" + "a" * 64,
        "ghcr.io/org/img:1.0@sha256:" + "0" * 64,
        "[::1]:5000/img:tag",
        "my_org/my__image-name.v2",
    ],
)
def test_real_image_references_are_accepted(image: str) -> None:
    assert is_image_reference(image)
    assert ModelDefinition.from_user_input({**BASE, "image": image}).image == image


@pytest.mark.parametrize(
    "image",
    ["", "-lead", "a//b", "a/b/", "name:", "name@sha256:short", "a:b:c", "Name", "a b", "a:tag with space"],
)
def test_malformed_image_references_are_not(image: str) -> None:
    assert not is_image_reference(image)


@given(st.text(max_size=80))
def test_the_image_check_never_raises_and_accepts_only_what_docker_would(text: str) -> None:
    if is_image_reference(text):
        assert text == text.strip()
        assert not any(ch.isspace() or not ch.isprintable() for ch in text)


@given(st.dictionaries(st.text(min_size=1, max_size=20), st.integers(), max_size=4))
def test_strict_validation_only_ever_raises_invalid_field_error(extra: dict[str, Any]) -> None:
    # Anything but InvalidFieldError (a pydantic error, a KeyError of the suggestion lookup) fails.
    with contextlib.suppress(InvalidFieldError):
        ModelDefinition.from_user_input({**BASE, **extra})


def test_a_placement_names_a_node_id_in_user_input_only() -> None:
    assert refusal({"nodeId": "GPU box"}, Placement).field == "nodeId"
    assert Placement.from_wire({"nodeId": "GPU box"}).node_id == "GPU box"


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"modelPath": "a\udc80"}, "modelPath"),
        ({"extraArgs": ["--ok", "\ud800"]}, "extraArgs.1"),
        ({"compilationConfig": {"k\udfff": 1}}, "compilationConfig"),
        ({"speculative": {"method": "mtp", "draft": "\udc80"}}, "speculative.draft"),
    ],
)
def test_text_that_cannot_be_stored_as_utf8_is_refused(patch: dict[str, Any], field: str) -> None:
    # A JSON body may escape a lone surrogate ("\udc80"); the registry file is UTF-8 and could not hold it.
    error = refusal({**BASE, **patch})

    assert error.field == field
    assert "surrogate" in error.reason


def test_a_key_allow_list_refuses_unprintable_served_names() -> None:
    error = refusal({"name": "ci", "allowedModels": ["ok", "bad\x1b[0m"]}, ApiKeyCreate)

    assert error.field == "allowedModels.1"


WIRE_NAMES = [field.alias or name for name, field in ModelDefinition.model_fields.items()]


@given(st.sampled_from(WIRE_NAMES), st.integers(min_value=0, max_value=40), st.characters(codec="ascii"))
def test_a_one_letter_slip_suggests_a_real_field(name: str, at: int, letter: str) -> None:
    typo = name[: at % len(name)] + letter + name[at % len(name) + 1 :]
    reason = unknown_field_reason(typo, WIRE_NAMES)

    if reason != "unknown field":
        suggested = reason.removeprefix("unknown field; did you mean `").removesuffix("`?")
        assert suggested in WIRE_NAMES


@given(st.text(st.characters() | st.sampled_from(["\ud800", "\udc80", "\udfff"]), max_size=30))
def test_accepted_user_text_can_always_be_stored_as_utf8(text: str) -> None:
    with contextlib.suppress(InvalidFieldError):
        definition = ModelDefinition.from_user_input({**BASE, "extraArgs": [text], "tags": []})
        json.dumps(definition.to_wire(), ensure_ascii=False).encode("utf-8")


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.json")))
def test_the_shipped_examples_pass_as_user_input(example: str) -> None:
    assert ModelDefinition.from_user_json((EXAMPLES / example).read_text()).id
