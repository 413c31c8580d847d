"""A whole master in-process: its real services and app over fake agents reached through httpx.

The agents are ``tests.orchestration._fake_agent.FakeAgent`` apps; the master's app is called through
``httpx.ASGITransport``. Nothing listens on a port; the background work (node and health monitors)
runs for real on short intervals.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from tests.orchestration._fake_agent import FakeAgent

from mirbad_master._admin_auth import AdminAuth
from mirbad_master._app import create_master_app, v1_first
from mirbad_master._composition import MasterServices
from mirbad_master._llama_server_build import LlamaServerBuild
from mirbad_master._settings import MasterSettings
from mirbad_orchestration.fleet import AgentClients, AgentTimeouts, NodeRecord
from mirbad_protocol.pki import CertificateAuthority


@dataclass
class Agents:
    """Fake agents by node id; a node in ``down`` refuses connections, one in ``slow`` times out."""

    agents: dict[str, FakeAgent]
    down: set[str] = field(default_factory=set)
    slow: set[str] = field(default_factory=set)

    def transport(self, record: NodeRecord) -> httpx.AsyncBaseTransport:
        return _Switch(self, record.id)


class _Switch(httpx.AsyncBaseTransport):
    def __init__(self, agents: Agents, node_id: str) -> None:
        self._agents = agents
        self._node_id = node_id

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        agent = self._agents.agents.get(self._node_id)
        if agent is None or self._node_id in self._agents.down:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        if self._node_id in self._agents.slow:
            raise httpx.ReadTimeout("timed out", request=request)
        return await httpx.ASGITransport(app=agent.app).handle_async_request(request)


@dataclass
class Master:
    """A running master and clients of its app."""

    services: MasterServices
    auth: AdminAuth
    password: str
    agents: Agents
    admin: httpx.AsyncClient
    anonymous: httpx.AsyncClient

    @property
    def local(self) -> FakeAgent:
        return self.agents.agents["local"]


def record(node_id: str, *, local: bool = False) -> NodeRecord:
    return NodeRecord(id=node_id, name=node_id, agent_url=f"https://{node_id}.lan:9443", local=local)


@asynccontextmanager
async def running_master(
    tmp_path: Path,
    *node_ids: str,
    stop_models_on_exit: str | None = None,
    agent: Callable[[str], FakeAgent] = lambda node_id: FakeAgent(node_name=node_id),
    services_options: dict[str, Any] | None = None,
    timeouts: AgentTimeouts | None = None,
    llama_server_build: LlamaServerBuild | None = None,
    **settings: Any,
) -> AsyncIterator[Master]:
    """A master over fake agents ``node_ids`` (``local`` by default, the first is the local node).

    ``agent`` builds each node's fake agent; ``services_options`` go to :class:`MasterServices`;
    ``timeouts`` replace the agent clients' short ones (for an agent that does real, slower work);
    ``llama_server_build`` is set before the services start, as ``mirbad up`` sets its build.
    """
    node_ids = node_ids or ("local",)
    agents = Agents({node_id: agent(node_id) for node_id in node_ids})
    options = {"health_poll_s": 0.2, "telemetry_interval_s": 0.2, "usage_flush_s": 0.5, **settings}
    config = MasterSettings(data_dir=tmp_path / "data", **options)
    clients = AgentClients(
        agents.transport, timeouts=timeouts or AgentTimeouts(connect_s=1, read_s=2, start_s=2, stop_s=2)
    )
    services = MasterServices(
        config,
        clients=clients,
        authority=CertificateAuthority.create("Test CA"),
        stop_models_on_exit=stop_models_on_exit,
        **(services_options or {}),
    )
    services.llama_server_build = llama_server_build
    for index, node_id in enumerate(node_ids):
        await services.nodes.add(record(node_id, local=index == 0))
    auth = AdminAuth(config.data_dir)
    password = auth.reset_password()
    app = create_master_app(services, auth)
    transport = httpx.ASGITransport(app=v1_first(app))  # as the master serves it
    async with (
        services,
        httpx.AsyncClient(
            transport=transport, base_url="http://master", headers={"Authorization": f"Bearer {password}"}
        ) as admin,
        # A browser's requests name their origin: the cookie-authenticated calls need it (OriginGuard).
        httpx.AsyncClient(
            transport=transport, base_url="http://master", headers={"Origin": "http://master"}
        ) as anonymous,
    ):
        yield Master(services, auth, password, agents, admin, anonymous)
