"""The agent end to end: ``mirbad-agent serve`` as its own process, driven over mutual TLS.

A real container (the fake vLLM image) and a real llama-server (the tiny GGUF) are started from launch
specs built by the orchestration builders, answer through the agent's proxy chunk by chunk, survive a
SIGKILL of the agent and are adopted by the next one without a second instance.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.serialization import Encoding
from tests._support.agent_fleet import Fleet, create_fleet, master_identity
from tests._support.asgi_server import free_port
from tests._support.docker_image import RUN_LABEL
from tests._support.polling import until
from tests._support.processes import kill_recorded_processes, llama_servers_on
from tests._support.real_parts import llama_server_path
from tests._support.tiny_gguf import TINY_MODEL_PATH, write_tiny_gguf
from tests.fakes.fake_vllm import START_LINE

from mirbad_orchestration import launch_spec_for
from mirbad_protocol import (
    ContainerLaunch,
    ExecutableRef,
    ModelDefinition,
    ModelState,
    ModelStatus,
    ProcessLaunch,
)
from mirbad_protocol.agent import AgentInfo, LogTail, StartRequest, TelemetrySnapshot
from mirbad_protocol.pki import CertificateAuthority
from mirbad_runtime import MODEL_LABEL, sha256_of_file
from mirbad_runtime._process_host_posix import linux_identity

pytestmark = [
    pytest.mark.docker,
    pytest.mark.llamacpp,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="checks processes through /proc"),
]

WAIT_S = 30.0
POLL_S = 0.1


@dataclass
class Agent:
    """``mirbad-agent serve`` in a child process, and a master's client for it."""

    fleet: Fleet
    state_dir: Path
    config_path: Path
    port: int
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    clients: list[httpx.Client] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}/agent/v1"

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "mirbad_agent", "serve", "--config", str(self.config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        client = self.client()
        _until(lambda: _answers(client), f"the agent did not answer on {self.base_url}:\n{self.log()}")

    def client(self, context: ssl.SSLContext | None = None) -> httpx.Client:
        context = context or self.fleet.master.client_context()
        client = httpx.Client(base_url=self.base_url, verify=context, timeout=WAIT_S, trust_env=False)
        self.clients.append(client)
        return client

    def kill(self) -> None:
        """SIGKILL: the agent gets no chance to clean up."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(WAIT_S)

    def terminate(self) -> int:
        assert self.process is not None
        self.process.terminate()
        try:
            return self.process.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise

    def close(self) -> None:
        for client in self.clients:
            client.close()
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(WAIT_S)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


@pytest.fixture
def run_id() -> str:
    return os.urandom(3).hex()


@pytest.fixture
def agent(tmp_path: Path, docker_client: Any, run_id: str) -> Iterator[Agent]:
    server = llama_server_path()
    assert server is not None
    fleet = create_fleet()
    state_dir, model_root = tmp_path / "state", tmp_path / "models"
    write_tiny_gguf(model_root / TINY_MODEL_PATH)
    fleet.save_agent(state_dir)
    network = f"mirbad-test-{run_id}"
    containers_from, processes_from, port = _port_block(), _port_block(), free_port()
    settings = {
        "node_name": "node-1",
        "state_dir": str(state_dir),
        "host": "127.0.0.1",
        "port": port,
        "model_roots": [str(model_root)],
        "nvidia_smi": None,
        "telemetry_interval_s": 0.5,
        "graceful_shutdown_s": 2,
        "docker": {
            "enabled": True,
            "network": network,
            "gpus": False,
            "cache_host_path": str(tmp_path / "cache"),
            "port_range_start": containers_from,
            "port_range_end": containers_from + 19,
            "stop_timeout_s": 2,
        },
        "process": {
            "enabled": True,
            "port_range_start": processes_from,
            "port_range_end": processes_from + 19,
            "stop_timeout_s": 5,
        },
        "executables": [
            {"name": "llama-server", "version": "test", "path": str(server), "sha256": sha256_of_file(server)}
        ],
    }
    config_path = tmp_path / "agent.json"
    config_path.write_text(json.dumps(settings))
    started = Agent(fleet, state_dir, config_path, port, tmp_path / "agent.log")
    try:
        yield started
    finally:
        started.close()
        kill_recorded_processes(state_dir / "processes.json")
        for container in docker_client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_id}"}):
            container.remove(force=True)
        for stale in docker_client.networks.list(names=[network]):
            stale.remove()


_blocks: set[int] = set()


def _port_block() -> int:
    # 20 ports from one the OS just handed out (the drivers skip busy ones); two blocks never overlap.
    while True:
        start = min(free_port(), 65535 - 40)
        if all(abs(start - other) >= 20 for other in _blocks):
            _blocks.add(start)
            return start


def _answers(client: httpx.Client) -> bool:
    try:
        return client.get("/runtimes").status_code == 200
    except httpx.TransportError:
        return False


_until = partial(until, timeout_s=WAIT_S, poll_s=POLL_S)


def _status(client: httpx.Client, model_id: str) -> ModelStatus:
    response = client.get(f"/models/{model_id}")
    assert response.status_code == 200, response.text
    return ModelStatus.from_wire(response.json())


def _wait_for(client: httpx.Client, model_id: str, state: ModelState) -> ModelStatus:
    seen: list[ModelStatus] = []

    def reached() -> bool:
        seen.append(_status(client, model_id))
        return seen[-1].state is state

    _until(reached, f"{model_id} never became {state}: last {seen[-1] if seen else None}")
    return seen[-1]


def _start(client: httpx.Client, spec: ContainerLaunch | ProcessLaunch) -> ModelStatus:
    response = client.post(f"/models/{spec.model_id}/start", json=StartRequest(spec=spec).to_wire())
    assert response.status_code == 200, response.text
    return ModelStatus.from_wire(response.json())


def _specs(image: str, run_id: str) -> tuple[ProcessLaunch, ContainerLaunch]:
    labels = {RUN_LABEL: run_id}
    llama = ModelDefinition(
        id=f"tiny-{run_id}",
        served_name="tiny-chat",
        runtime="llamacpp",
        executable=ExecutableRef(name="llama-server", version="test"),
        model_path=TINY_MODEL_PATH,
        max_model_len=256,
        max_num_seqs=2,
        memory_budget_gib=0.25,
        extra_args=["--threads", "1"],
    )
    vllm = ModelDefinition(
        id=f"fake-{run_id}", served_name="fake-chat", image=image, model_path="fake", memory_budget_gib=0.25
    )
    process = launch_spec_for(llama, labels=labels)
    container = launch_spec_for(vllm, labels=labels)
    assert isinstance(process, ProcessLaunch)
    assert isinstance(container, ContainerLaunch)
    # Tokens a tenth of a second apart: a proxy that buffered would deliver them as one chunk.
    return process, container.model_copy(update={"env": {"FAKE_VLLM_TOKEN_DELAY_S": "0.1"}})


def _stream_chat(client: httpx.Client, model_id: str, served_name: str) -> tuple[list[bytes], list[str]]:
    body = {"model": served_name, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 6}
    chunks: list[bytes] = []
    with client.stream(
        "POST", f"/proxy/{model_id}/v1/chat/completions", json={**body, "stream": True}
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        chunks.extend(response.iter_raw())
    events = [line.removeprefix("data: ") for line in b"".join(chunks).decode().splitlines() if line]
    return chunks, events


def test_models_start_stream_and_survive_an_agent_restart(
    agent: Agent, image: str, run_id: str, docker_client: Any
) -> None:
    process_spec, container_spec = _specs(image, run_id)
    agent.start()
    client = agent.client()

    info = AgentInfo.from_wire(client.get("/runtimes").json())
    assert [(runtime.kind, runtime.runtime) for runtime in info.runtimes] == [
        ("container", "vllm"),
        ("process", "llamacpp"),
    ]
    assert {"runtime.vllm.container", "runtime.llamacpp.process"} <= set(info.features)

    # One start at a time on unified memory: the llama-server first, then the container.
    _start(client, process_spec)
    llama = _wait_for(client, process_spec.model_id, ModelState.READY)
    _start(client, container_spec)
    vllm = _wait_for(client, container_spec.model_id, ModelState.READY)
    assert llama.port is not None
    assert vllm.port is not None

    llama_log = LogTail.from_wire(client.get(f"/models/{process_spec.model_id}/logs?tail=50").json())
    vllm_log = LogTail.from_wire(client.get(f"/models/{container_spec.model_id}/logs?tail=50").json())
    assert llama_log.lines
    assert any(START_LINE in line for line in vllm_log.lines)
    with client.stream("GET", f"/models/{container_spec.model_id}/logs?follow=true&tail=3") as followed:
        first = json.loads(next(followed.iter_lines()))
    assert first["kind"] == "line"

    chunks, events = _stream_chat(client, container_spec.model_id, container_spec.served_name)
    assert events[-1] == "[DONE]"
    pieces = [json.loads(event) for event in events[:-1]]
    assert len(pieces) >= 4
    assert len(chunks) >= len(pieces) // 2  # arrived piece by piece, not as one buffered body
    llama_chunks, llama_events = _stream_chat(client, process_spec.model_id, process_spec.served_name)
    assert llama_events[-1] == "[DONE]"
    assert len(llama_events) > 2
    assert llama_chunks

    # The agent's telemetry loop scrapes both servers' /metrics (llama-server's with the instance key).
    def scraped_twice() -> bool:
        telemetry = TelemetrySnapshot.from_wire(client.get("/telemetry").json())
        # One dockerd serves every test worker: the agent also adopts and scrapes their containers.
        scraped = [model.model_id for model in telemetry.models if len(model.samples) >= 2]
        return sorted(model_id for model_id in scraped if model_id.endswith(f"-{run_id}")) == sorted(
            [process_spec.model_id, container_spec.model_id]
        )

    _until(scraped_twice, lambda: f"the telemetry ring did not fill:\n{agent.log()}")

    [container] = docker_client.containers.list(filters={"label": f"{MODEL_LABEL}={container_spec.model_id}"})
    [record] = json.loads((agent.state_dir / "processes.json").read_text())["processes"]
    pid = record["pid"]

    agent.kill()
    key = (agent.state_dir / "keys" / f"{process_spec.model_id}.key").read_text().strip()
    direct = httpx.post(
        f"http://127.0.0.1:{llama.port}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "still there?"}], "max_tokens": 4},
        headers={"Authorization": f"Bearer {key}"},
        timeout=WAIT_S,
        trust_env=False,
    )
    assert direct.status_code == 200, direct.text

    agent.start()
    client = agent.client()
    adopted_llama = _wait_for(client, process_spec.model_id, ModelState.READY)
    adopted_vllm = _wait_for(client, container_spec.model_id, ModelState.READY)
    listed = [status["id"] for status in client.get("/models").json()["models"]]
    again = _start(client, process_spec)  # starting a running model launches nothing
    containers = docker_client.containers.list(
        all=True, filters={"label": f"{MODEL_LABEL}={container_spec.model_id}"}
    )
    assert (adopted_llama.port, adopted_vllm.port) == (llama.port, vllm.port)
    # One dockerd serves every test worker: containers of other tests' agents are listed too.
    ours = [model_id for model_id in listed if model_id.endswith(f"-{run_id}")]
    assert sorted(ours) == sorted([process_spec.model_id, container_spec.model_id])
    assert again.state is ModelState.READY
    assert [found.id for found in containers] == [container.id]
    assert llama_servers_on(llama.port) == [pid]
    assert (
        client.post(
            f"/proxy/{process_spec.model_id}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        ).status_code
        == 200
    )

    os.kill(pid, signal.SIGKILL)
    failed = _wait_for(client, process_spec.model_id, ModelState.FAILED)
    assert failed.error is not None
    headline, *tail = failed.error.split("\n")
    # An adopted process was not spawned by this agent, so its exit status is unknown to it.
    assert headline == "the process is gone"
    assert tail

    for model_id in (process_spec.model_id, container_spec.model_id):
        stopped = ModelStatus.from_wire(client.post(f"/models/{model_id}/stop").json())
        assert stopped.state is ModelState.STOPPED
    left = [status["id"] for status in client.get("/models").json().get("models", [])]
    assert [model_id for model_id in left if model_id.endswith(f"-{run_id}")] == []
    assert docker_client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_id}"}) == []
    assert linux_identity(pid) is None
    assert agent.terminate() == 0


def test_only_the_masters_certificate_opens_the_agent(agent: Agent) -> None:
    agent.start()
    fleet = agent.fleet
    other_ca = CertificateAuthority.create("Another fleet")
    strangers: dict[str, Callable[[], ssl.SSLContext]] = {
        "no certificate": lambda: _context_without_certificate(fleet.ca),
        "another CA": lambda: master_identity(other_ca).client_context(),
        "a node certificate": lambda: fleet.node_client().client_context(),
    }
    allowed = agent.client().get("/runtimes")
    assert allowed.status_code == 200
    for label, make_context in strangers.items():
        # Each stranger trusts the agent's CA, so any failure is the agent refusing it, not the reverse.
        context = make_context()
        context.load_verify_locations(cadata=_pem(fleet.ca))
        with pytest.raises(httpx.TransportError):
            agent.client(context).get("/runtimes")
        # Under TLS 1.2 the client certificate is checked inside the handshake, which therefore fails.
        capped = make_context()
        capped.load_verify_locations(cadata=_pem(fleet.ca))
        capped.maximum_version = ssl.TLSVersion.TLSv1_2
        with (
            socket.create_connection(("127.0.0.1", agent.port), timeout=WAIT_S) as raw,
            pytest.raises(ssl.SSLError),
        ):
            capped.wrap_socket(raw, server_hostname="127.0.0.1").close()
        assert agent.process is not None
        assert agent.process.poll() is None, label
    assert agent.terminate() == 0


def _context_without_certificate(ca: CertificateAuthority) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=_pem(ca))
    return context


def _pem(ca: CertificateAuthority) -> str:
    return ca.certificate.public_bytes(Encoding.PEM).decode("ascii")
