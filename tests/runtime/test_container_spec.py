"""The Docker create arguments the container driver derives from a launch spec (golden files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from syrupy.assertion import SnapshotAssertion

from mirbad_protocol import ContainerLaunch, GpuSelection
from mirbad_runtime import ContainerDriverConfig, container_name
from mirbad_runtime._container_spec import create_arguments

CONFIG = ContainerDriverConfig(models_host_path=Path("/srv/models"), cache_host_path=Path("/srv/cache"))


def _spec(**changes: Any) -> ContainerLaunch:
    fields: dict[str, Any] = {
        "model_id": "qwen3-8b",
        "served_name": "qwen3",
        "runtime": "vllm",
        "image": "vllm/vllm-openai:v0.11.0",
        "argv": ["--model", "/models/Qwen3-8B", "--served-model-name", "qwen3"],
        "model_path": "Qwen3-8B",
        "env": {"HF_HUB_OFFLINE": "1"},
        "budget_gib": 24.0,
        "labels": {"mirbad.tuning": "1"},
        "config_hash": "0123456789abcdef",
        **changes,
    }
    return ContainerLaunch(**fields)


def test_create_arguments_of_a_gpu_model(snapshot_json: SnapshotAssertion) -> None:
    assert create_arguments(_spec(), CONFIG, 8101) == snapshot_json


def test_listed_gpus_are_requested_by_uuid(snapshot_json: SnapshotAssertion) -> None:
    spec = _spec(gpus=GpuSelection(mode="uuids", uuids=["GPU-1", "GPU-2"]))

    assert create_arguments(spec, CONFIG, 8100)["device_requests"] == snapshot_json


@pytest.mark.parametrize(
    ("spec", "config"),
    [
        (_spec(gpus=GpuSelection(mode="none")), CONFIG),
        (_spec(), ContainerDriverConfig(models_host_path=Path("/m"), cache_host_path=Path("/c"), gpus=False)),
    ],
    ids=["spec-without-gpus", "node-without-nvidia"],
)
def test_no_device_request_without_gpus(spec: ContainerLaunch, config: ContainerDriverConfig) -> None:
    assert "device_requests" not in create_arguments(spec, config, 8100)


def test_the_driver_labels_win_over_the_spec_labels() -> None:
    spec = _spec(labels={"mirbad.model": "someone-else", "mirbad.port": "1", "team": "a"})
    labels = create_arguments(spec, CONFIG, 8100)["labels"]

    assert (labels["mirbad.model"], labels["mirbad.port"], labels["team"]) == ("qwen3-8b", "8100", "a")


def test_an_entrypoint_override_replaces_the_image_entrypoint() -> None:
    config = ContainerDriverConfig(
        models_host_path=Path("/m"),
        cache_host_path=Path("/c"),
        entrypoint=("python3", "-m", "vllm.entrypoints.openai.api_server"),
    )

    assert create_arguments(_spec(), config, 8100)["entrypoint"] == [
        "python3",
        "-m",
        "vllm.entrypoints.openai.api_server",
    ]
    assert "entrypoint" not in create_arguments(_spec(), CONFIG, 8100)


@pytest.mark.parametrize(("start", "end"), [(0, 10), (9000, 8999), (65000, 65536)])
def test_a_config_refuses_a_broken_port_range(start: int, end: int) -> None:
    with pytest.raises(ValueError, match="port range"):
        ContainerDriverConfig(
            models_host_path=Path("/m"),
            cache_host_path=Path("/c"),
            port_range_start=start,
            port_range_end=end,
        )


def test_container_name() -> None:
    assert container_name("qwen3-8b") == "ss-qwen3-8b"
