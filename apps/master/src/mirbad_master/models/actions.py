"""Every change to the models, whoever asks: the admin API, the portal, a job.

The steps of a change (stop before delete, refresh what derives from the registry after each registry
change), the lock that makes an id check and its write one step, and the audit line are the same
whichever caller asks; the callers differ only in the actor the audit line names. Input is validated at
the edges (the API's bodies and the portal's forms, both with ``from_user_input``), except the rules on
what the registry would store (:func:`check_lifted_flags`), which are held here so no caller can skip
them. The refusals are the libraries' exceptions and :mod:`mirbad_master.exceptions`; ``_api_errors``
maps each to a status.
"""

from __future__ import annotations

from mirbad_master._composition import MasterServices
from mirbad_master._llama_server_build import refuse_llamacpp_start
from mirbad_master.exceptions import ModelExistsError
from mirbad_orchestration import UnknownModelError, normalize_definition
from mirbad_protocol import ModelDefinition, ModelStatus

from ._gpu_placement import check_gpu_placement
from ._memory_estimate import check_memory_estimate

__all__ = [
    "check_lifted_flags",
    "create_model",
    "delete_model",
    "restart_model",
    "start_model",
    "stop_model",
    "update_model",
    "user_definition",
]


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
        UnknownGpuError: the placement names a GPU its node does not report.
        RegistryError: the registry cannot be written.
    """
    check_lifted_flags(definition)
    check_gpu_placement(services, definition)
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
        UnknownGpuError: the placement names a GPU its node does not report.
        RegistryError: the registry cannot be written.
    """
    check_lifted_flags(definition)
    check_gpu_placement(services, definition)
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


async def _exists(services: MasterServices, model_id: str) -> bool:
    try:
        await services.models.get(model_id)
    except UnknownModelError:
        return False
    return True
