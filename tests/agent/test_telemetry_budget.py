"""The budget fallback: a GPU node whose processes cannot be listed sends each model's budget, marked.

The sources in order: hostd (real, on its socket), the agent's own nvidia-smi (the stand-in), then the
budget, only on a node that has an NVIDIA GPU (nvidia-smi installed, or the driver's
``/proc/driver/nvidia/gpus`` listing one). A CPU-only node has no GPU memory to estimate: its samples
carry none, whatever fails.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path

import httpx
import pytest
from tests._support.hostd import FAKE_NVIDIA_SMI, hostd_layout, running_hostd
from tests.agent.test_telemetry_gpu import VLLM, Agent

from mirbad_protocol.agent import GPU_MEMORY_FROM_BUDGET
from mirbad_protocol.hostd import HostdErrorCode, hostd_error_body
from mirbad_runtime import (
    GpuOwner,
    HostdClient,
    HostdGpuProcessProbe,
    NvidiaSmiProcessProbe,
    PreferredGpuProcessProbe,
    nvidia_gpu_present,
)

pytestmark = pytest.mark.anyio

GIB = 1024**3
MIB = 1024 * 1024


def _older_hostd(request: httpx.Request) -> httpx.Response:
    # A hostd from before GET /gpu-processes: its router's 404 in its own envelope.
    return httpx.Response(404, json=hostd_error_body(HostdErrorCode.NOT_FOUND, "no such route"))


@contextmanager
def _failing_hostd(tmp_path: Path) -> Iterator[Path]:
    # A real hostd whose nvidia-smi fails: it answers 503 gpu_unavailable.
    with hostd_layout(tmp_path / "hostd") as layout:
        layout.root.mkdir(parents=True, exist_ok=True)
        layout.write_seed([])
        layout.write_fixtures(gpu_exit=9)
        with running_hostd(layout):
            yield layout.socket


@asynccontextmanager
async def _hostd(case: str, tmp_path: Path) -> AsyncIterator[HostdClient]:
    if case == "older":
        async with HostdClient(transport=httpx.MockTransport(_older_hostd)) as client:
            yield client
    elif case == "failing":
        with _failing_hostd(tmp_path) as socket:
            async with HostdClient(socket) as client:
                yield client
    else:
        async with HostdClient(tmp_path / "no-hostd.sock") as client:
            yield client


@pytest.fixture
def gpu_driver(tmp_path: Path) -> Path:
    """A /proc whose NVIDIA driver lists one GPU (what a node or a container given the GPUs has)."""
    proc = tmp_path / "proc"
    (proc / "driver" / "nvidia" / "gpus" / "0000:01:00.0").mkdir(parents=True)
    return proc


def _running(agent: Agent) -> AbstractAsyncContextManager[Agent]:
    @asynccontextmanager
    async def scope() -> AsyncIterator[Agent]:
        async with agent.client, agent.services:
            await agent.run_models()
            yield agent

    return scope()


@pytest.mark.parametrize("hostd", ["missing", "older", "failing"])
async def test_a_gpu_node_without_a_process_list_sends_each_models_budget(
    hostd: str, tmp_path: Path, gpu_driver: Path
) -> None:
    # No nvidia-smi beside the agent (an agent container without it), yet the driver lists a GPU.
    present = partial(nvidia_gpu_present, str(tmp_path / "absent-nvidia-smi"), proc_root=gpu_driver)
    async with _hostd(hostd, tmp_path) as client:
        local = NvidiaSmiProcessProbe(str(tmp_path / "absent-nvidia-smi"), proc_root=gpu_driver)
        probe = PreferredGpuProcessProbe([HostdGpuProcessProbe(client), local])
        async with _running(Agent(probe, present)) as agent:
            latest = await agent.latest()
            raw = (await agent.client.get("/telemetry")).json()
    assert {model_id: (s.gpu_memory_bytes, s.gpu_memory_source) for model_id, s in latest.items()} == {
        "vllm": (GIB, "budget"),
        "llama": (GIB, "budget"),
    }
    assert raw["models"][0]["samples"][-1]["gpuMemorySource"] == GPU_MEMORY_FROM_BUDGET
    assert "hostSamples" not in raw  # no reading: nothing is said about the host services


async def test_a_failing_nvidia_smi_on_a_gpu_node_falls_back_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "gpu.json"
    state.write_text(json.dumps({"exit": 9}))
    monkeypatch.setenv("MIRBAD_FAKE_NVIDIA_SMI_STATE", str(state))
    present = partial(nvidia_gpu_present, str(FAKE_NVIDIA_SMI), proc_root=tmp_path / "no-proc")
    async with _running(Agent(NvidiaSmiProcessProbe(str(FAKE_NVIDIA_SMI)), present)) as agent:
        latest = await agent.latest()
    assert {s.gpu_memory_source for s in latest.values()} == {"budget"}


async def test_a_reading_wins_over_the_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc = tmp_path / "proc"
    (proc / "101").mkdir(parents=True)
    (proc / "101" / "cgroup").write_text(f"0::/system.slice/docker-{VLLM}.scope\n")
    state = tmp_path / "gpu.json"
    state.write_text(json.dumps({"apps": [{"pid": 101, "name": "python3", "used": 700}]}))
    monkeypatch.setenv("MIRBAD_FAKE_NVIDIA_SMI_STATE", str(state))
    agent = Agent(NvidiaSmiProcessProbe(str(FAKE_NVIDIA_SMI), proc_root=proc), lambda: True)
    async with _running(agent) as running:
        running.processes.set_gpu_owner("llama", GpuOwner(pid=999_999))
        latest = await running.latest()
    assert {model_id: (s.gpu_memory_bytes, s.gpu_memory_source) for model_id, s in latest.items()} == {
        "vllm": (700 * MIB, "nvidia-smi"),
        "llama": (0, "nvidia-smi"),
    }


@pytest.mark.parametrize("present", [None, lambda: False])
async def test_a_cpu_only_node_sends_no_budget_as_gpu_memory(
    present: Callable[[], bool] | None, tmp_path: Path
) -> None:
    async with HostdClient(tmp_path / "no-hostd.sock") as client:
        probe = PreferredGpuProcessProbe([HostdGpuProcessProbe(client)])
        async with _running(Agent(probe, present)) as agent:
            latest = await agent.latest()
    assert {(s.gpu_memory_bytes, s.gpu_memory_source) for s in latest.values()} == {(None, None)}


def test_an_nvidia_gpu_is_present_by_nvidia_smi_or_by_its_driver(tmp_path: Path, gpu_driver: Path) -> None:
    absent = str(tmp_path / "absent")
    assert nvidia_gpu_present(str(FAKE_NVIDIA_SMI), proc_root=tmp_path / "none")
    assert nvidia_gpu_present(absent, proc_root=gpu_driver)
    assert not nvidia_gpu_present(absent, proc_root=tmp_path / "none")
    (tmp_path / "empty" / "driver" / "nvidia" / "gpus").mkdir(parents=True)
    assert not nvidia_gpu_present(absent, proc_root=tmp_path / "empty")
    assert not nvidia_gpu_present(None, proc_root=gpu_driver)  # the setting says: no discrete GPU
