"""In-memory stand-ins for the router's contracts, shipped for the tests of applications that mount it.

Like httpx's ``MockTransport``: mount :func:`~mirbad_router.create_router_app` over a
:class:`FakeResolver`, a :class:`FakeKeyStore` and a :class:`FakeMaintenanceGate` (with a
:class:`~mirbad_router.RouterStats`), steer them from the test (a model's state, a key's limits,
maintenance on or off) and read back what the router asked of them.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from mirbad_protocol import MirbadError, ModelState

from ._contracts import (
    KeyGrant,
    KeyStore,
    MaintenanceGate,
    MaintenanceNotice,
    ModelResolver,
    Resolution,
    RoutedModel,
    Upstream,
)

__all__ = ["FakeKeyStore", "FakeMaintenanceGate", "FakeResolver", "UsageRecord"]


@dataclass
class _Model:
    resolution: Resolution
    created: int


class FakeResolver(ModelResolver):
    """A registry of models held in memory.

    Args:
        started_state: the state a model takes when the router starts it on request; None leaves it
            Starting until the test calls :meth:`set_state`.

    Attributes:
        starts: every model id passed to :meth:`start_on_request`, in order.
    """

    def __init__(self, *, started_state: ModelState | None = ModelState.READY) -> None:
        self.started_state = started_state
        self.starts: list[str] = []
        self._models: dict[str, _Model] = {}
        self._next_start_error: MirbadError | None = None

    def add(
        self,
        served_name: str,
        upstream: Upstream | None = None,
        *,
        model_id: str | None = None,
        state: ModelState = ModelState.READY,
        auto_start_on_request: bool = False,
        created: int = 0,
        context_tokens: int | None = None,
    ) -> Resolution:
        """Register a model (its id defaults to its served name) and return its resolution."""
        resolution = Resolution(
            model_id=model_id or served_name,
            served_name=served_name,
            state=state,
            auto_start_on_request=auto_start_on_request,
            upstream=upstream,
            context_tokens=context_tokens,
        )
        self._models[resolution.model_id] = _Model(resolution, created)
        return resolution

    def set_state(self, model_id: str, state: ModelState, *, error: str | None = None) -> None:
        """Move a registered model to ``state`` (with ``error`` when it failed)."""
        model = self._models[model_id]
        model.resolution = replace(model.resolution, state=state, error=error)

    def fail_next_start(self, error: MirbadError) -> None:
        """Make the next :meth:`start_on_request` raise ``error`` and change nothing."""
        self._next_start_error = error

    async def list_ready(self) -> Sequence[RoutedModel]:
        """The Ready models, in the order they were added."""
        return [
            RoutedModel(model.resolution.served_name, model.created)
            for model in self._models.values()
            if model.resolution.state is ModelState.READY
        ]

    async def resolve(self, served_name: str) -> Resolution | None:
        """The model whose served name matches ``served_name`` case-insensitively."""
        wanted = served_name.casefold()
        for model in self._models.values():
            if model.resolution.served_name.casefold() == wanted:
                return model.resolution
        return None

    async def start_on_request(self, model_id: str) -> None:
        """Record the start; the model becomes ``started_state`` (or Starting)."""
        self.starts.append(model_id)
        if self._next_start_error is not None:
            error, self._next_start_error = self._next_start_error, None
            raise error
        self.set_state(model_id, self.started_state or ModelState.STARTING)


@dataclass(frozen=True)
class UsageRecord:
    """One call of :meth:`FakeKeyStore.record_usage`."""

    key_id: str
    served_name: str
    prompt_tokens: int
    completion_tokens: int


class FakeKeyStore(KeyStore):
    """API keys held in memory as SHA-256 hashes, compared in constant time as a real store must.

    Args:
        required: whether requests need a key.

    Attributes:
        usage: every usage the router recorded, in order.
        used_at: when the router last let each key in (key id -> the router's time).
    """

    def __init__(self, *, required: bool = True) -> None:
        self.required = required
        self.usage: list[UsageRecord] = []
        self.used_at: dict[str, datetime] = {}
        self._grants: list[tuple[bytes, KeyGrant]] = []

    def add_key(
        self,
        secret: str,
        name: str = "test key",
        *,
        allowed_models: Sequence[str] | None = None,
        expires_at: datetime | None = None,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
    ) -> KeyGrant:
        """Store the key ``secret`` and return its grant (its id is ``key-<n>``)."""
        grant = KeyGrant(
            key_id=f"key-{len(self._grants) + 1}",
            name=name,
            allowed_models=None if allowed_models is None else frozenset(allowed_models),
            expires_at=expires_at,
            requests_per_minute=requests_per_minute,
            tokens_per_minute=tokens_per_minute,
        )
        self._grants.append((_digest(secret), grant))
        return grant

    async def keys_required(self) -> bool:
        """Whether keys are required."""
        return self.required

    async def authenticate(self, bearer: str) -> KeyGrant | None:
        """The grant whose hash matches, checking every stored key so timing reveals nothing."""
        offered = _digest(bearer)
        found: KeyGrant | None = None
        for digest, grant in self._grants:
            if hmac.compare_digest(digest, offered):
                found = grant
        return found

    async def mark_used(self, grant: KeyGrant, at: datetime) -> None:
        """Remember the router's time of the key's last admission in :attr:`used_at`."""
        self.used_at[grant.key_id] = at

    async def record_usage(
        self, grant: KeyGrant, served_name: str, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """Append a :class:`UsageRecord`."""
        self.usage.append(UsageRecord(grant.key_id, served_name, prompt_tokens, completion_tokens))

    def totals(self, key_id: str, served_name: str) -> tuple[int, int]:
        """The prompt and completion tokens recorded for one key and model."""
        records = [r for r in self.usage if r.key_id == key_id and r.served_name == served_name]
        return sum(r.prompt_tokens for r in records), sum(r.completion_tokens for r in records)


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


class FakeMaintenanceGate(MaintenanceGate):
    """Maintenance mode switched by hand: set :attr:`notice`, or call :meth:`enter` and :meth:`leave`.

    :meth:`hold` and :meth:`release` hold single served names instead, as a job on one node does.
    """

    def __init__(self) -> None:
        self.notice: MaintenanceNotice | None = None
        self.held: dict[str, MaintenanceNotice] = {}

    def hold(self, served_name: str, message: str, retry_after_s: int) -> None:
        """Refuse requests for ``served_name`` (any case) with ``message``."""
        self.held[served_name.casefold()] = MaintenanceNotice(message, retry_after_s)

    def release(self, served_name: str) -> None:
        """Serve ``served_name`` again."""
        self.held.pop(served_name.casefold(), None)

    async def holds_models(self) -> bool:
        """Whether single names are held."""
        return bool(self.held)

    async def notice_for(self, served_name: str) -> MaintenanceNotice | None:
        """The whole router's notice, else the held name's."""
        return self.notice or self.held.get(served_name.casefold())

    def enter(self, message: str, retry_after_s: int) -> None:
        """Start refusing requests with ``message``."""
        self.notice = MaintenanceNotice(message, retry_after_s)

    def leave(self) -> None:
        """Stop refusing requests."""
        self.notice = None

    async def current(self) -> MaintenanceNotice | None:
        """The notice while in maintenance, else None."""
        return self.notice
