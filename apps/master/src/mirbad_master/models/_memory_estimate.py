"""Admission's use of the llama.cpp memory estimate: a budget below it is refused when the model is saved.

A llama.cpp model's ``memoryBudgetGiB`` is what admission holds free for it on its node; a budget
below what llama-server will take (its weights, its KV cache for ``--ctx-size`` over ``--parallel``
slots, a compute allowance: :func:`~mirbad_orchestration.commandline.estimate_llamacpp_definition_gib`)
admits a model that then takes more than was held and can push its neighbours out of memory. So a
save (the API's POST and PUT, the portal's editor) reads the GGUF header on the model's node and
refuses such a budget, 400 naming ``memoryBudgetGiB`` with the estimate.

The estimate's compute part is an allowance, not a measurement (llama.cpp sizes its buffers at load
time, and they move by tens of MiB either way), so a budget is refused only when it is below the
estimate by more than :data:`ESTIMATE_SLACK_GIB`: the tiny test model's 0.25 GiB beside its estimate
of 0.2515 GiB is what a measurement cannot tell apart, 0.1 GiB is not.

The estimate needs the file: a model saved before its file is downloaded, on a node that does not
answer within :data:`ESTIMATE_WAIT_S`, or whose agent does not read GGUF headers
(:attr:`~mirbad_protocol.agent.FeatureFlag.GGUF_INSPECT`) is saved unchecked, as before, rather than refused
for what cannot be known. The same holds for a header that lacks what the KV cache is sized from.
"""

from __future__ import annotations

import logging
import math
from typing import Final

import anyio

from mirbad_master._composition import MasterServices
from mirbad_orchestration.commandline import estimate_llamacpp_definition_gib
from mirbad_protocol import InvalidFieldError, MirbadError, ModelDefinition
from mirbad_protocol.agent import FeatureFlag, GgufInfo

__all__ = ["BUDGET_FIELD", "ESTIMATE_SLACK_GIB", "ESTIMATE_WAIT_S", "check_memory_estimate", "estimated_gib"]

logger = logging.getLogger(__name__)

BUDGET_FIELD: Final = "memoryBudgetGiB"
"""The field a refusal names."""
ESTIMATE_SLACK_GIB: Final = 1 / 16
"""How far (64 MiB) a budget may be below the estimate: the compute allowance's uncertainty."""
ESTIMATE_WAIT_S: Final = 5.0
"""How long a save waits for the node to read the GGUF header before it saves unchecked."""


def estimated_gib(definition: ModelDefinition, info: GgufInfo) -> float | None:
    """The estimate (GiB) of serving ``definition`` from the file ``info`` describes.

    None where the header cannot size the KV cache (the estimate is then unknown, not zero).
    """
    try:
        return estimate_llamacpp_definition_gib(definition, info)
    except InvalidFieldError as exc:
        logger.debug("no memory estimate for model %s: %s", definition.id, exc)
        return None


async def check_memory_estimate(services: MasterServices, definition: ModelDefinition) -> None:
    """Refuse a llama.cpp ``definition`` whose budget is below llama-server's estimated memory.

    Raises:
        InvalidFieldError: ``memoryBudgetGiB`` is below the estimate (the reason names it, and what
            it is made of).
    """
    if definition.runtime != "llamacpp" or not definition.model_path.lower().endswith(".gguf"):
        return
    info = await _header(services, definition)
    if info is None:
        return
    estimate = estimated_gib(definition, info)
    if estimate is None or definition.memory_budget_gib >= estimate - ESTIMATE_SLACK_GIB:
        return
    shown = math.ceil(estimate * 100) / 100  # rounded up: the budget it names is enough
    slots = definition.max_num_seqs
    raise InvalidFieldError(
        BUDGET_FIELD,
        f"{definition.memory_budget_gib:g} GiB is below llama.cpp's estimate of {shown:g} GiB for "
        f"{definition.model_path} (its weights, the KV cache of {definition.max_model_len} tokens for "
        f"each of {slots} slot{'' if slots == 1 else 's'}, and a compute allowance): give it at least "
        f"{shown:g} GiB, or lower maxModelLen or maxNumSeqs",
    )


async def _header(services: MasterServices, definition: ModelDefinition) -> GgufInfo | None:
    node_id = services.runtime.node_for(definition)
    state = services.cache.node(node_id)
    if state is None or not state.reachable or state.info is None:
        return None
    if FeatureFlag.GGUF_INSPECT.value not in state.info.features:
        return None
    info = None
    try:
        client = await services.client_of(node_id)
        with anyio.move_on_after(ESTIMATE_WAIT_S):
            info = await client.gguf_inspect(definition.model_path)
    except MirbadError as exc:
        # Most often the file is not downloaded yet: the model is saved, and Start says what is missing.
        logger.debug("node %s could not read %s's header: %s", node_id, definition.model_path, exc)
        return None
    return info
