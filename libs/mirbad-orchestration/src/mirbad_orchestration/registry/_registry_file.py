"""The format of ``models.json``: encoding the stored models and decoding them, fail closed.

The document is ``{"schemaVersion": 1, "models": [...]}`` with one camelCase object per model; a bare
JSON array of models (a hand-written file) reads too. Each model is written with every setting that
is not null, defaults included, so a later change of a default never changes a stored model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from mirbad_orchestration.exceptions import RegistryError
from mirbad_protocol import InvalidFieldError, ModelDefinition

from ._model_rules import check_served_name

__all__ = ["REGISTRY_SCHEMA_VERSION"]

REGISTRY_SCHEMA_VERSION: Final = 1
"""The ``schemaVersion`` this version writes; a file naming another version is refused."""

Prepare = Callable[[ModelDefinition], ModelDefinition]


def encode_registry(models: Sequence[ModelDefinition]) -> dict[str, Any]:
    """Return the JSON document storing ``models`` in order."""
    return {"schemaVersion": REGISTRY_SCHEMA_VERSION, "models": [_stored_form(model) for model in models]}


def decode_registry(path: Path, raw: bytes, prepare: Prepare) -> list[ModelDefinition]:
    """Read the models of a registry file, each passed through ``prepare`` (validation, migration).

    Raises:
        RegistryError: the document is not valid JSON, has an unknown shape or version, or an entry is
            invalid; the message names ``path`` and the entry (``models[3].sources[0].repoId``).
    """
    models: list[ModelDefinition] = []
    for index, entry in enumerate(_entries(path, raw)):
        try:
            if not isinstance(entry, dict):
                raise InvalidFieldError("(document)", "a model must be a JSON object")
            model = prepare(ModelDefinition.from_wire(entry))
            _check_unique_id(models, model)
            check_served_name(models, model)
        except InvalidFieldError as exc:
            raise RegistryError(
                f"invalid model in {path}: {_entry_field(index, exc.field)}: {exc.reason}"
            ) from exc
        models.append(model)
    return models


def _stored_form(definition: ModelDefinition) -> dict[str, Any]:
    data = definition.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {key: value for key, value in data.items() if value not in ([], {})}


def _entries(path: Path, raw: bytes) -> list[object]:
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RegistryError(f"cannot read {path}: not valid JSON ({exc})") from exc
    if isinstance(document, list):
        return document
    if not isinstance(document, dict):
        raise RegistryError(f"cannot read {path}: expected an object with 'models' or an array of models")
    version = document.get("schemaVersion", REGISTRY_SCHEMA_VERSION)
    if version != REGISTRY_SCHEMA_VERSION or isinstance(version, bool):
        supported = f"schemaVersion {version!r} is not supported (expected {REGISTRY_SCHEMA_VERSION})"
        raise RegistryError(f"cannot read {path}: {supported}")
    models = document.get("models")
    if not isinstance(models, list):
        raise RegistryError(f"cannot read {path}: 'models' must be an array")
    return models


def _check_unique_id(models: Sequence[ModelDefinition], model: ModelDefinition) -> None:
    for index, other in enumerate(models):
        if other.id == model.id:
            raise InvalidFieldError("id", f"{model.id!r} repeats the id of models[{index}]")


def _entry_field(index: int, field: str) -> str:
    """Name a field of entry ``index`` as ``models[3].sources[0].repoId``."""
    if field == "(document)":
        return f"models[{index}]"
    if not field[:1].isalpha():
        field = f"extraArgs ({field})"  # an unreadable owned flag names the flag, not its field
    return f"models[{index}]." + re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", field)
