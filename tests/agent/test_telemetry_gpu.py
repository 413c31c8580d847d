"""Each model's GPU memory in the agent's telemetry: the stand-in nvidia-smi, fake cgroups, real pids.

A container model owns the GPU processes whose cgroup names its container; a native model owns its
server's process and every process below it (walked through the real /proc here: the GPU process is
this test's own pid and the model's server its parent). hostd is asked first; where it is missing the
agent runs nvidia-smi itself, and each sample says which source it used.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests._support.hostd import FAKE_NVIDIA_SMI

from mirbad_agent import AgentServices, ComposedDriver, NodeRuntimes, create_app
from mirbad_protocol import ContainerLaunch, ExecutableRef, ModelMetrics, ModelState, ProcessLaunch
from mirbad_protocol.agent import ContainerRuntimeInfo, ProcessRuntimeInfo, TelemetrySnapshot
from mirbad_runtime import (
    GpuOwner,
    GpuProcessProbe,
    HostdClient,
    HostdGpuProcessProbe,
    MemoryProbe,
    NvidiaSmiProcessProbe,
    PreferredGpuProcessProbe,
)
from mirbad_runtime.testing import FakeDriver

pytestmark = pytest.mark.anyio

BASE = "http://agent/agent/v1"
MIB = 1024 * 1024
VLLM = "5e" * 32
METRICS = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"


def _metrics(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, text=METRICS)


class Agent:
    """An agent over fake drivers whose GPU processes come from ``gpu``."""

    def __init__(self, gpu: GpuProcessProbe | None, gpu_present: Callable[[], bool] | None = None) -> None:
        self.containers = FakeDriver()
        self.processes = FakeDriver(port_range_start=8500)
        drivers = [
            ComposedDriver(self.containers, (ContainerRuntimeInfo(runtime="vllm", network="mirbad"),)),
            ComposedDriver(self.processes, (ProcessRuntimeInfo(runtime="llamacpp"),)),
        ]
        self.services = AgentServices(
            runtimes=NodeRuntimes(drivers),
            memory=MemoryProbe(linux=False, fake_total_gib=16.0),
            node_name="node-1",
            version="0.0.test",
            http=httpx.AsyncClient(transport=httpx.MockTransport(_metrics)),
            gpu_processes=gpu,
            gpu_present=gpu_present,
        )
        transport = httpx.ASGITransport(app=create_app(self.services, background=False))
        self.client = httpx.AsyncClient(transport=transport, base_url=BASE)

    async def run_models(self) -> None:
        common: dict[str, Any] = {"argv": [], "model_path": "m", "budget_gib": 1.0, "config_hash": "0" * 16}
        vllm = ContainerLaunch(
            model_id="vllm", served_name="vllm", runtime="vllm", image="vllm/vllm:test", **common
        )
        llama = ProcessLaunch(
            model_id="llama",
            served_name="llama",
            runtime="llamacpp",
            executable=ExecutableRef(name="llama-server", version="test"),
            **common,
        )
        await self.containers.start(vllm)
        await self.processes.start(llama)
        for driver, model_id in ((self.containers, "vllm"), (self.processes, "llama")):
            driver.set_state(model_id, ModelState.READY)
        self.containers.set_gpu_owner("vllm", GpuOwner(container_id=VLLM))
        self.processes.set_gpu_owner("llama", GpuOwner(pid=os.getppid()))

    async def latest(self) -> dict[str, ModelMetrics]:
        await self.services.telemetry.scrape_once()
        snapshot = TelemetrySnapshot.from_wire((await self.client.get("/telemetry")).json())
        return {model.model_id: model.samples[-1] for model in snapshot.models}


@pytest.fixture
def gpu_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in's fixture: the vLLM container's two processes and this test process (llama's child)."""
    proc = tmp_path / "proc"
    for pid in (101, 102):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(f"0::/system.slice/docker-{VLLM}.scope\n")
    apps = [{"pid": 101, "name": "python3", "used": 30000}, {"pid": 102, "name": "python3", "used": 720}]
    apps += [{"pid": os.getpid(), "name": "llama-server", "used": 2048}, {"pid": 999, "name": "x", "used": 5}]
    state = tmp_path / "gpu.json"
    state.write_text(json.dumps({"apps": apps}))
    monkeypatch.setenv("MIRBAD_FAKE_NVIDIA_SMI_STATE", str(state))
    return proc


@pytest.fixture
async def agent(gpu_state: Path, tmp_path: Path) -> AsyncIterator[Agent]:
    # hostd first, as the agent composes it; its socket is missing here, so the agent's own run answers.
    hostd = HostdClient(tmp_path / "no-hostd.sock")
    local = NvidiaSmiProcessProbe(str(FAKE_NVIDIA_SMI), proc_root=gpu_state)
    built = Agent(PreferredGpuProcessProbe([HostdGpuProcessProbe(hostd), local]))
    async with built.client, built.services:
        yield built
    await hostd.aclose()


async def test_each_model_gets_its_gpu_processes_and_the_source(agent: Agent) -> None:
    await agent.run_models()
    latest = await agent.latest()
    assert {model_id: (s.gpu_memory_bytes, s.gpu_memory_source) for model_id, s in latest.items()} == {
        "vllm": (30720 * MIB, "nvidia-smi"),
        "llama": (2048 * MIB, "nvidia-smi"),
    }
    raw = (await agent.client.get("/telemetry?model=vllm")).json()["models"][0]["samples"][-1]
    assert (raw["gpuMemoryBytes"], raw["gpuMemorySource"]) == (30720 * MIB, "nvidia-smi")


async def test_a_model_without_gpu_processes_holds_zero(agent: Agent, tmp_path: Path) -> None:
    (tmp_path / "gpu.json").write_text(json.dumps({"apps": []}))
    await agent.run_models()
    latest = await agent.latest()
    assert {model_id: s.gpu_memory_bytes for model_id, s in latest.items()} == {"vllm": 0, "llama": 0}


@pytest.mark.parametrize("case", ["no-probe", "no-nvidia-smi", "failing-nvidia-smi"])
async def test_without_a_gpu_reading_samples_carry_no_gpu_memory(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = tmp_path / "failing.json"
    failing.write_text(json.dumps({"exit": 9}))
    monkeypatch.setenv("MIRBAD_FAKE_NVIDIA_SMI_STATE", str(failing))
    probes: dict[str, GpuProcessProbe | None] = {
        "no-probe": None,
        "no-nvidia-smi": NvidiaSmiProcessProbe(str(tmp_path / "absent")),
        "failing-nvidia-smi": NvidiaSmiProcessProbe(str(FAKE_NVIDIA_SMI)),
    }
    built = Agent(probes[case])
    async with built.client, built.services:
        await built.run_models()
        latest = await built.latest()
        raw = (await built.client.get("/telemetry?model=vllm")).json()["models"][0]["samples"][-1]
    assert {(s.gpu_memory_bytes, s.gpu_memory_source) for s in latest.values()} == {(None, None)}
    assert "gpuMemoryBytes" not in raw
