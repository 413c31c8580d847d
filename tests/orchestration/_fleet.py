"""A fleet of fake agents reached in-process (httpx.ASGITransport), for the master's fleet logic.

The real mutual-TLS path is covered by test_agent_client.py; the monitor, runtime, resolver and
telemetry tests only need agents that answer, refuse, or are down.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from tests.orchestration._fake_agent import FakeAgent

from mirbad_orchestration.fleet import AgentClients, AgentTimeouts, NodeRecord, NodeRegistry


@dataclass
class Fleet:
    """Fake agents by node id; a node in ``down`` refuses connections.

    ``stale`` counts, per node, the transports (connection pools) whose first request meets a kept-alive
    connection the agent already closed; ``transports`` counts the transports built per node.
    """

    agents: dict[str, FakeAgent] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)
    stale: dict[str, int] = field(default_factory=dict)
    transports: dict[str, int] = field(default_factory=dict)

    def transport(self, record: NodeRecord) -> httpx.AsyncBaseTransport:
        self.transports[record.id] = self.transports.get(record.id, 0) + 1
        stale = self.stale.get(record.id, 0) > 0
        if stale:
            self.stale[record.id] -= 1
        return _Switch(self, record.id, stale=stale)


class _Switch(httpx.AsyncBaseTransport):
    def __init__(self, fleet: Fleet, node_id: str, *, stale: bool = False) -> None:
        self._fleet = fleet
        self._node_id = node_id
        self._stale = stale

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._stale:
            # What httpx raises when a reused connection was closed by the server meanwhile.
            self._stale = False
            message = "Server disconnected without sending a response."
            raise httpx.RemoteProtocolError(message, request=request)
        agent = self._fleet.agents.get(self._node_id)
        if agent is None or self._node_id in self._fleet.down:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        return await httpx.ASGITransport(app=agent.app).handle_async_request(request)


def record(node_id: str, *, local: bool = False) -> NodeRecord:
    return NodeRecord(id=node_id, name=node_id, agent_url=f"https://{node_id}.lan:9443", local=local)


@asynccontextmanager
async def fleet_of(tmp_path: Path, *node_ids: str) -> AsyncIterator[tuple[Fleet, NodeRegistry, AgentClients]]:
    """Register ``node_ids`` (the first is the local node), each with a fresh fake agent."""
    fleet = Fleet({node_id: FakeAgent(node_name=node_id) for node_id in node_ids})
    registry = NodeRegistry(tmp_path)
    for index, node_id in enumerate(node_ids):
        await registry.add(record(node_id, local=index == 0))
    clients = AgentClients(fleet.transport, timeouts=AgentTimeouts(connect_s=2, read_s=5))
    try:
        yield fleet, registry, clients
    finally:
        await clients.aclose()
