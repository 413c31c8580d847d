"""Host services' GPU memory in the agent's telemetry: a real hostd on its socket, else nvidia-smi here.

What no model owns and runs in a systemd service is summed per service into each pass's host sample,
named as hostd's whitelist names it; the models keep their own share (a native model's child stays
the model's even inside the agent's own unit).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests._support.hostd import FAKE_NVIDIA_SMI, HostdLayout, hostd_layout, running_hostd, unit
from tests.agent.test_telemetry_gpu import VLLM, Agent

from mirbad_protocol.agent import HostGpuSample, ServiceGpuMemory, TelemetrySnapshot
from mirbad_runtime import HostdClient, HostdGpuProcessProbe, NvidiaSmiProcessProbe, PreferredGpuProcessProbe

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024
AGENT_UNIT = "0::/system.slice/mirbad-agent.service\n"


def _gpu_apps(proc: Path) -> list[dict[str, object]]:
    """The vLLM model's process, two of Ollama's, this test (llama's child, in the agent's unit), comfy."""
    cgroups = {
        101: f"0::/system.slice/docker-{VLLM}.scope\n",
        300: "0::/system.slice/ollama.service\n",
        301: "0::/system.slice/ollama.service/runner\n",
        400: "0::/system.slice/comfy.service\n",
        os.getpid(): AGENT_UNIT,
    }
    for pid, text in cgroups.items():
        (proc / str(pid)).mkdir(parents=True, exist_ok=True)
        (proc / str(pid) / "cgroup").write_text(text)
    return [
        {"pid": 101, "name": "python3", "used": 30000},
        {"pid": 300, "name": "ollama", "used": 1024},
        {"pid": 301, "name": "ollama_llama_server", "used": 3072},
        {"pid": 400, "name": "comfy", "used": 512},
        {"pid": os.getpid(), "name": "llama-server", "used": 2048},
    ]


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[HostdLayout]:
    with hostd_layout(tmp_path) as made:
        made.units = {"system": [unit("ollama.service"), unit("comfy.service")]}
        made.gpu_apps = _gpu_apps(made.proc_root)
        made.write_seed([{"name": "ollama", "unit": "ollama.service", "displayName": "Ollama"}])
        made.write_fixtures()
        yield made


async def _host_samples(agent: Agent) -> list[HostGpuSample]:
    await agent.services.telemetry.scrape_once()
    return TelemetrySnapshot.from_wire((await agent.client.get("/telemetry")).json()).host_samples


async def test_hostd_names_the_services_and_the_models_keep_their_share(layout: HostdLayout) -> None:
    with running_hostd(layout):
        async with HostdClient(layout.socket) as hostd:
            built = Agent(PreferredGpuProcessProbe([HostdGpuProcessProbe(hostd)]))
            async with built.client, built.services:
                await built.run_models()
                (host,) = await _host_samples(built)
                latest = await built.latest()
                one_model = (await built.client.get("/telemetry?model=vllm")).json()
    assert host.source == "hostd"
    assert host.services == [
        ServiceGpuMemory(unit="comfy.service", name="comfy.service", gpu_memory_bytes=512 * MIB),
        ServiceGpuMemory(unit="ollama.service", name="Ollama", gpu_memory_bytes=4096 * MIB),
    ]
    assert {model_id: sample.gpu_memory_bytes for model_id, sample in latest.items()} == {
        "vllm": 30000 * MIB,
        "llama": 2048 * MIB,
    }
    assert "hostSamples" not in one_model  # a read of one model carries no host samples


async def test_the_agents_own_nvidia_smi_names_services_by_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = tmp_path / "proc"
    state = tmp_path / "gpu.json"
    state.write_text(json.dumps({"apps": _gpu_apps(proc)}))
    monkeypatch.setenv("MIRBAD_FAKE_NVIDIA_SMI_STATE", str(state))
    async with HostdClient(tmp_path / "no-hostd.sock") as hostd:
        local = NvidiaSmiProcessProbe(str(FAKE_NVIDIA_SMI), proc_root=proc)
        built = Agent(PreferredGpuProcessProbe([HostdGpuProcessProbe(hostd), local]))
        async with built.client, built.services:
            # No model is Ready yet: the services are sampled all the same.
            (first,) = await _host_samples(built)
            await built.run_models()
            second = (await _host_samples(built))[-1]
            raw = (await built.client.get("/telemetry")).json()["hostSamples"][-1]
    assert first.source == second.source == "nvidia-smi"
    # Without a model, llama's child is just a process of the agent's unit; with it, the model's.
    assert [(s.name, s.gpu_memory_bytes) for s in first.services] == [
        ("comfy.service", 512 * MIB),
        ("mirbad-agent.service", 2048 * MIB),
        ("ollama.service", 4096 * MIB),
    ]
    assert [(s.name, s.gpu_memory_bytes) for s in second.services] == [
        ("comfy.service", 512 * MIB),
        ("ollama.service", 4096 * MIB),
    ]
    assert raw["source"] == "nvidia-smi"
    assert raw["services"][0] == {
        "unit": "comfy.service",
        "name": "comfy.service",
        "gpuMemoryBytes": 512 * MIB,
    }
