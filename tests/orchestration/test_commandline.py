"""The runtime-dispatching entry points and the launch spec the master sends an agent."""

from __future__ import annotations

from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from mirbad_orchestration import (
    build_args,
    config_hash,
    detect_runtime,
    launch_spec_for,
    normalize_definition,
    parse_args,
)
from mirbad_protocol import ContainerLaunch, ModelDefinition, Placement, ProcessLaunch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str) -> ModelDefinition:
    return ModelDefinition.from_wire_json((EXAMPLES / name).read_text())


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.json")))
def test_launch_spec_of_each_example(name: str, snapshot_json: SnapshotAssertion) -> None:
    spec = launch_spec_for(example(name), total_gib=121, labels={"mirbad.owner": "test"})
    assert spec.to_wire() == snapshot_json


def test_container_spec_hash_covers_image_and_argv() -> None:
    definition = example("vllm-qwen3.json")
    spec = launch_spec_for(definition, total_gib=121)
    assert isinstance(spec, ContainerLaunch)
    assert spec.config_hash == config_hash(definition.image, build_args(definition, total_gib=121))
    other_image = definition.model_copy(update={"image": "vllm/vllm-openai:v0.12.0"})
    assert launch_spec_for(other_image, total_gib=121).config_hash != spec.config_hash


def test_unchanged_definition_keeps_its_hash_through_normalization() -> None:
    definition = example("vllm-qwen3.json")
    normalized = normalize_definition(definition)
    assert normalized != definition  # the example carries --max-num-seqs=48 in extraArgs
    assert launch_spec_for(normalized).config_hash == launch_spec_for(definition).config_hash


def test_process_spec_hash_covers_the_executable_version() -> None:
    definition = example("llamacpp-tiny.json")
    spec = launch_spec_for(definition)
    assert isinstance(spec, ProcessLaunch)
    assert spec.kind == "process"
    upgraded = definition.model_copy(
        update={"executable": definition.executable.model_copy(update={"version": "99999"})}  # type: ignore[union-attr]
    )
    assert launch_spec_for(upgraded).config_hash != spec.config_hash


def test_placement_selects_gpus() -> None:
    definition = example("vllm-qwen3.json").model_copy(
        update={"placement": Placement(node_id="n1", gpu_uuids=["GPU-a", "GPU-b"])}
    )
    spec = launch_spec_for(definition)
    assert (spec.gpus.mode, spec.gpus.uuids) == ("uuids", ["GPU-a", "GPU-b"])
    assert launch_spec_for(example("vllm-qwen3.json")).gpus.mode == "all"


@pytest.mark.parametrize(
    ("argv", "runtime"),
    [
        (["--model", "/models/x"], "vllm"),
        (["vllm", "serve", "--model", "/models/x"], "vllm"),
        (["/usr/local/bin/llama-server", "-m", "x.gguf"], "llamacpp"),
        (["C:\\llama\\llama-server.exe", "-m", "x.gguf"], "llamacpp"),
        (["mlx_lm.server", "--model", "x"], "mlx"),
        ([], "vllm"),
    ],
)
def test_detect_runtime(argv: list[str], runtime: str) -> None:
    assert detect_runtime(argv) == runtime


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.json")))
def test_parse_of_build_is_the_normalized_definition(name: str) -> None:
    definition = normalize_definition(example(name))
    argv = build_args(definition, total_gib=121)
    parsed = parse_args(
        argv,
        runtime=definition.runtime,
        model_id=definition.id,
        image=definition.image,
        executable=definition.executable,
        total_gib=121,
    )
    assert build_args(parsed, total_gib=121) == argv
