"""What the portal changes, as the admin API changes it: the same services, the same audit lines.

Each action is one small function over :class:`MasterServices`, so a page only gathers input and shows
the outcome, and these sequences (stop before delete, refresh the derived state after a registry
change, audit as ``user:admin``) are tested without a browser.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from mirbad_master._admin_auth import ADMIN_USER
from mirbad_master._services import MasterServices
from mirbad_orchestration import NodeRecord, UnknownModelError, agent_url_for
from mirbad_protocol import (
    ApiKeyCreate,
    ApiKeyCreated,
    ApiKeyInfo,
    InvalidFieldError,
    ModelDefinition,
    ModelStatus,
)

__all__ = [
    "ACTOR",
    "EnrollmentIssued",
    "add_node",
    "create_key",
    "delete_model",
    "install_command",
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
        InvalidFieldError: a field breaks a registry rule (a taken id for a new model: field ``id``).
        RegistryError: the registry cannot be written.
    """
    if new and await _exists(services, definition.id):
        raise InvalidFieldError("id", f"a model with id {definition.id!r} exists already")
    stored = await services.models.upsert(definition)
    await services.sync_models()
    await services.audit.record(ACTOR, "model.create" if new else "model.update", stored.id)
    return stored


async def delete_model(services: MasterServices, model_id: str) -> None:
    """Stop the model, then remove it with its pause (a model removed while running could not be stopped)."""
    await services.models.get(model_id)
    await services.health.stop(model_id, actor=ACTOR)
    await services.models.delete(model_id)
    await services.pauses.clear(model_id)
    await services.sync_models()
    await services.audit.record(ACTOR, "model.delete", model_id)


async def start_model(services: MasterServices, model_id: str, *, force: bool = False) -> ModelStatus:
    """Start by hand (lifts a restart pause); ``force`` skips the node's memory admission.

    Raises:
        AgentAdmissionRefusedError: the budget does not fit and ``force`` was not given.
    """
    definition = await services.models.get(model_id)
    return await services.health.start(definition, actor=ACTOR, force=force)


async def stop_model(services: MasterServices, model_id: str) -> None:
    """Stop by hand (the model is no longer relaunched or crash-restarted)."""
    await services.models.get(model_id)
    await services.health.stop(model_id, actor=ACTOR)


async def restart_model(services: MasterServices, model_id: str, *, force: bool = False) -> ModelStatus:
    """Restart with the saved definition (what a pending restart waits for)."""
    definition = await services.models.get(model_id)
    return await services.health.restart(definition, actor=ACTOR, force=force)


async def create_key(services: MasterServices, request: ApiKeyCreate) -> ApiKeyCreated:
    """Create an API key; the secret in the answer is shown once."""
    created = await services.keys.create(request)
    await services.audit.record(ACTOR, "key.create", created.id)
    return created


async def revoke_key(services: MasterServices, key_id: str) -> ApiKeyInfo:
    """Revoke a key: it stops authenticating at once, its record and usage stay."""
    revoked = await services.keys.revoke(key_id)
    await services.audit.record(ACTOR, "key.revoke", key_id)
    return revoked


async def set_keys_required(services: MasterServices, required: bool) -> None:
    """Whether ``/v1`` requires a key."""
    await services.keys.set_keys_required(required)
    await services.audit.record(ACTOR, "key.require", str(required).lower())


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


def install_command(enroll_url: str, token: str, node_name: str, address: str | None = None) -> str:
    """The command a new node runs to enroll (the same one ``POST /api/nodes/enrollment-tokens`` gives)."""
    command = ["mirbad-agent", "enroll", "--master", enroll_url, "--token", token, "--name", node_name]
    if address:
        command += ["--san", address]
    return shlex.join(command)


async def issue_enrollment(
    services: MasterServices, node_name: str, ttl: timedelta, address: str | None = None
) -> EnrollmentIssued:
    """Issue a one-time join token for ``node_name``.

    Raises:
        InvalidFieldError: the node name or the lifetime is unusable (``nodeName``, ``ttl``).
    """
    # With an address the node is registered when it enrolls, as through the API.
    agent_url = agent_url_for(address) if address else None
    token = await services.enrollment.issue_join_token(node_name, ttl, agent_url=agent_url)
    await services.audit.record(ACTOR, "node.enrollment-token", node_name)
    command = install_command(services.settings.enroll_url, token, node_name, address)
    return EnrollmentIssued(node_name, token, datetime.now(UTC) + ttl, command)


async def add_node(services: MasterServices, node_id: str, name: str, agent_url: str) -> NodeRecord:
    """Register an enrolled node and read it once, so the page shows it at once.

    Raises:
        InvalidFieldError: the id, name or URL is invalid.
        DuplicateNodeError: the id or the URL is taken.
    """
    record = NodeRecord.from_wire(
        {"id": node_id, "name": name, "agentUrl": agent_url, "certificateName": name}
    )
    await services.nodes.add(record)
    await services.audit.record(ACTOR, "node.add", record.id)
    await services.node_monitor.poll_node(record)
    return record


async def _exists(services: MasterServices, model_id: str) -> bool:
    try:
        await services.models.get(model_id)
    except UnknownModelError:
        return False
    return True
