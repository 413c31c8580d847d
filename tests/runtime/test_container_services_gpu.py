"""Each container's GPU memory in the host-service listing: real containers, the stand-in nvidia-smi.

The stand-in lists compute processes whose pids a fake /proc tree places in this run's real containers
(by their real ids, in both cgroup forms), so the listing's sum per container is checked end to end.
"""

from __future__ import annotations

import contextlib
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from tests._support.docker_image import RUN_LABEL
from tests._support.hostd import FAKE_NVIDIA_SMI

from mirbad_protocol.agent import ContainerService
from mirbad_runtime import ContainerServices, GpuProcessProbe, GpuProcessReading, NvidiaSmiProcessProbe
from mirbad_runtime.exceptions import GpuProbeError

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

MIB = 1024 * 1024
PYTHON = str(Path(sys.executable).resolve())
SLEEPER = ["-c", "import signal, sys, time; signal.signal(15, lambda *_: sys.exit(0)); time.sleep(600)"]


@pytest.fixture
def containers(docker_client: Any, image: str) -> Iterator[dict[str, Any]]:
    """Two running containers and a stopped one of this run, by suffix."""
    run_id = f"gpu-{uuid.uuid4().hex[:10]}"
    made: dict[str, Any] = {}
    try:
        for suffix in ("vllm", "comfy", "idle"):
            made[suffix] = docker_client.containers.run(
                image,
                SLEEPER,
                entrypoint=[PYTHON],
                name=f"{run_id}-{suffix}",
                detach=True,
                labels={RUN_LABEL: run_id},
            )
        made["idle"].stop(timeout=5)
        yield made
    finally:
        for container in docker_client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_id}"}):
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)


def _mine(services: list[ContainerService], made: dict[str, Any]) -> dict[str, int | None]:
    names = {container.name: suffix for suffix, container in made.items()}
    return {names[s.name]: s.gpu_memory_bytes for s in services if s.name in names}


async def test_the_listing_sums_each_containers_gpu_processes(
    containers: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vllm, comfy = containers["vllm"].id, containers["comfy"].id
    proc = tmp_path / "proc"
    cgroups = {
        11: f"0::/system.slice/docker-{vllm}.scope\n",
        12: f"0::/system.slice/docker-{vllm}.scope/init.scope\n",
        21: f"11:memory:/docker/{comfy}\n1:name=systemd:/docker/{comfy}\n",
        31: "0::/system.slice/ollama.service\n",
    }
    for pid, text in cgroups.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(text)
    apps = [{"pid": 11, "name": "python3", "used": 20000}, {"pid": 12, "name": "python3", "used": 480}]
    apps += [{"pid": 21, "name": "comfy", "used": 1536}, {"pid": 31, "name": "ollama", "used": 900}]
    state = tmp_path / "gpu.json"
    state.write_text(json.dumps({"apps": apps}))
    monkeypatch.setenv("MIRBAD_FAKE_NVIDIA_SMI_STATE", str(state))
    services = ContainerServices(gpu=NvidiaSmiProcessProbe(str(FAKE_NVIDIA_SMI), proc_root=proc))
    try:
        listed = _mine((await services.containers()).containers, containers)
        one = await services.container(containers["comfy"].name)
    finally:
        await services.aclose()
    assert listed == {"vllm": 20480 * MIB, "comfy": 1536 * MIB, "idle": None}
    assert one.gpu_memory_bytes == 1536 * MIB


class Broken(GpuProcessProbe):
    async def read(self) -> GpuProcessReading | None:
        raise GpuProbeError("nvidia-smi exited with 9")


class NoGpu(GpuProcessProbe):
    async def read(self) -> GpuProcessReading | None:
        return None


@pytest.mark.parametrize("probe", [None, NoGpu(), Broken()], ids=["no-probe", "no-gpu", "failing"])
async def test_without_a_gpu_reading_gpu_memory_is_unknown(
    containers: dict[str, Any], probe: GpuProcessProbe | None
) -> None:
    services = ContainerServices(gpu=probe)
    try:
        listed = _mine((await services.containers()).containers, containers)
    finally:
        await services.aclose()
    assert listed == {"vllm": None, "comfy": None, "idle": None}


async def test_a_running_container_without_gpu_processes_holds_none(
    containers: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "gpu.json"
    state.write_text(json.dumps({"apps": []}))
    monkeypatch.setenv("MIRBAD_FAKE_NVIDIA_SMI_STATE", str(state))
    services = ContainerServices(gpu=NvidiaSmiProcessProbe(str(FAKE_NVIDIA_SMI), proc_root=tmp_path))
    try:
        listed = _mine((await services.containers()).containers, containers)
    finally:
        await services.aclose()
    assert listed == {"vllm": 0, "comfy": 0, "idle": None}
