"""GPU processes and whose they are: the stand-in nvidia-smi, a fake /proc tree, containers and models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests._support.hostd import FAKE_NVIDIA_SMI

from mirbad_protocol.agent import ServiceGpuMemory
from mirbad_protocol.support import COMPUTE_APPS_QUERY_ARGS
from mirbad_runtime import (
    GpuComputeProcess,
    GpuOwner,
    GpuProcessProbe,
    GpuProcessReading,
    NvidiaSmiProcessProbe,
    PreferredGpuProcessProbe,
    container_gpu_bytes,
    model_gpu_bytes,
    parent_pid,
    service_gpu_memory,
)
from mirbad_runtime.exceptions import GpuProbeError, RuntimeUnavailableError

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024
VLLM = "a1" * 32
OTHER = "b2" * 32


class FakeProc:
    """A /proc tree with the files the probe and the ancestry walk read."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def process(
        self, pid: int, *, parent: int = 1, cgroup: str = "0::/user.slice\n", comm: str = "x"
    ) -> None:
        folder = self.root / str(pid)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cgroup").write_text(cgroup)
        # The real format: pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
        (folder / "stat").write_text(f"{pid} ({comm}) S {parent} {pid} {pid} 0 -1 4194560 0 0\n")


@pytest.fixture
def proc(tmp_path: Path) -> FakeProc:
    return FakeProc(tmp_path / "proc")


@pytest.fixture
def nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Writes the stand-in's fixture; returns a function taking the apps (and an exit code)."""
    state = tmp_path / "gpu.json"
    log = tmp_path / "gpu.log"
    monkeypatch.setenv("MIRBAD_FAKE_NVIDIA_SMI_STATE", str(state))
    monkeypatch.setenv("MIRBAD_FAKE_NVIDIA_SMI_LOG", str(log))

    def write(apps: list[dict[str, Any]], exit_code: int = 0) -> Path:
        state.write_text(json.dumps({"apps": apps, "exit": exit_code}))
        return log

    return write


async def test_the_stand_in_processes_get_their_containers_from_their_cgroups(
    proc: FakeProc, nvidia_smi: Any
) -> None:
    proc.process(100, cgroup=f"0::/system.slice/docker-{VLLM}.scope\n")
    proc.process(101, cgroup=f"0::/system.slice/docker-{VLLM}.scope/init.scope\n")
    proc.process(200, cgroup=f"11:memory:/docker/{OTHER}\n1:name=systemd:/docker/{OTHER}\n")
    proc.process(300, cgroup="0::/system.slice/ollama.service\n")
    log = nvidia_smi(
        [
            {"pid": 100, "name": "python3", "used": 30000},
            {"pid": 101, "name": "python3", "used": 2000},
            {"pid": 200, "name": "/usr/bin/comfy, ui", "used": "[N/A]"},
            {"pid": 300, "name": "ollama", "used": 512},
            {"pid": 400, "name": "gone", "used": 8},  # ended before its cgroup was read
        ]
    )
    reading = await NvidiaSmiProcessProbe(str(FAKE_NVIDIA_SMI), proc_root=proc.root).read()
    assert reading == GpuProcessReading(
        "nvidia-smi",
        (
            GpuComputeProcess(100, 30000.0, VLLM),
            GpuComputeProcess(101, 2000.0, VLLM),
            GpuComputeProcess(200, None, OTHER),
            GpuComputeProcess(300, 512.0, None, "ollama.service"),  # a host service: its unit
            GpuComputeProcess(400, 8.0, None),
        ),
    )
    assert [json.loads(line) for line in log.read_text().splitlines()] == [list(COMPUTE_APPS_QUERY_ARGS)]
    # Summed per container; a container whose driver reports no memory is unknown, not empty.
    assert container_gpu_bytes(reading.processes) == {VLLM: 32000 * MIB, OTHER: None}


async def test_no_nvidia_smi_reads_nothing_and_a_failing_one_raises(
    tmp_path: Path, proc: FakeProc, nvidia_smi: Any
) -> None:
    assert await NvidiaSmiProcessProbe(str(tmp_path / "absent"), proc_root=proc.root).read() is None
    nvidia_smi([], exit_code=9)
    with pytest.raises(GpuProbeError, match="exited with 9: NVIDIA-SMI has failed"):
        await NvidiaSmiProcessProbe(str(FAKE_NVIDIA_SMI), proc_root=proc.root).read()


class Failing(GpuProcessProbe):
    async def read(self) -> GpuProcessReading | None:
        raise RuntimeUnavailableError("no hostd here")


class Fixed(GpuProcessProbe):
    def __init__(self, reading: GpuProcessReading | None) -> None:
        self.reading = reading
        self.reads = 0

    async def read(self) -> GpuProcessReading | None:
        self.reads += 1
        return self.reading


async def test_the_preferred_probe_falls_back_in_order() -> None:
    local = GpuProcessReading("nvidia-smi", (GpuComputeProcess(5, 1.0),))
    hostd = GpuProcessReading("hostd", ())
    first = Fixed(hostd)
    assert await PreferredGpuProcessProbe([first, Fixed(local)]).read() == hostd
    assert await PreferredGpuProcessProbe([Failing(), Fixed(None), Fixed(local)]).read() == local
    assert await PreferredGpuProcessProbe([Failing(), Fixed(None)]).read() is None


def test_parent_pid_reads_the_stat_file(proc: FakeProc) -> None:
    proc.process(42, parent=7, comm="llama server) (x")
    assert parent_pid(42, proc=proc.root) == 7
    assert parent_pid(43, proc=proc.root) is None


def test_models_get_their_containers_and_their_process_trees(proc: FakeProc) -> None:
    # llama-server 500 (a model) -> a worker 501 -> its helper 502; 600 runs beside it, under the agent.
    proc.process(500, parent=10)
    proc.process(501, parent=500)
    proc.process(502, parent=501)
    proc.process(600, parent=10)
    processes = [
        GpuComputeProcess(100, 30000.0, VLLM),
        GpuComputeProcess(101, 2000.0, VLLM),
        GpuComputeProcess(200, 100.0, OTHER),
        GpuComputeProcess(501, 1000.0),
        GpuComputeProcess(502, 24.0),
        GpuComputeProcess(600, 4000.0),
        GpuComputeProcess(700, None, "c3" * 32),
    ]
    owners = {
        "vllm": GpuOwner(container_id=VLLM),
        "llama": GpuOwner(pid=500),
        "idle": GpuOwner(pid=800),
        "na": GpuOwner(container_id="c3" * 32),
    }
    found = model_gpu_bytes(processes, owners, lambda pid: parent_pid(pid, proc=proc.root))
    assert found == {"vllm": 32000 * MIB, "llama": 1024 * MIB, "idle": 0, "na": None}


def test_a_process_in_a_container_is_never_a_native_models_child() -> None:
    # hostd's pids and a native model's may coincide across pid namespaces: a container's wins.
    found = model_gpu_bytes(
        [GpuComputeProcess(500, 10.0, OTHER)], {"llama": GpuOwner(pid=500)}, lambda pid: None
    )
    assert found == {"llama": 0}


def test_a_pid_cycle_ends_the_walk() -> None:
    found = model_gpu_bytes(
        [GpuComputeProcess(3, 10.0)], {"llama": GpuOwner(pid=9)}, lambda pid: 4 if pid == 3 else 3
    )
    assert found == {"llama": 0}


def test_host_services_get_what_no_model_owns_summed_per_unit(proc: FakeProc) -> None:
    # The agent's unit runs llama-server 500 (a model); its worker 501 is the model's, not the unit's.
    proc.process(500, parent=10)
    proc.process(501, parent=500)
    proc.process(600, parent=10)
    agent = "mirbad-agent.service"
    processes = [
        GpuComputeProcess(100, 30000.0, VLLM),
        GpuComputeProcess(200, 100.0, OTHER),  # a container that is no model: not a unit's either
        GpuComputeProcess(501, 1000.0, None, agent),
        GpuComputeProcess(600, 4.0, None, agent),  # beside the model, in the agent's unit
        GpuComputeProcess(300, 512.0, None, "ollama.service", "Ollama"),
        GpuComputeProcess(301, 256.0, None, "ollama.service", "Ollama"),
        GpuComputeProcess(400, None, None, "comfy.service"),
        GpuComputeProcess(900, 8.0),  # no unit (a login session's scope): nobody's
    ]
    owners = {"vllm": GpuOwner(container_id=VLLM), "llama": GpuOwner(pid=500)}
    found = service_gpu_memory(processes, owners, lambda pid: parent_pid(pid, proc=proc.root))
    assert found == [
        ServiceGpuMemory(unit="comfy.service", name="comfy.service", gpu_memory_bytes=None),
        ServiceGpuMemory(unit=agent, name=agent, gpu_memory_bytes=4 * MIB),
        ServiceGpuMemory(unit="ollama.service", name="Ollama", gpu_memory_bytes=768 * MIB),
    ]
    # The models' own share is unchanged by the services beside them.
    assert model_gpu_bytes(processes, owners, lambda pid: parent_pid(pid, proc=proc.root)) == {
        "vllm": 30000 * MIB,
        "llama": 1000 * MIB,
    }


_PROCESSES = st.lists(
    st.builds(
        GpuComputeProcess,
        pid=st.integers(2, 40),
        used_mib=st.one_of(st.none(), st.integers(0, 4096).map(float)),
        container_id=st.sampled_from([None, VLLM, OTHER]),
        unit=st.sampled_from([None, "a.service", "b.service"]),
    ),
    max_size=12,
)


@given(
    processes=_PROCESSES,
    parents=st.dictionaries(st.integers(2, 40), st.integers(1, 40), max_size=40),
    model_pid=st.integers(2, 40),
)
def test_no_gpu_memory_is_counted_twice(
    processes: list[GpuComputeProcess], parents: dict[int, int], model_pid: int
) -> None:
    owners = {"vllm": GpuOwner(container_id=VLLM), "llama": GpuOwner(pid=model_pid)}
    models = model_gpu_bytes(processes, owners, parents.get)
    services = service_gpu_memory(processes, owners, parents.get)
    total = sum(round(p.used_mib * MIB) for p in processes if p.used_mib is not None)
    counted = sum(v or 0 for v in models.values()) + sum(s.gpu_memory_bytes or 0 for s in services)
    assert counted <= total
    # Without models, every unit's process outside a container is its service's, and nothing else is.
    alone = service_gpu_memory(processes, {}, parents.get)
    in_units = [p for p in processes if p.unit is not None and p.container_id is None]
    assert sum(s.gpu_memory_bytes or 0 for s in alone) == sum(
        round(p.used_mib * MIB) for p in in_units if p.used_mib is not None
    )
    assert {s.unit for s in alone} == {p.unit for p in in_units}
