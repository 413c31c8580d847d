"""The master's one write path: every change to models, keys, nodes and enrollment, whoever asks.

The admin API's routes and the portal's actions both call these functions, so the steps of a change
(stop before delete, refresh what derives from the registry after each registry change), the lock
that makes an id check and its write one step, and the audit line are the same either way; the two
differ only in who the audit line names. Input is validated at the edges (the API's bodies and the
portal's forms, both with ``from_user_input``), except the rules on what the registry would store
(:func:`check_lifted_flags`), which are held here so no caller can skip them. The refusals are the
libraries' exceptions and the ones below; ``_api_errors`` maps each to a status.
"""

from __future__ import annotations

import ipaddress
import shlex
from datetime import UTC, datetime, timedelta
from typing import Annotated, Final

from pydantic import Field, field_validator

from mirbad_orchestration import UnknownModelError, normalize_definition
from mirbad_orchestration.fleet import NODE_ID_PATTERN, NodeRecord, NodeState, agent_url_for
from mirbad_protocol import (
    ApiKeyCreate,
    ApiKeyCreated,
    ApiKeyInfo,
    EnrollmentTokenIssued,
    ModelDefinition,
    ModelStatus,
    WireModel,
)

from ._composition import MasterServices
from ._llama_server_build import refuse_llamacpp_start
from ._memory_estimate import check_memory_estimate
from .exceptions import LocalNodeError, ModelExistsError, NodeHasModelsError

__all__ = [
    "MAX_TOKEN_TTL_S",
    "EnrollmentTokenRequest",
    "NodeCreate",
    "add_node",
    "check_lifted_flags",
    "create_key",
    "create_model",
    "delete_key",
    "delete_model",
    "issue_enrollment",
    "remove_node",
    "restart_model",
    "revoke_key",
    "set_keys_required",
    "start_model",
    "stop_model",
    "update_model",
    "user_definition",
]

MAX_TOKEN_TTL_S: Final = 7 * 24 * 3600
"""The longest an enrollment token may be valid."""


class EnrollmentTokenRequest(WireModel):
    """The body of ``POST /api/nodes/enrollment-tokens``.

    Attributes:
        node_name: the name the node's certificate will carry.
        ttl_seconds: how long the token may be used (once).
        address: the DNS name or IP address the master will reach the node's agent at; it goes into
            the install command (``--san``), so the agent's certificate is valid for it, and the node is
            registered at ``https://{address}:9443`` when it enrolls.
        agent_url: where the node's agent answers, when not ``https://{address}:9443``.
        reenroll: the name is an existing node's: its new certificate replaces the old one, which the
            master refuses from the enrollment on.
    """

    node_name: str
    ttl_seconds: Annotated[int, Field(ge=60, le=MAX_TOKEN_TTL_S)] = 3600
    address: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9.:-]+$")] | None = None
    agent_url: str | None = None
    reenroll: bool = False

    @field_validator("address")
    @classmethod
    def _no_port_in_the_address(cls, value: str | None) -> str | None:
        # A colon belongs to an IPv6 address only: "10.0.0.7:18445" became https://[10.0.0.7:18445]:9443.
        if value is not None and ":" in value:
            try:
                ipaddress.IPv6Address(value)
            except ValueError:
                raise ValueError(
                    "a host name or an IP address, without a port: give another port in agentUrl "
                    "(https://host:port)"
                ) from None
        return value


class NodeCreate(WireModel):
    """The body of ``POST /api/nodes``: an enrolled node and where its agent answers."""

    id: Annotated[str, Field(pattern=NODE_ID_PATTERN)]
    name: Annotated[str, Field(min_length=1, max_length=200)]
    agent_url: str
    labels: dict[str, str] = Field(default_factory=dict)


def user_definition(data: object) -> ModelDefinition:
    """A definition a person typed (the portal's editor), validated exactly as the API's bodies are.

    Raises:
        InvalidFieldError: naming the first bad or unknown field.
    """
    definition = ModelDefinition.from_user_input(data)
    check_lifted_flags(definition)
    return definition


def check_lifted_flags(definition: ModelDefinition) -> None:
    """Hold a setting given as an owned flag in ``extraArgs`` to the limits of its typed field.

    The registry lifts ``--max-num-seqs 99999999`` out of ``extraArgs`` into ``maxNumSeqs``, after the
    body's own validation; validating the lifted definition as user input again closes that gap.

    Raises:
        InvalidFieldError: naming the typed field the flag would set.
    """
    ModelDefinition.from_user_input(normalize_definition(definition).to_wire())


async def create_model(services: MasterServices, definition: ModelDefinition, actor: str) -> ModelDefinition:
    """Register a new model and refresh what derives from the registry.

    Raises:
        ModelExistsError: the id is taken.
        InvalidFieldError: a field breaks a registry rule (``DuplicateServedNameError``: the served
            name is taken), or a llama.cpp budget is below its memory estimate (``memoryBudgetGiB``).
        RegistryError: the registry cannot be written.
    """
    check_lifted_flags(definition)
    # Outside the registry lock: it waits for the node to read the GGUF header.
    await check_memory_estimate(services, definition)
    # The id check and the write are one step, whether the API or the portal asks (or both at once).
    async with services.registry_lock:
        if await _exists(services, definition.id):
            raise ModelExistsError(definition.id)
        stored = await services.models.upsert(definition)
    await services.sync_models()
    await services.audit.record(actor, "model.create", stored.id)
    return stored


async def update_model(services: MasterServices, definition: ModelDefinition, actor: str) -> ModelDefinition:
    """Replace an existing model's definition (a running model keeps running until restarted).

    Raises:
        UnknownModelError: no model has the definition's id (an edit never creates one).
        ModelHeldByJobError: a tuning run holds the model (its restart would undo the edit).
        InvalidFieldError: a field breaks a registry rule, or a llama.cpp budget is below its memory
            estimate (``memoryBudgetGiB``).
        RegistryError: the registry cannot be written.
    """
    check_lifted_flags(definition)
    await check_memory_estimate(services, definition)
    async with services.registry_lock:  # a delete in between must not be undone by this write
        await services.models.get(definition.id)
        services.tuning.check_not_held(definition.id)
        stored = await services.models.upsert(definition)
    await services.sync_models()
    await services.audit.record(actor, "model.update", stored.id)
    return stored


async def delete_model(services: MasterServices, model_id: str, actor: str) -> None:
    """Stop the model, then remove it with its restart pause.

    Raises:
        UnknownModelError: no such model.
        ModelHeldByJobError: a tuning run holds the model (its restart would bring it back unlisted).
        NodeError: its node could not stop it (it then stays registered).
    """
    await services.models.get(model_id)
    services.tuning.check_not_held(model_id)
    # Stopped first: a model removed from the registry while running could never be stopped here.
    await services.control.stop(model_id, actor=actor)
    await services.models.delete(model_id)
    await services.pauses.clear(model_id)
    await services.sync_models()
    await services.audit.record(actor, "model.delete", model_id)


async def start_model(
    services: MasterServices, model_id: str, actor: str, *, force: bool = False
) -> ModelStatus:
    """Start by hand through :class:`~mirbad_orchestration.supervision.ModelControl`.

    It lifts a restart pause and records the audit line.

    Raises:
        UnknownModelError: no such model.
        MemoryAdmissionRefusedError: the budget does not fit and ``force`` was not given.
        LlamaServerNotBuiltError: a llama.cpp model on node local while its llama-server is built.
    """
    definition = await services.models.get(model_id)
    refuse_llamacpp_start(services.llama_server_build, definition, services.runtime.node_for(definition))
    return await services.control.start(definition, actor=actor, force=force)


async def stop_model(services: MasterServices, model_id: str, actor: str) -> None:
    """Stop by hand (the model is no longer relaunched or crash-restarted).

    Raises:
        UnknownModelError: no such model.
    """
    await services.models.get(model_id)
    await services.control.stop(model_id, actor=actor)


async def restart_model(
    services: MasterServices, model_id: str, actor: str, *, force: bool = False
) -> ModelStatus:
    """Restart with the saved definition (what a pending restart waits for).

    Raises:
        UnknownModelError: no such model.
        LlamaServerNotBuiltError: a llama.cpp model on node local while its llama-server is built.
    """
    definition = await services.models.get(model_id)
    refuse_llamacpp_start(services.llama_server_build, definition, services.runtime.node_for(definition))
    return await services.control.restart(definition, actor=actor, force=force)


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


async def issue_enrollment(
    services: MasterServices, request: EnrollmentTokenRequest, actor: str
) -> EnrollmentTokenIssued:
    """Issue a one-time join token and the command that enrolls the node with it (both shown once).

    With an address (or an agent URL) the node is registered when it enrolls.

    Raises:
        InvalidFieldError: the node name is unusable (``nodeName``).
        EnrollmentError: the name is an existing node's without ``reenroll``, or the tokens cannot be
            stored.
    """
    ttl = timedelta(seconds=request.ttl_seconds)
    agent_url = request.agent_url
    if agent_url is None and request.address is not None:
        agent_url = agent_url_for(request.address)
    token = await services.enrollment.issue_join_token(
        request.node_name, ttl, agent_url=agent_url, reenroll=request.reenroll
    )
    command = ["mirbad-agent", "enroll", "--master", services.settings.enroll_url, "--token", token]
    command += ["--name", request.node_name]
    if request.address is not None:
        command += ["--san", request.address]
    issued = EnrollmentTokenIssued(
        token=token,
        node_name=request.node_name,
        expires_at=datetime.now(UTC) + ttl,
        install_command=shlex.join(command),
    )
    await services.audit.record(actor, "node.enrollment-token", request.node_name)
    return issued


async def add_node(services: MasterServices, node: NodeCreate, actor: str) -> tuple[NodeRecord, NodeState]:
    """Register an enrolled node and read it once, so its state is known at once.

    Raises:
        InvalidFieldError: the record's own rules (an ``agentUrl`` that is not https, or has a path).
        DuplicateNodeError: the id or the URL is taken.
    """
    # from_wire: the record's own URL rule (https, no path) is then an error naming agentUrl.
    record = NodeRecord.from_wire({**node.to_wire(), "certificateName": node.name})
    await services.nodes.add(record)
    await services.audit.record(actor, "node.add", record.id)
    state = await services.node_monitor.poll_node(record)
    return record, state


async def remove_node(services: MasterServices, node_id: str, actor: str, *, unplace: bool = False) -> None:
    """Remove a node from the fleet; with ``unplace``, the models placed on it lose their placement.

    Raises:
        UnknownNodeError: no such node.
        LocalNodeError: it is the master's own node.
        NodeHasModelsError: models are placed on it and ``unplace`` was not given.
    """
    record = await services.nodes.get(node_id)
    if record.local:
        raise LocalNodeError(node_id, f"node {node_id!r} is the master's own agent; it stays")
    placed = [model.id for model in await services.models.placed_on(node_id)]
    if placed and not unplace:
        # Models left pointing at a node that is gone could never start again, silently.
        names = ", ".join(repr(model_id) for model_id in sorted(placed))
        raise NodeHasModelsError(
            node_id,
            f"models are placed on node {node_id!r}: {names}; move or delete them, "
            "or remove the node with ?unplace=true to clear their placement",
        )
    if placed:
        for model in await services.models.unplace(node_id):
            await services.audit.record(actor, "model.unplace", model.id, node_id=node_id)
        await services.sync_models()
    await services.nodes.remove(node_id)
    services.cache.forget(node_id)
    await services.clients.forget(node_id)
    await services.audit.record(actor, "node.remove", node_id)


async def _exists(services: MasterServices, model_id: str) -> bool:
    try:
        await services.models.get(model_id)
    except UnknownModelError:
        return False
    return True
