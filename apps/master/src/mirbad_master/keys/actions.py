"""Every change to the API keys of ``/v1``, whoever asks: create, revoke, delete, require a key or not.

Each change and its audit line are one call, so the admin API and the portal leave the same lines; the
callers differ only in the actor. A new key's secret is in the answer once and stored nowhere.
"""

from __future__ import annotations

from mirbad_master._composition import MasterServices
from mirbad_protocol.admin import ApiKeyCreate, ApiKeyCreated, ApiKeyInfo

__all__ = [
    "create_key",
    "delete_key",
    "revoke_key",
    "set_keys_required",
]


async def create_key(services: MasterServices, request: ApiKeyCreate, actor: str) -> ApiKeyCreated:
    """Create an API key; the secret in the answer is shown once and stored nowhere."""
    created = await services.keys.create(request)
    await services.audit.record(actor, "key.create", created.id)
    return created


async def revoke_key(services: MasterServices, key_id: str, actor: str) -> ApiKeyInfo:
    """Revoke a key: it stops authenticating at once, its record and usage stay.

    Raises:
        UnknownApiKeyError: no such key.
    """
    revoked = await services.keys.revoke(key_id)
    await services.audit.record(actor, "key.revoke", key_id)
    return revoked


async def delete_key(services: MasterServices, key_id: str, actor: str) -> None:
    """Delete a key with its usage.

    Raises:
        UnknownApiKeyError: no such key.
    """
    await services.keys.delete(key_id)
    await services.audit.record(actor, "key.delete", key_id)


async def set_keys_required(services: MasterServices, required: bool, actor: str) -> None:
    """Whether ``/v1`` requires a key."""
    await services.keys.set_keys_required(required)
    await services.audit.record(actor, "key.require", str(required).lower())
