"""A model's status read from Docker's description of its container."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from mirbad_protocol import GpuSelection, ModelState
from mirbad_runtime._container_state import gpus_of_container, status_from_container

LABELS = {
    "mirbad.model": "qwen3-8b",
    "mirbad.served-name": "qwen3",
    "mirbad.port": "8101",
    "mirbad.config-hash": "0123456789abcdef",
    "mirbad.budget-gib": "24.0",
}


def _attrs(status: str, **state: Any) -> dict[str, Any]:
    return {"Id": "abc", "Config": {"Labels": LABELS}, "State": {"Status": status, **state}}


@pytest.mark.parametrize(
    ("docker_status", "healthy", "expected"),
    [
        ("running", True, ModelState.READY),
        ("running", False, ModelState.STARTING),
        ("created", False, ModelState.STARTING),
        ("restarting", False, ModelState.STARTING),
        ("removing", False, ModelState.STOPPING),
        ("exited", False, ModelState.FAILED),
        ("dead", False, ModelState.FAILED),
        ("something-new", False, ModelState.STARTING),
    ],
)
def test_docker_states_map_to_model_states(docker_status: str, healthy: bool, expected: ModelState) -> None:
    assert status_from_container(_attrs(docker_status), healthy=healthy).state is expected


def test_the_labels_fill_the_status() -> None:
    status = status_from_container(
        _attrs("running", StartedAt="2025-01-02T03:04:05.123456789Z"), healthy=True
    )

    assert (
        status.id,
        status.served_name,
        status.port,
        status.config_hash,
        status.budget_gib,
        status.runtime,
    ) == (
        "qwen3-8b",
        "qwen3",
        8101,
        "0123456789abcdef",
        24.0,
        "vllm",
    )
    assert status.started_at == datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    assert status.error is None


def test_the_container_command_is_the_argv_read_back() -> None:
    attrs = _attrs("running")
    command = ["--model", "/models/qwen", "--max-num-seqs", "8"]
    attrs["Config"]["Cmd"] = command

    assert status_from_container(attrs, healthy=True).argv == command
    assert status_from_container(_attrs("running"), healthy=True).argv is None


def test_a_dead_container_carries_its_exit_code_and_last_20_log_lines() -> None:
    lines = [f"line {number}" for number in range(30)]
    status = status_from_container(
        _attrs("exited", ExitCode=137, Error="OOM killed", StartedAt="0001-01-01T00:00:00Z"),
        healthy=False,
        log_tail=lines,
    )

    assert status.error is not None
    assert status.error.splitlines() == ["the container exited with code 137: OOM killed", *lines[10:]]
    assert status.started_at is None


_BY_UUID = {"Driver": "nvidia", "Count": 0, "DeviceIDs": ["GPU-a", "GPU-b"], "Capabilities": [["gpu"]]}
# What ``docker create --gpus device=GPU-c`` stores: no driver, the capability alone.
_BY_CLI = {"Driver": "", "Count": 0, "DeviceIDs": ["GPU-c"], "Capabilities": [["gpu"]], "Options": {}}
_ALL = {"Driver": "nvidia", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]]}
_TWO = {"Driver": "nvidia", "Count": 2, "Capabilities": [["gpu"]]}
_OTHER = {"Driver": "cdi", "DeviceIDs": ["vendor.com/fpga=0"], "Capabilities": [["fpga"]]}


@pytest.mark.parametrize(
    ("requests", "expected"),
    [
        ([_BY_UUID], GpuSelection(mode="uuids", uuids=["GPU-a", "GPU-b"])),
        ([_BY_UUID, _BY_CLI], GpuSelection(mode="uuids", uuids=["GPU-a", "GPU-b", "GPU-c"])),
        ([_ALL], None),
        ([_TWO], None),
        (None, GpuSelection(mode="none")),
        ([_OTHER], GpuSelection(mode="none")),
    ],
    ids=["uuids", "two-requests", "all", "by-count", "no-request", "not-a-gpu"],
)
def test_the_gpus_of_a_container_come_from_its_device_requests(
    requests: list[dict[str, Any]] | None, expected: GpuSelection | None
) -> None:
    attrs = {**_attrs("running"), "HostConfig": {"DeviceRequests": requests}}

    assert gpus_of_container(attrs) == expected
    assert status_from_container(attrs, healthy=True).gpus == expected
