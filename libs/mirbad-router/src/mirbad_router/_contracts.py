"""The four things a router needs from the application that mounts it, as abstract base classes.

The router owns HTTP: reading requests, answering errors in the OpenAI shape, proxying. Everything else
comes from its host through these contracts, so the router imports nothing of the orchestration and a
test (or another application) can mount it over fakes (:mod:`mirbad_router.testing`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import httpx

from mirbad_protocol import ModelState

__all__ = [
    "KeyGrant",
    "KeyStore",
    "MaintenanceGate",
    "MaintenanceNotice",
    "ModelResolver",
    "Resolution",
    "RoutedModel",
    "StatsSink",
    "Upstream",
]


@dataclass(frozen=True)
class Upstream:
    """Where a model answers: the router sends ``{base_url}v1/{path}?{query}`` through ``client``.

    The resolver owns the client and its life cycle, so the master can hand the mutual-TLS client of a
    node's agent (``https://agent:9443/agent/v1/proxy/{id}/``) and a test a plain loopback client. The
    router sets its own per-request timeouts (connect 10 s, no read timeout) and never closes the client.

    Attributes:
        base_url: the URL ``v1/...`` is appended to; it should end with ``/``.
        client: the client that reaches ``base_url``.
        headers: extra request headers for this upstream (they replace the client's of the same name).
    """

    base_url: str
    client: httpx.AsyncClient
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RoutedModel:
    """A Ready model as ``GET /v1/models`` lists it.

    Attributes:
        served_name: the name clients put in the ``model`` field.
        created: when it was created, in seconds since the epoch.
    """

    served_name: str
    created: int = 0


@dataclass(frozen=True)
class Resolution:
    """What the resolver knows about the model a request names.

    Attributes:
        model_id: the registry id (what :meth:`ModelResolver.start_on_request` takes).
        served_name: the name as registered (the request may have used another case).
        state: the model's current state.
        auto_start_on_request: whether a request for the model, when it is not running, starts it.
        upstream: where it answers; only used when ``state`` is Ready (None while it has no endpoint).
        error: why the model failed, shown to clients when ``state`` is Failed.
        context_tokens: the model's context length in tokens, when known: what a key with a token
            limit reserves for a request that sets no ``max_tokens``.
    """

    model_id: str
    served_name: str
    state: ModelState
    auto_start_on_request: bool = False
    upstream: Upstream | None = None
    error: str | None = None
    context_tokens: int | None = None

    @property
    def ready(self) -> bool:
        """Whether requests can go to the model now: it is Ready and has an upstream."""
        return self.state is ModelState.READY and self.upstream is not None


class ModelResolver(ABC):
    """Maps served names to models and their upstreams (the master's registry and node status cache)."""

    @abstractmethod
    async def list_ready(self) -> Sequence[RoutedModel]:
        """Every model that is Ready now."""

    @abstractmethod
    async def resolve(self, served_name: str) -> Resolution | None:
        """The model registered under ``served_name`` (compared case-insensitively), or None."""

    @abstractmethod
    async def start_on_request(self, model_id: str) -> None:
        """Ask for the model to start, and return once the start is under way.

        The router then polls :meth:`resolve` until the model is Ready or Failed, or its start-up timeout
        passes. Starting a model that is already starting must be harmless. A refusal (not enough memory,
        an unreachable node) raises a :class:`~mirbad_protocol.MirbadError` subclass, whose message the
        router passes on in a 503 ``model_start_failed``; a start that only cannot happen *yet* raises
        :class:`~mirbad_router.exceptions.StartDeferredError`, answered 503 ``model_not_ready`` (both
        with ``Retry-After``).
        """


@dataclass(frozen=True)
class KeyGrant:
    """What an API key may do, as the key store describes it after a successful check.

    Attributes:
        key_id: a stable identifier of the key (never the key itself); limits are kept per id.
        name: what the operator called it, for messages.
        allowed_models: the served names it may use (compared case-insensitively); None allows all.
        expires_at: when it stops working (timezone-aware); None never.
        requests_per_minute: the most requests it may send in any 60 s; None is unlimited.
        tokens_per_minute: the most prompt plus completion tokens it may use in any 60 s; None is
            unlimited. Each request reserves its upper bound (:func:`~mirbad_router.request_token_bound`)
            when admitted and settles to its real usage when it ends, so concurrent requests cannot
            together pass the limit; one whose bound is unknown takes all that is left and runs alone.
    """

    key_id: str
    name: str
    allowed_models: frozenset[str] | None = None
    expires_at: datetime | None = None
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None

    def allows(self, served_name: str) -> bool:
        """Whether this key may use the model served as ``served_name``."""
        if self.allowed_models is None:
            return True
        wanted = served_name.casefold()
        return any(name.casefold() == wanted for name in self.allowed_models)

    def expired(self, now: datetime) -> bool:
        """Whether the key has expired at ``now`` (timezone-aware)."""
        return self.expires_at is not None and now >= self.expires_at


class KeyStore(ABC):
    """Checks bearer keys and records what each key used.

    Implementations keep only hashes of the keys and compare them in constant time
    (:func:`hmac.compare_digest`), so the time a check takes says nothing about a stored key.
    """

    @abstractmethod
    async def keys_required(self) -> bool:
        """Whether /v1 requests need a valid key; without, a valid key still gets its limits and usage."""

    @abstractmethod
    async def authenticate(self, bearer: str) -> KeyGrant | None:
        """The grant of the key ``bearer``, expired or not, or None for no (or a revoked) key.

        A store reads no clock here: the router alone decides expiry, with its own ``now``, so a key
        expires at the same instant for every check.
        """

    async def mark_used(self, grant: KeyGrant, at: datetime) -> None:  # noqa: B027 - an optional hook
        """Note that the router let ``grant``'s key in at ``at`` (the router's clock); by default nothing."""

    @abstractmethod
    async def record_usage(
        self, grant: KeyGrant, served_name: str, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """Add the tokens of one response to the key's usage for the model served as ``served_name``."""


@dataclass(frozen=True)
class MaintenanceNotice:
    """Why the router refuses every request for now, and when to try again.

    Attributes:
        message: what is going on (a benchmark or a tuning run, say).
        retry_after_s: seconds until the job is expected to finish (sent as ``Retry-After``).
    """

    message: str
    retry_after_s: int


class MaintenanceGate(ABC):
    """Says whether the router is in maintenance mode (a job holds the models)."""

    @abstractmethod
    async def current(self) -> MaintenanceNotice | None:
        """The notice while the whole router is in maintenance, else None."""

    async def holds_models(self) -> bool:
        """Whether a job holds single models now (then the router reads a request's model early)."""
        return False

    async def notice_for(self, served_name: str) -> MaintenanceNotice | None:
        """The notice for a request naming ``served_name`` while a job holds that model, else None.

        By default the whole router's notice: a gate that holds single models (a job on one node)
        overrides it, so the models of other nodes keep serving.
        """
        return await self.current()


class StatsSink(ABC):
    """Receives the router's per-model counters; called from many tasks, and possibly threads, at once.

    Each forwarded request is one :meth:`begin` followed, whatever happens, by one :meth:`end`.
    """

    @abstractmethod
    def begin(self, served_name: str) -> None:
        """A request for ``served_name`` is being forwarded (counts it and marks it in flight)."""

    @abstractmethod
    def end(self, served_name: str, *, failed: bool) -> None:
        """That request is over; ``failed`` when the answer was not 2xx or the exchange broke off."""
