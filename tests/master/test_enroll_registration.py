"""Enroll, serve, and the master knows the node: the real enroll listener, ``mirbad-agent enroll``, the real
agent app over mutual TLS, and a re-enrollment after which the node's old certificate is refused."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from tests._support.agent_fleet import master_identity
from tests._support.asgi_server import free_port, serve_asgi
from tests._support.enroll_master import EnrollMaster, enroll_master
from tests.agent.test_enroll import enroll

from mirbad_agent import (
    AGENT_TLS_STEM,
    EXIT_REFUSED,
    AgentServices,
    ComposedDriver,
    NodeRuntimes,
    create_app,
)
from mirbad_orchestration.fleet import AgentClients, NodeMonitor, NodeRecord, NodeRegistry
from mirbad_protocol.agent import ContainerRuntimeInfo
from mirbad_protocol.pki import TlsCredentials, spki_pin
from mirbad_runtime import MemoryProbe
from mirbad_runtime.testing import FakeDriver

pytestmark = pytest.mark.anyio

WAIT_S = 30


@asynccontextmanager
async def real_agent(state_dir: Path, port: int) -> AsyncIterator[None]:
    """The agent's own app, with the identity ``mirbad-agent enroll`` saved, on ``port`` over mutual TLS."""
    credentials = TlsCredentials.load(state_dir, AGENT_TLS_STEM)
    runtimes = NodeRuntimes(
        [ComposedDriver(FakeDriver(), (ContainerRuntimeInfo(runtime="vllm", network="mirbad"),))]
    )
    services = AgentServices(
        runtimes=runtimes,
        memory=MemoryProbe(linux=False, fake_total_gib=16.0, reserve_gib=2.0),
        node_name="gpu-1",
        version="0.0.test",
    )
    async with (
        services,
        serve_asgi(
            create_app(services, background=False), ssl_context=credentials.server_context(), port=port
        ),
    ):
        yield


async def enrolled(master: EnrollMaster, state_dir: Path, token: str) -> None:
    assert await enroll(master.url, token, state_dir, "--san", "127.0.0.1") == 0


async def test_an_enrolled_node_is_registered_and_answers_the_master(tmp_path: Path) -> None:
    (tmp_path / "master").mkdir()
    nodes = NodeRegistry(tmp_path / "master")
    port = free_port()
    with anyio.fail_after(WAIT_S):
        async with enroll_master(tmp_path / "master", nodes=nodes) as master:
            url = f"https://127.0.0.1:{port}"
            await enrolled(
                master, tmp_path / "node", await master.tokens.issue_join_token("gpu-1", agent_url=url)
            )
            clients = AgentClients.mutual_tls(master_identity(master.ca))
            async with real_agent(tmp_path / "node", port):
                state = await NodeMonitor(nodes, clients).poll_node(await nodes.get("gpu-1"))
            await clients.aclose()

    assert (state.reachable, state.error) == (True, None)
    assert state.info is not None
    assert state.info.node_name == "gpu-1"
    record = await nodes.get("gpu-1")
    assert record.agent_url == url
    assert record.pin_sha256 == spki_pin(TlsCredentials.load(tmp_path / "node", AGENT_TLS_STEM).certificate)


async def test_after_a_re_enrollment_the_old_certificate_is_refused(tmp_path: Path) -> None:
    (tmp_path / "master").mkdir()
    nodes = NodeRegistry(tmp_path / "master")
    port = free_port()
    old, new = tmp_path / "old", tmp_path / "new"
    with anyio.fail_after(WAIT_S):
        async with enroll_master(tmp_path / "master", nodes=nodes) as master:
            url = f"https://127.0.0.1:{port}"
            await enrolled(master, old, await master.tokens.issue_join_token("gpu-1", agent_url=url))
            await enrolled(master, new, await master.tokens.issue_join_token("gpu-1", reenroll=True))
            clients = AgentClients.mutual_tls(master_identity(master.ca))
            monitor = NodeMonitor(nodes, clients)
            async with real_agent(old, port):
                refused = await monitor.poll_node(await nodes.get("gpu-1"))
            async with real_agent(new, port):
                accepted = await monitor.poll_node(await nodes.get("gpu-1"))
            await clients.aclose()

    assert not refused.reachable
    assert refused.error is not None
    assert "pinned" in refused.error
    assert accepted.reachable


async def test_a_name_registered_since_the_token_was_issued_is_409_and_the_token_stays_usable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "master").mkdir()
    nodes = NodeRegistry(tmp_path / "master")
    with anyio.fail_after(WAIT_S):
        async with enroll_master(tmp_path / "master", nodes=nodes) as master:
            token = await master.tokens.issue_join_token("gpu-1", agent_url="https://127.0.0.1:9443")
            await nodes.add(NodeRecord(id="gpu-1", name="gpu-1", agent_url="https://gpu-1.lan:9443"))
            refused = await enroll(master.url, token, tmp_path / "refused")
            await nodes.remove("gpu-1")
            accepted = await enroll(master.url, token, tmp_path / "accepted")

    assert refused == EXIT_REFUSED
    assert "(409)" in capsys.readouterr().err
    assert accepted == 0
    assert (await nodes.get("gpu-1")).agent_url == "https://127.0.0.1:9443"
