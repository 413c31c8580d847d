"""The model editor's logic: a message per invalid field, the stored form, the exact command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_master.models._form import check_form, command_line, definition_from_form, form_from_definition
from mirbad_orchestration import build_args, normalize_definition
from mirbad_protocol import ModelDefinition

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

TINY: dict[str, Any] = {
    "id": "tiny",
    "servedName": "tiny",
    "runtime": "llamacpp",
    "executable": "llama-server@local",
    "modelPath": "tiny/tiny-llama.gguf",
    "maxModelLen": 256,
    "maxNumSeqs": 2,
    "memoryBudgetGiB": 0.5,
    "extraArgs": "",
    "tags": [],
    "nodeId": "",
}


def test_every_invalid_input_gets_its_own_message() -> None:
    values = {
        **TINY,
        "id": "Tiny_UI!",
        "servedName": "has space",
        "executable": "llama-server",
        "modelPath": "/absolute/path.gguf",
        "maxModelLen": 0,
        "extraArgs": '--alias "unclosed',
    }

    check = check_form(values, [])

    assert check.definition is None
    assert check.command is None
    assert set(check.errors) == {"id", "servedName", "executable", "modelPath", "maxModelLen", "extraArgs"}
    assert check.errors["id"].startswith("use 1 to 40 lowercase letters")
    assert "NAME@VERSION" in check.errors["executable"]
    assert "relative" in check.errors["modelPath"]
    assert "greater than 0" in check.errors["maxModelLen"]


def test_a_valid_form_previews_the_command_line_the_node_runs() -> None:
    check = check_form(TINY, [])

    assert check.errors == {}
    assert check.definition is not None
    assert check.command == "llama-server " + " ".join(build_args(check.definition))
    assert check.command.startswith("llama-server --model tiny/tiny-llama.gguf --alias tiny --ctx-size 512")


def test_the_idle_unload_time_is_kept_and_checked() -> None:
    kept = check_form({**TINY, "idleUnloadSeconds": 900}, [])
    cleared = check_form({**TINY, "idleUnloadSeconds": None}, [])
    refused = check_form({**TINY, "idleUnloadSeconds": 0}, [])

    assert kept.definition is not None
    assert kept.definition.idle_unload_s == 900
    assert cleared.definition is not None
    assert cleared.definition.idle_unload_s is None
    assert set(refused.errors) == {"idleUnloadSeconds"}


def test_the_preview_is_of_the_normalized_definition() -> None:
    check = check_form({**TINY, "extraArgs": "--parallel 4 --no-warmup", "tags": ["Chat", "chat"]}, [])

    assert check.definition is not None
    assert check.definition.max_num_seqs == 4  # lifted out of the extra arguments
    assert check.definition.extra_args == ["--no-warmup"]
    assert check.definition.tags == ["chat"]
    assert check.command is not None
    assert "--parallel 4" in check.command


def test_an_unreadable_owned_flag_is_reported_on_the_extra_arguments() -> None:
    check = check_form({**TINY, "extraArgs": "--ctx-size many"}, [])

    assert check.errors == {"extraArgs": "--ctx-size: 'many' is not a whole number"}


def test_a_served_name_another_model_uses_is_refused() -> None:
    other = ModelDefinition.from_wire(json.loads((EXAMPLES / "llamacpp-tiny.json").read_text()))

    check = check_form({**TINY, "id": "second", "servedName": "TINY-LLAMA"}, [other])

    assert check.errors == {"servedName": "'TINY-LLAMA' is already served by model 'tiny-llama'"}


def test_a_new_model_needs_a_free_id_but_an_edit_keeps_its_own() -> None:
    saved = check_form(TINY, []).definition
    assert saved is not None

    assert check_form(TINY, [saved]).errors == {"id": "a model with id 'tiny' exists already"}
    assert check_form({**TINY, "maxNumSeqs": 3}, [saved], base=saved).errors == {}


def test_vllm_settings_on_another_runtime_are_reported_on_the_runtime() -> None:
    vllm = ModelDefinition.from_wire(json.loads((EXAMPLES / "vllm-qwen3.json").read_text()))
    values = {**form_from_definition(vllm), "runtime": "llamacpp", "executable": "llama-server@local"}

    check = check_form(values, [vllm], base=vllm)

    assert set(check.errors) == {"runtime"}
    assert "vLLM setting" in check.errors["runtime"]


def test_the_vllm_preview_uses_the_node_memory() -> None:
    values = {**TINY, "runtime": "vllm", "image": "vllm/vllm-openai:v0.11.0", "executable": ""}

    small = check_form(values, [], total_gib=16).command
    large = check_form(values, [], total_gib=128).command

    assert small is not None
    assert small.startswith("vllm serve --model /models/tiny/tiny-llama.gguf")
    assert large is not None
    assert small != large


def test_a_vllm_budget_beyond_the_node_is_reported_on_the_budget() -> None:
    values = {**TINY, "runtime": "vllm", "image": "vllm/vllm-openai:v0.11.0", "executable": ""}

    check = check_form({**values, "memoryBudgetGiB": 200}, [], total_gib=128)

    assert set(check.errors) == {"memoryBudgetGiB"}
    assert "utilization" in check.errors["memoryBudgetGiB"]


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.json")), ids=lambda path: path.stem)
def test_an_edited_example_round_trips_unchanged(example: Path) -> None:
    saved = normalize_definition(ModelDefinition.from_wire(json.loads(example.read_text())))

    check = check_form(form_from_definition(saved), [saved], base=saved)

    assert check.errors == {}
    assert check.definition == saved
    assert check.command == command_line(saved)


_IDS = st.from_regex(r"[a-z0-9][a-z0-9-]{0,39}", fullmatch=True)
_NAMES = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,30}", fullmatch=True)


@given(model_id=_IDS, served_name=_NAMES, seqs=st.integers(1, 64), budget=st.floats(0.25, 512))
def test_form_values_of_a_definition_give_it_back(
    model_id: str, served_name: str, seqs: int, budget: float
) -> None:
    values = {
        **TINY,
        "id": model_id,
        "servedName": served_name,
        "maxNumSeqs": seqs,
        "memoryBudgetGiB": budget,
    }
    definition, errors = definition_from_form(values)
    assert errors == {}
    assert definition is not None

    again, errors = definition_from_form(form_from_definition(definition), base=definition)

    assert errors == {}
    assert again == definition


@pytest.mark.parametrize(("field", "value"), [("memoryBudgetGiB", 5000), ("maxNumSeqs", 2**48)])
def test_the_editor_holds_a_value_to_the_apis_user_input_limits(field: str, value: object) -> None:
    definition, errors = definition_from_form({**TINY, field: value})

    assert definition is None
    assert set(errors) == {field}
