"""The router's contracts over the orchestration: resolution, keys and counters for ``/v1``.

* :class:`FleetResolver`: served names through :class:`~mirbad_orchestration.fleet.AgentEndpointResolver`
  (registry + status cache, no waiting on a node), upstreams through each node's mutual-TLS client,
  and starts on request through ``ModelControl`` (supervision), so the start is listed, audited and watched.
* :class:`ApiKeyGate`: the API key store; a revoked key is no key, any other is a grant with its
  expiry, which the router alone checks with its clock (refused, or ignored when keys are optional).
* :class:`MasterStats`: the router's counters plus the time each model was last asked for, which the
  health monitor's idle unload reads.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

from mirbad_orchestration import ApiKeyStore, NodeNotReadyToStartError
from mirbad_orchestration.fleet import AgentEndpoint, AgentEndpointResolver, StatusCache
from mirbad_router import (
    KeyGrant,
    KeyStore,
    ModelResolver,
    Resolution,
    RoutedModel,
    RouterStats,
    StartDeferredError,
    Upstream,
)

__all__ = ["ApiKeyGate", "FleetResolver", "MasterStats"]

StartOnRequest = Callable[[str], Awaitable[None]]
"""``model_id -> None``: start the model because a request asked for it."""


class FleetResolver(ModelResolver):
    """Resolves served names over the fleet for the router.

    Args:
        endpoints: the agent endpoint resolver.
        cache: the node monitor's status cache (for each model's start time).
        start: starts a model for a request (``ModelControl.start``, with the request's actor).
    """

    def __init__(self, endpoints: AgentEndpointResolver, cache: StatusCache, start: StartOnRequest) -> None:
        self._endpoints = endpoints
        self._cache = cache
        self._start = start

    async def list_ready(self) -> Sequence[RoutedModel]:
        """Every Ready model, by served name, with the time its instance started."""
        return [
            RoutedModel(endpoint.served_name, self._created(endpoint))
            for endpoint in await self._endpoints.list_ready()
        ]

    async def resolve(self, served_name: str) -> Resolution | None:
        """The model served as ``served_name``, in the state every view shows (Unknown: its node is down)."""
        endpoint = await self._endpoints.resolve(served_name)
        if endpoint is None:
            return None
        upstream = None
        if endpoint.base_url is not None and endpoint.client is not None:
            upstream = Upstream(endpoint.base_url, endpoint.client)
        return Resolution(
            model_id=endpoint.model_id,
            served_name=endpoint.served_name,
            state=endpoint.state,
            auto_start_on_request=endpoint.auto_start_on_request,
            upstream=upstream,
            error=endpoint.error,
            context_tokens=endpoint.context_tokens,
        )

    async def start_on_request(self, model_id: str) -> None:
        """Start the model; the router then polls :meth:`resolve` until it is Ready.

        Raises:
            StartDeferredError: its node cannot start it yet (its llama-server is still being built).
            MirbadError: the start was refused or failed.
        """
        try:
            await self._start(model_id)
        except NodeNotReadyToStartError as exc:
            raise StartDeferredError(exc.message) from exc

    def _created(self, endpoint: AgentEndpoint) -> int:
        node = self._cache.node(endpoint.node_id)
        status = node.model(endpoint.model_id) if node is not None else None
        started = status.started_at if status is not None else None
        return int(started.timestamp()) if started is not None else 0


class ApiKeyGate(KeyStore):
    """The router's key check over the master's :class:`~mirbad_orchestration.ApiKeyStore`.

    The store reports the key as it stands (:meth:`~mirbad_orchestration.ApiKeyStore.find_by_secret`,
    which reads no clock); this gate only drops a revoked key, and leaves expiry to the router.
    """

    def __init__(self, store: ApiKeyStore) -> None:
        self._store = store

    async def keys_required(self) -> bool:
        """Whether ``/v1`` needs a key (a stored setting, on once the first key exists)."""
        return await self._store.keys_required()

    async def authenticate(self, bearer: str) -> KeyGrant | None:
        """The grant of ``bearer``, expired or not; None for an unknown or revoked key."""
        key = await self._store.find_by_secret(bearer)
        if key is None or key.revoked_at is not None:
            return None
        return KeyGrant(
            key_id=key.id,
            name=key.name,
            allowed_models=frozenset(key.allowed_models) or None,
            expires_at=key.expires_at,
            requests_per_minute=key.requests_per_minute,
            tokens_per_minute=key.tokens_per_minute,
        )

    async def mark_used(self, grant: KeyGrant, at: datetime) -> None:
        """Stamp the key's last use with the router's time of admission (in memory; flushed with usage)."""
        self._store.mark_used(grant.key_id, at)

    async def record_usage(
        self, grant: KeyGrant, served_name: str, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """Count one response's tokens for the key (in memory; the store flushes them)."""
        self._store.record_usage(grant.key_id, served_name, prompt_tokens, completion_tokens)


class MasterStats(RouterStats):
    """:class:`~mirbad_router.RouterStats` that also remembers when each model was last asked for.

    Args:
        clock: the current time, aware.
    """

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        super().__init__()
        self._clock = clock or (lambda: datetime.now(UTC))
        self._used_lock = threading.Lock()
        self._used: dict[str, datetime] = {}
        self._served_names: dict[str, str] = {}

    def begin(self, served_name: str) -> None:
        """Count the request and stamp the model as used now."""
        super().begin(served_name)
        self._stamp(served_name)

    def end(self, served_name: str, *, failed: bool) -> None:
        """End the request; the model counts as used until its last answer ends."""
        super().end(served_name, failed=failed)
        self._stamp(served_name)

    def name_models(self, served_names: dict[str, str]) -> None:
        """Tell which served name each model id has (model id -> served name), for :meth:`last_used`."""
        with self._used_lock:
            self._served_names = {model_id: name.casefold() for model_id, name in served_names.items()}

    def last_used(self, model_id: str) -> datetime | None:
        """When a request for ``model_id`` last began or ended; None if never (since start-up)."""
        with self._used_lock:
            name = self._served_names.get(model_id)
            return self._used.get(name) if name is not None else None

    def _stamp(self, served_name: str) -> None:
        with self._used_lock:
            self._used[served_name.casefold()] = self._clock()
