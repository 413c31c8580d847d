"""The agent endpoint resolver: which node serves a model name, and how the master's router reaches it.

A served name (compared case-insensitively) is looked up in the model registry; the model's node is the
one the status cache finds it running on, else the node its placement names, else the default node.
The router then proxies through that node's agent, ``https://agent:9443/agent/v1/proxy/{id}/``, with
the node's mutual-TLS client. Nothing here waits on a node: states come from the status cache.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import httpx

from mirbad_orchestration.exceptions import UnknownNodeError
from mirbad_orchestration.registry import ModelRegistry
from mirbad_protocol import ModelDefinition, ModelState

from ._agent_clients import AgentClients
from ._model_status import model_node, model_status
from ._node_monitor import StatusCache
from ._nodes import LOCAL_NODE_ID, NodeRegistry

__all__ = ["AgentEndpoint", "AgentEndpointResolver"]


@dataclass(frozen=True)
class AgentEndpoint:
    """A registered model, its node and the way to it.

    Attributes:
        model_id: the registry id.
        served_name: the name as registered (a request may use another case).
        node_id: the node that runs it, or would run it when started.
        state: its state on that node (:func:`~mirbad_orchestration.fleet.model_status`, the state every
            view shows); Unknown when the node is unreachable, unregistered or not polled yet.
        error: why the model failed, or why its state is unknown.
        auto_start_on_request: whether a request for the model starts it when it is not running.
        base_url: the agent's proxy URL for the model (ending in ``/``; ``v1/...`` is appended);
            None when the node is not registered.
        client: the node's mutual-TLS client, to send ``base_url`` requests with (owned by the pool:
            never close it); None when the node is not registered.
        context_tokens: the longest context one request may use (the definition's ``maxModelLen``):
            the bound a token-limited key reserves for a request that names no ``max_tokens``.
    """

    model_id: str
    served_name: str
    node_id: str
    state: ModelState
    error: str | None = None
    auto_start_on_request: bool = False
    base_url: str | None = None
    client: httpx.AsyncClient | None = None
    context_tokens: int | None = None

    @property
    def ready(self) -> bool:
        """Whether requests can be proxied to the model now."""
        return self.state is ModelState.READY and self.client is not None


class AgentEndpointResolver:
    """Resolves served names to :class:`AgentEndpoint` from the registry and the status cache.

    Args:
        models: the model registry.
        nodes: the node registry.
        clients: the agent clients (one per node).
        cache: the node monitor's status cache.
        default_node_id: the node of models without a placement.
    """

    def __init__(
        self,
        models: ModelRegistry,
        nodes: NodeRegistry,
        clients: AgentClients,
        cache: StatusCache,
        *,
        default_node_id: str = LOCAL_NODE_ID,
    ) -> None:
        self._models = models
        self._nodes = nodes
        self._clients = clients
        self._cache = cache
        self._default_node_id = default_node_id

    async def resolve(self, served_name: str) -> AgentEndpoint | None:
        """The model registered as ``served_name`` (any case), or None when no model has that name."""
        definition = await self._models.find_by_served_name(served_name)
        return None if definition is None else await self.endpoint(definition)

    async def list_ready(self) -> list[AgentEndpoint]:
        """Every registered model that is Ready on a reachable node, in registry order."""
        endpoints = [await self.endpoint(definition) for definition in await self._models.list()]
        return [endpoint for endpoint in endpoints if endpoint.ready]

    async def endpoint(self, definition: ModelDefinition) -> AgentEndpoint:
        """Where ``definition`` runs (or would run) and how to reach it."""
        node_id = model_node(self._cache, definition, self._default_node_id)
        unknown = AgentEndpoint(
            definition.id,
            definition.served_name,
            node_id,
            state=ModelState.UNKNOWN,
            auto_start_on_request=definition.auto_start_on_request,
            context_tokens=definition.max_model_len,
        )
        try:
            record = await self._nodes.get(node_id)
        except UnknownNodeError:
            return replace(unknown, error=f"node {node_id!r} is not registered")
        client = self._clients.client_for(record)
        status = model_status(self._cache, definition, self._default_node_id)
        base_url = client.proxy_base_url(definition.id)
        return replace(unknown, state=status.state, error=status.error, base_url=base_url, client=client.http)
