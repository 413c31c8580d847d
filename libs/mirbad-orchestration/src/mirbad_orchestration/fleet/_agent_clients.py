"""The master's agent clients: one per registered node, replaced when the node's record changes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

import httpx

from mirbad_protocol.agent import MasterFence
from mirbad_protocol.pki import TlsCredentials

from ._agent_client import AgentClient, AgentTimeouts
from ._agent_tls import PooledTransportBuilder, node_transport
from ._master_identity import MasterIdentity
from ._nodes import NodeRecord

__all__ = ["AgentClients", "TransportFactory"]

TransportFactory = Callable[[NodeRecord], httpx.AsyncBaseTransport]
"""Builds the transport that reaches one node's agent (tests may hand in ``httpx.ASGITransport``)."""


class AgentClients:
    """One :class:`AgentClient` per node, created on first use.

    Args:
        transports: builds the transport of each node's client.
        timeouts: the timeouts every client uses.
    """

    def __init__(self, transports: TransportFactory, *, timeouts: AgentTimeouts | None = None) -> None:
        self._transports = transports
        self._timeouts = timeouts or AgentTimeouts()
        self._clients: dict[str, tuple[NodeRecord, AgentClient]] = {}
        self._retired: list[AgentClient] = []
        self._identity: Callable[[], Awaitable[MasterIdentity]] | None = None

    @classmethod
    def mutual_tls(
        cls,
        credentials: TlsCredentials,
        *,
        timeouts: AgentTimeouts | None = None,
        build: PooledTransportBuilder | None = None,
    ) -> AgentClients:
        """Clients that present the master's certificate, trust only the fleet CA and check each node.

        ``build`` makes each node's pooled transport (see ``node_transport``); None: httpx's own.
        """
        return cls(partial(node_transport, credentials, build=build), timeouts=timeouts)

    def fence_with(self, identity: Callable[[], Awaitable[MasterIdentity]]) -> None:
        """Send the master's instance id and epoch, as ``identity`` answers it, on every agent request.

        Every client follows, also those made before (the identity is read at each request, so a
        takeover's raised epoch is sent from its next request on).
        """
        self._identity = identity

    async def _fence(self) -> MasterFence | None:
        if self._identity is None:
            return None
        identity = await self._identity()
        return MasterFence(instance_id=identity.instance_id, epoch=identity.epoch)

    def client_for(self, record: NodeRecord) -> AgentClient:
        """The client of ``record``'s node; a new one when its URL or expected identity changed."""
        known = self._clients.get(record.id)
        if known is not None and _endpoint(known[0]) == _endpoint(record):
            return known[1]
        if known is not None:
            # Requests may still run on the old client (a proxied stream): it is closed with the pool.
            self._retired.append(known[1])
        client = AgentClient(
            record.id,
            record.agent_url,
            self._transports(record),
            timeouts=self._timeouts,
            fresh_transport=partial(self._transports, record),
            fence=self._fence,
        )
        self._clients[record.id] = (record, client)
        return client

    async def forget(self, node_id: str) -> None:
        """Close the client of a node that left the fleet (an unknown node is ignored)."""
        known = self._clients.pop(node_id, None)
        if known is not None:
            await known[1].aclose()

    async def aclose(self) -> None:
        """Close every client."""
        clients = [client for _, client in self._clients.values()] + self._retired
        self._clients.clear()
        self._retired.clear()
        for client in clients:
            await client.aclose()


def _endpoint(record: NodeRecord) -> tuple[str, str, str | None]:
    return record.agent_url, record.expected_certificate_name, record.pin_sha256
