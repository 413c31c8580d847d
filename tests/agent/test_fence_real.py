"""Fencing end to end: a real ``mirbad-agent serve`` process, two masters' clients over mutual TLS.

The stale master (epoch 0) and the master that took over from it (``mirbad up --recover``'s identity:
the same instance id, one epoch up) drive the same agent through the orchestration ``AgentClient``,
each naming itself from its own identity store. The stale one is refused every command with both
epochs named, still reads, and stays refused after the agent restarts; the newer one starts and stops
a real llama-server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import pytest
from tests._support.agent_fleet import Fleet, create_fleet
from tests._support.asgi_server import free_port, free_port_block
from tests._support.polling import until
from tests._support.processes import kill_recorded_processes
from tests._support.real_parts import llama_server_path
from tests._support.tiny_gguf import TINY_MODEL_PATH, write_tiny_gguf

from mirbad_agent import FENCE_FILE_NAME
from mirbad_orchestration import launch_spec_for
from mirbad_orchestration.exceptions import AgentFencedError
from mirbad_orchestration.fleet import (
    AgentClient,
    AgentClients,
    AgentTimeouts,
    MasterIdentityStore,
    NodeRecord,
)
from mirbad_protocol import ExecutableRef, ModelDefinition, ModelState, ProcessLaunch
from mirbad_runtime import sha256_of_file

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.llamacpp,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a POSIX agent process"),
]

WAIT_S = 30.0
TINY = ModelDefinition(
    id="fenced-tiny",
    served_name="tiny-chat",
    runtime="llamacpp",
    executable=ExecutableRef(name="llama-server", version="test"),
    model_path=TINY_MODEL_PATH,
    max_model_len=256,
    memory_budget_gib=0.5,
)


@dataclass
class RealAgent:
    """``mirbad-agent serve`` in a child process."""

    config: Path
    state: Path
    port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self, fleet: Fleet) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "mirbad_agent", "serve", "--config", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        context = fleet.master.client_context()
        with httpx.Client(verify=context, timeout=5, trust_env=False) as probe:
            until(
                lambda: _answers(probe, f"https://127.0.0.1:{self.port}/agent/v1/runtimes"),
                lambda: f"the agent did not answer:\n{self.log.read_text(errors='replace')[-3000:]}",
                timeout_s=WAIT_S,
            )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(WAIT_S)


def _answers(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(url).status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture
def fleet() -> Fleet:
    return create_fleet()


@pytest.fixture
def agent(tmp_path: Path, fleet: Fleet) -> Iterator[RealAgent]:
    server = llama_server_path()
    assert server is not None
    state, models = tmp_path / "state", tmp_path / "models"
    write_tiny_gguf(models / TINY_MODEL_PATH)
    fleet.save_agent(state)
    first, port = free_port_block(20), free_port()
    settings = {
        "node_name": "node-1",
        "state_dir": str(state),
        "host": "127.0.0.1",
        "port": port,
        "model_roots": [str(models)],
        "nvidia_smi": None,
        "hostd_socket": None,
        "fake_total_gib": 16.0,
        "graceful_shutdown_s": 2,
        "docker": {"enabled": False},
        "process": {
            "enabled": True,
            "port_range_start": first,
            "port_range_end": first + 19,
            "stop_timeout_s": 5,
        },
        "executables": [
            {"name": "llama-server", "version": "test", "path": str(server), "sha256": sha256_of_file(server)}
        ],
    }
    config = tmp_path / "agent.json"
    config.write_text(json.dumps(settings))
    running = RealAgent(config, state, port, tmp_path / "agent.log")
    running.start(fleet)
    try:
        yield running
    finally:
        running.stop()
        kill_recorded_processes(state / "processes.json")


@asynccontextmanager
async def master_client(
    fleet: Fleet, agent: RealAgent, identity: MasterIdentityStore
) -> AsyncIterator[AgentClient]:
    """A master's client of the agent, naming the master as ``identity`` says (as MasterServices sets it)."""
    clients = AgentClients.mutual_tls(
        fleet.master, timeouts=AgentTimeouts(connect_s=5, read_s=10, start_s=60, stop_s=30)
    )
    clients.fence_with(identity.read)
    record = NodeRecord(id="node-1", name="node-1", agent_url=f"https://127.0.0.1:{agent.port}")
    try:
        yield clients.client_for(record)
    finally:
        await clients.aclose()


async def _until_ready(client: AgentClient, model_id: str) -> None:
    with anyio.fail_after(WAIT_S):
        # Polled by design: the agent has no event for a model that became Ready.
        while (await client.status(model_id)).state is not ModelState.READY:  # noqa: ASYNC110
            await anyio.sleep(0.2)


async def test_a_stale_master_is_fenced_off_a_real_agent_and_the_newer_one_drives_it(
    tmp_path: Path, fleet: Fleet, agent: RealAgent
) -> None:
    spec = launch_spec_for(TINY)
    assert isinstance(spec, ProcessLaunch)
    stale_identity = MasterIdentityStore(tmp_path / "stale-master")
    stale = await stale_identity.read()
    # The master that took over: restored from the stale one's backup, one epoch up (mirbad up --recover).
    newer_identity = MasterIdentityStore(tmp_path / "newer-master")
    newer = await newer_identity.recover(stale)
    assert (newer.instance_id, newer.epoch) == (stale.instance_id, stale.epoch + 1)

    async with (
        master_client(fleet, agent, stale_identity) as old,
        master_client(fleet, agent, newer_identity) as new,
    ):
        # Before the takeover the stale master commands the node (the agent takes its epoch).
        assert (await old.stop(TINY.id)).state is ModelState.STOPPED
        # The takeover claims the node: its fence rises before the newer master commands anything else.
        claimed = await new.claim()
        assert (claimed.instance_id, claimed.epoch) == (newer.instance_id, newer.epoch)
        with pytest.raises(AgentFencedError):
            await old.claim()
        await new.start(spec)
        await _until_ready(new, TINY.id)

        with pytest.raises(AgentFencedError) as fenced:
            await old.stop(TINY.id)
        assert (fenced.value.status_code, fenced.value.code) == (409, "fenced")
        assert (fenced.value.epoch, fenced.value.request_epoch) == (newer.epoch, stale.epoch)
        assert f"epoch {newer.epoch}" in fenced.value.message
        assert f"epoch {stale.epoch}" in fenced.value.message
        with pytest.raises(AgentFencedError):
            await old.restart(spec)
        # Reads stay allowed: the stale master still sees the model the newer one runs.
        assert (await old.status(TINY.id)).state is ModelState.READY
        assert [status.id for status in await old.statuses()] == [TINY.id]
        assert (await old.info()).node_name == "node-1"
        assert (await old.fence()).epoch == newer.epoch

    saved = json.loads((agent.state / FENCE_FILE_NAME).read_text())
    assert saved == {"instanceId": newer.instance_id, "epoch": newer.epoch}

    # The fence outlives the agent: a restarted agent (adopting the running model) still refuses.
    agent.stop()
    agent.start(fleet)
    async with (
        master_client(fleet, agent, stale_identity) as old,
        master_client(fleet, agent, newer_identity) as new,
    ):
        with pytest.raises(AgentFencedError) as again:
            await old.stop(TINY.id)
        assert (again.value.epoch, again.value.request_epoch) == (newer.epoch, stale.epoch)
        await _until_ready(old, TINY.id)
        assert (await new.stop(TINY.id)).state is ModelState.STOPPED
