"""The Services page's container rows show each container's GPU memory (real Docker, stand-in nvidia-smi).

The master's local node is the real agent app over the real dockerd; its GPU processes come from the
stand-in nvidia-smi, whose pids a fake /proc tree places in this run's container by its real id.
"""

from __future__ import annotations

import contextlib
import json
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from tests._support.docker_image import RUN_LABEL
from tests._support.hostd import FAKE_NVIDIA_SMI
from tests._support.polling import eventually
from tests.master._stack import Master, running_master
from tests.master.test_api_services import _RealAgent
from tests.master.test_ui_pages import portal_user

from mirbad_agent import AgentServices, NodeRuntimes, create_app
from mirbad_master.services.page import service_nodes
from mirbad_runtime import ContainerServices, MemoryProbe, NvidiaSmiProcessProbe

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

PYTHON = str(Path(sys.executable).resolve())
SLEEPER = ["-c", "import signal, sys, time; signal.signal(15, lambda *_: sys.exit(0)); time.sleep(600)"]


@pytest.fixture
def container(docker_client: Any, image: str) -> Iterator[Any]:
    run_id = f"uigpu-{uuid.uuid4().hex[:10]}"
    made = docker_client.containers.run(
        image, SLEEPER, entrypoint=[PYTHON], name=f"{run_id}-db", detach=True, labels={RUN_LABEL: run_id}
    )
    try:
        yield made
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            made.remove(force=True)


@pytest.fixture
async def master(container: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Master]:
    proc = tmp_path / "proc"
    (proc / "77").mkdir(parents=True)
    (proc / "77" / "cgroup").write_text(f"0::/system.slice/docker-{container.id}.scope\n")
    state = tmp_path / "gpu.json"
    state.write_text(json.dumps({"apps": [{"pid": 77, "name": "postgres", "used": 1536}]}))
    monkeypatch.setenv("MIRBAD_FAKE_NVIDIA_SMI_STATE", str(state))
    services = AgentServices(
        runtimes=NodeRuntimes([]),
        memory=MemoryProbe(linux=False, fake_total_gib=16.0),
        node_name="local",
        version="0.0.test",
        host_containers=ContainerServices(gpu=NvidiaSmiProcessProbe(str(FAKE_NVIDIA_SMI), proc_root=proc)),
    )
    agent: Any = _RealAgent(create_app(services, background=False))
    async with services, running_master(tmp_path, agent=lambda node_id: agent) as running:
        await eventually(lambda: "local" in service_nodes(running.services), timeout_s=10)
        yield running


async def test_a_whitelisted_containers_row_shows_its_gpu_memory(master: Master, container: Any) -> None:
    name = container.name
    added = await master.admin.post("/api/nodes/local/host/containers", json={"name": name, "confirm": name})
    assert added.status_code == 201, added.text
    async with portal_user(master) as user:
        await user.open("/services")
        await user.should_see(marker=f"container-{name}", retries=300)
        await user.should_see("GPU 1.50 GiB")
