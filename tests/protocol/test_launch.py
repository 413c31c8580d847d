"""Launch specs: what the master sends an agent, told apart by ``kind``."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter
from syrupy.assertion import SnapshotAssertion

from mirbad_protocol import (
    ContainerLaunch,
    ExecutableRef,
    GpuSelection,
    InvalidFieldError,
    LaunchSpec,
    ProcessLaunch,
)

ADAPTER: TypeAdapter[ContainerLaunch | ProcessLaunch] = TypeAdapter(LaunchSpec)

CONTAINER = ContainerLaunch(
    model_id="qwen",
    served_name="qwen",
    runtime="vllm",
    image="vllm/vllm-openai:v0.11.0",
    argv=["--model", "/models/qwen", "--served-model-name", "qwen"],
    model_path="qwen",
    env={"HF_HUB_OFFLINE": "1"},
    budget_gib=24,
    gpus=GpuSelection(mode="uuids", uuids=["GPU-1"]),
    labels={"mirbad.owner": "master-1"},
    config_hash="0123456789abcdef",
)

PROCESS = ProcessLaunch(
    model_id="tiny",
    served_name="tiny",
    runtime="llamacpp",
    executable=ExecutableRef(name="llama-server", version="b6000"),
    argv=["--model", "tiny.gguf", "--alias", "tiny"],
    model_path="tiny.gguf",
    budget_gib=0.5,
    gpus=GpuSelection(mode="none"),
    config_hash="fedcba9876543210",
)


@pytest.mark.parametrize("spec", [CONTAINER, PROCESS], ids=["container", "process"])
def test_launch_spec_envelopes(
    spec: ContainerLaunch | ProcessLaunch, snapshot_json: SnapshotAssertion
) -> None:
    wire = spec.to_wire()
    assert wire["kind"] == spec.kind
    assert wire == snapshot_json
    assert ADAPTER.validate_python(wire) == spec


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"configHash": "XYZ"}, "configHash"),
        ({"env": {"1BAD": "x"}}, "env"),
        ({"budgetGiB": 0}, "budgetGiB"),
        ({"modelId": "Bad"}, "modelId"),
        ({"image": ""}, "image"),
    ],
)
def test_invalid_launch_spec_names_the_field(patch: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidFieldError) as caught:
        ContainerLaunch.from_wire({**CONTAINER.to_wire(), **patch})
    assert caught.value.field == field
