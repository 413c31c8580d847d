"""The rules a model definition must meet before the registry stores it."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Final

from mirbad_orchestration.commandline import check_vllm_values
from mirbad_orchestration.exceptions import DuplicateServedNameError
from mirbad_protocol import MODEL_ID_PATTERN, InvalidFieldError, ModelDefinition

from ._tags import normalize_tags

__all__ = ["Normalizer", "check_served_name", "prepare_definition"]

Normalizer = Callable[[ModelDefinition], ModelDefinition]
"""Turns a definition into its canonical effective configuration (``normalize_definition``)."""

_MODEL_ID: Final = re.compile(MODEL_ID_PATTERN)


def prepare_definition(definition: ModelDefinition, normalize: Normalizer) -> ModelDefinition:
    """Return ``definition`` as the registry stores it, or raise naming the bad field.

    Checks the id and the sources, normalizes and de-duplicates the tags, then applies ``normalize``
    (which lifts owned flags out of ``extra_args``). Served-name uniqueness needs the other models:
    see :func:`check_served_name`.

    Raises:
        InvalidFieldError: ``id``, ``tags[i]``, ``sources[i].folder`` or an owned flag
            (:class:`UnreadableFlagError`) is invalid, or a vLLM value the pinned vLLM refuses
            (``kvCacheDtype``, ``mambaCacheMode``, ``compilationConfig``, ``extraArgs``).
    """
    # The id is a pydantic constraint already; model_copy(update=...) skips validation, so check again.
    if not _MODEL_ID.fullmatch(definition.id):
        raise InvalidFieldError("id", f"{definition.id!r} does not match {MODEL_ID_PATTERN}")
    _check_sources(definition)
    tagged = definition.model_copy(update={"tags": normalize_tags(definition.tags)})
    stored = normalize(tagged)
    if stored.runtime == "vllm":
        check_vllm_values(stored)
    return stored


def check_served_name(models: Sequence[ModelDefinition], definition: ModelDefinition) -> None:
    """Refuse ``definition`` when a model with another id serves the same name (case-insensitively).

    Raises:
        DuplicateServedNameError: naming the model that already serves the name.
    """
    wanted = definition.served_name.casefold()
    for model in models:
        if model.id != definition.id and model.served_name.casefold() == wanted:
            raise DuplicateServedNameError(definition.served_name, model.id)


def _check_sources(definition: ModelDefinition) -> None:
    # Folder names are compared case-insensitively: on macOS and Windows two spellings are one folder.
    # With distinct folders at most one source can be the primary checkpoint (folder == model_path).
    seen: dict[str, int] = {}
    for index, source in enumerate(definition.sources):
        key = source.folder.casefold()
        if key in seen:
            raise InvalidFieldError(
                f"sources[{index}].folder", f"{source.folder!r} is already the folder of sources[{seen[key]}]"
            )
        seen[key] = index
