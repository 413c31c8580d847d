"""What the portal changes, through the master's one write path (``_changes``), as the admin API does.

Each action is a thin caller of :mod:`mirbad_master._changes` that names the signed-in administrator
as the actor and builds the write path's input from what a page gathered, validated as the API
validates its bodies. The pages only gather input and show the outcome; the sequences (stop before
delete, refresh the derived state after a registry change, the lock, the audit line) live in the
write path and are tested without a browser.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from mirbad_master import _changes as changes
from mirbad_master._admin_auth import ADMIN_USER
from mirbad_master._changes import EnrollmentTokenRequest, NodeCreate
from mirbad_master._composition import MasterServices
from mirbad_orchestration.fleet import NodeRecord
from mirbad_protocol import ApiKeyCreate, ApiKeyCreated, ApiKeyInfo, ModelDefinition, ModelStatus

__all__ = [
    "ACTOR",
    "EnrollmentIssued",
    "add_node",
    "create_key",
    "delete_model",
    "issue_enrollment",
    "restart_model",
    "revoke_key",
    "save_model",
    "set_keys_required",
    "start_model",
    "stop_model",
]

ACTOR: Final = f"user:{ADMIN_USER}"
"""Who the audit log says acted: the signed-in administrator."""


async def save_model(services: MasterServices, definition: ModelDefinition, *, new: bool) -> ModelDefinition:
    """Store a new or edited model and refresh what derives from the registry.

    Raises:
        InvalidFieldError: a field breaks a registry rule (a taken id for a new model:
            ``ModelExistsError``, field ``id``).
        UnknownModelError: an edited model is gone.
        RegistryError: the registry cannot be written.
    """
    if new:
        return await changes.create_model(services, definition, ACTOR)
    return await changes.update_model(services, definition, ACTOR)


async def delete_model(services: MasterServices, model_id: str) -> None:
    """Stop the model, then remove it with its pause."""
    await changes.delete_model(services, model_id, ACTOR)


async def start_model(services: MasterServices, model_id: str, *, force: bool = False) -> ModelStatus:
    """Start by hand (lifts a restart pause); ``force`` skips the node's memory admission.

    Raises:
        AgentAdmissionRefusedError: the budget does not fit and ``force`` was not given.
    """
    return await changes.start_model(services, model_id, ACTOR, force=force)


async def stop_model(services: MasterServices, model_id: str) -> None:
    """Stop by hand (the model is no longer relaunched or crash-restarted)."""
    await changes.stop_model(services, model_id, ACTOR)


async def restart_model(services: MasterServices, model_id: str, *, force: bool = False) -> ModelStatus:
    """Restart with the saved definition (what a pending restart waits for)."""
    return await changes.restart_model(services, model_id, ACTOR, force=force)


async def create_key(services: MasterServices, request: ApiKeyCreate) -> ApiKeyCreated:
    """Create an API key; the secret in the answer is shown once."""
    return await changes.create_key(services, request, ACTOR)


async def revoke_key(services: MasterServices, key_id: str) -> ApiKeyInfo:
    """Revoke a key: it stops authenticating at once, its record and usage stay."""
    return await changes.revoke_key(services, key_id, ACTOR)


async def set_keys_required(services: MasterServices, required: bool) -> None:
    """Whether ``/v1`` requires a key."""
    await changes.set_keys_required(services, required, ACTOR)


@dataclass(frozen=True)
class EnrollmentIssued:
    """A join token and the command that enrolls the node with it (both shown once).

    Attributes:
        node_name: the name the node's certificate will carry.
        token: the join token.
        expires_at: when the token stops working.
        command: the exact command to run on the node.
    """

    node_name: str
    token: str
    expires_at: datetime
    command: str


async def issue_enrollment(
    services: MasterServices,
    node_name: str,
    ttl: timedelta,
    address: str | None = None,
    agent_url: str | None = None,
) -> EnrollmentIssued:
    """Issue a one-time join token for ``node_name`` (with an address, it is registered on enrolling).

    Args:
        services: the master's services.
        node_name: the name the node's certificate will carry.
        ttl: how long the token may be used.
        address: the host the master reaches the agent at (goes into the certificate's names).
        agent_url: where the agent answers, when not ``https://{address}:9443``.

    Raises:
        InvalidFieldError: the node name, the lifetime, the address or the agent URL is unusable
            (``nodeName``, ``ttlSeconds``, ``address``, ``agentUrl``).
    """
    body = {"nodeName": node_name, "ttlSeconds": int(ttl.total_seconds()), "address": address or None}
    if agent_url is not None:
        body["agentUrl"] = agent_url
    request = EnrollmentTokenRequest.from_user_input(body)
    issued = await changes.issue_enrollment(services, request, ACTOR)
    return EnrollmentIssued(issued.node_name, issued.token, issued.expires_at, issued.install_command)


async def add_node(services: MasterServices, node_id: str, name: str, agent_url: str) -> NodeRecord:
    """Register an enrolled node and read it once, so the page shows it at once.

    Raises:
        InvalidFieldError: the id, name or URL is invalid.
        DuplicateNodeError: the id or the URL is taken.
    """
    node = NodeCreate.from_user_input({"id": node_id, "name": name, "agentUrl": agent_url})
    record, _state = await changes.add_node(services, node, ACTOR)
    return record
