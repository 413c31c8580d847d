"""The model editor's logic without a browser: form values -> definition, a message per field, preview.

The editor keeps its values under their wire names (``servedName``, ``memoryBudgetGiB`` ...), so a
message from pydantic, from the registry's rules or from the command-line normalizer lands on the
input of the field it names. Every problem found is reported at once, one message per field, and the
preview shows the exact command line the model would launch with while the form is valid.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import ValidationError

from mirbad_orchestration import DuplicateServedNameError, build_args, normalize_definition
from mirbad_orchestration.commandline import DEFAULT_TOTAL_GIB
from mirbad_orchestration.registry import check_served_name, prepare_definition
from mirbad_protocol import InvalidFieldError, ModelDefinition

from .actions import user_definition

__all__ = [
    "FORM_FIELDS",
    "PROGRAMS",
    "FormCheck",
    "check_form",
    "command_line",
    "definition_from_form",
    "form_from_definition",
]

FORM_FIELDS: Final = (
    "id",
    "servedName",
    "runtime",
    "image",
    "executable",
    "modelPath",
    "maxModelLen",
    "maxNumSeqs",
    "memoryBudgetGiB",
    "kvCacheDtype",
    "gpuLayers",
    "idleUnloadSeconds",
    "extraArgs",
    "tags",
    "nodeId",
    "gpuUuids",
    "autoStart",
    "autoStartOnRequest",
)
"""The editor's inputs, by wire name (``executable`` is ``name@version``, ``extraArgs`` one line,
``nodeId`` and ``gpuUuids`` the placement's)."""

PROGRAMS: Final = {"vllm": "vllm serve", "llamacpp": "llama-server", "mlx": "mlx_lm.server"}
"""What each runtime's arguments follow in the preview."""

_OPTIONAL_TEXT: Final = ("image", "kvCacheDtype")
_NUMBERS: Final = ("maxModelLen", "maxNumSeqs", "memoryBudgetGiB", "gpuLayers", "idleUnloadSeconds")
_WHOLE_MODEL: Final = re.compile(r"([A-Za-z][\w.]*): (.+)", re.DOTALL)
# Patterns say little to a person: these inputs explain their rule instead.
_RULES: Final = {
    "id": "use 1 to 40 lowercase letters, digits and dashes, starting with a letter or digit",
    "servedName": "must be 1 to 200 characters without spaces",
}
_RULE_ERRORS: Final = frozenset({"string_pattern_mismatch", "string_too_short", "string_too_long"})


@dataclass(frozen=True)
class FormCheck:
    """What the editor shows for the current values.

    Attributes:
        definition: the definition as the registry would store it; None while a field is invalid.
        errors: one message per invalid input, by the input's wire name.
        command: the command line the definition launches with; None while the form is invalid.
    """

    definition: ModelDefinition | None
    errors: dict[str, str] = field(default_factory=dict)
    command: str | None = None


def form_from_definition(definition: ModelDefinition) -> dict[str, Any]:
    """The editor's values for a saved definition."""
    wire = definition.model_dump(mode="json", by_alias=True)
    values: dict[str, Any] = {name: wire.get(name) for name in FORM_FIELDS if name in wire}
    exe = definition.executable
    values["executable"] = f"{exe.name}@{exe.version}" if exe is not None else ""
    values["extraArgs"] = shlex.join(definition.extra_args)
    values["nodeId"] = definition.placement.node_id if definition.placement else ""
    values["gpuUuids"] = list(definition.placement.gpu_uuids) if definition.placement else []
    return values


def definition_from_form(
    values: Mapping[str, Any], *, base: ModelDefinition | None = None
) -> tuple[ModelDefinition | None, dict[str, str]]:
    """Validate the form's values into a definition, or say what is wrong with each input.

    Args:
        values: the inputs by wire name (see :data:`FORM_FIELDS`); missing ones take their defaults.
        base: the saved definition being edited: settings the editor has no input for are kept.
    """
    errors: dict[str, str] = {}
    data: dict[str, Any] = base.model_dump(mode="json", by_alias=True, exclude_none=True) if base else {}
    for name in ("id", "servedName", "runtime", "modelPath", "autoStart", "autoStartOnRequest"):
        if name in values:
            data[name] = _text(values[name]) if isinstance(values[name], str) else values[name]
    for name in (*_OPTIONAL_TEXT, *_NUMBERS):
        _put_optional(data, name, values.get(name))
    _put_executable(data, values, errors)
    _put_extra_args(data, values, errors)
    data["tags"] = _tags(values.get("tags"))
    node = _text(values.get("nodeId"))
    gpus = _gpus(values, base)
    if gpus and not node:
        errors["gpuUuids"] = "GPUs belong to one node: choose the node first"
    data["placement"] = {"nodeId": node, **({"gpuUuids": gpus} if gpus else {})} if node else None
    if data.get("runtime", "vllm") != "vllm":
        data.pop("image", None)
    try:
        ModelDefinition.model_validate(data)  # every input's own message at once
        # Then exactly the API's user-input rules (limits, lifted flags), so a save can be refused
        # in the portal only for what the API would refuse too.
        definition = user_definition(data)
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            name, message = _field_message(error)
            errors.setdefault(name, message)
        return None, errors
    except InvalidFieldError as exc:
        # A flag given in extraArgs is reported on that input, naming the flag.
        flag = exc.field.startswith("-")
        errors.setdefault("extraArgs" if flag else exc.field, str(exc) if flag else exc.reason)
        return None, errors
    return (None, errors) if errors else (definition, errors)


def check_form(
    values: Mapping[str, Any],
    others: Sequence[ModelDefinition],
    *,
    base: ModelDefinition | None = None,
    total_gib: float = DEFAULT_TOTAL_GIB,
) -> FormCheck:
    """Everything the editor shows: the stored form of the definition, the messages, the preview.

    Args:
        values: the inputs by wire name.
        others: the registry's models, for the id and served-name checks (the edited one included).
        base: the saved definition being edited; None creates a new model, whose id must be free.
        total_gib: the target node's memory, which vLLM's utilization argument is derived from.
    """
    definition, errors = definition_from_form(values, base=base)
    if definition is None:
        return FormCheck(None, errors)
    if base is None and any(model.id == definition.id for model in others):
        return FormCheck(None, {"id": f"a model with id {definition.id!r} exists already"})
    try:
        stored = prepare_definition(definition, normalize_definition)
        check_served_name(others, stored)
        command = command_line(stored, total_gib=total_gib)
    except DuplicateServedNameError as exc:
        return FormCheck(None, {"servedName": exc.reason})
    except InvalidFieldError as exc:
        # Also what only the node's memory can refuse: a vLLM budget larger than the node.
        return FormCheck(None, {_input_of(exc.field): _flag_message(exc)})
    return FormCheck(stored, {}, command)


def command_line(definition: ModelDefinition, *, total_gib: float = DEFAULT_TOTAL_GIB) -> str:
    """The exact command line of ``definition``: the runtime's program and the argv sent to the node."""
    argv = build_args(definition, total_gib=total_gib)
    return f"{PROGRAMS[definition.runtime]} {shlex.join(argv)}"


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else "" if value is None else str(value)


def _put_optional(data: dict[str, Any], name: str, value: Any) -> None:
    if value is None or (isinstance(value, str) and not value.strip()):
        data.pop(name, None)
    else:
        data[name] = value.strip() if isinstance(value, str) else value


def _put_executable(data: dict[str, Any], values: Mapping[str, Any], errors: dict[str, str]) -> None:
    text = _text(values.get("executable"))
    if not text:
        data.pop("executable", None)
        return
    name, sep, version = text.partition("@")
    if not sep or not name or not version:
        errors["executable"] = "write it as NAME@VERSION (llama-server@b6000)"
        data.pop("executable", None)
        return
    data["executable"] = {"name": name, "version": version}


def _put_extra_args(data: dict[str, Any], values: Mapping[str, Any], errors: dict[str, str]) -> None:
    raw = values.get("extraArgs")
    if isinstance(raw, list):
        data["extraArgs"] = [str(item) for item in raw]
        return
    try:
        data["extraArgs"] = shlex.split(_text(raw))
    except ValueError as exc:
        errors["extraArgs"] = f"cannot split into arguments: {exc}"
        data["extraArgs"] = []


def _tags(value: Any) -> list[str]:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return [str(item) for item in value or []]


def _gpus(values: Mapping[str, Any], base: ModelDefinition | None) -> list[str]:
    """The chosen GPUs; a caller without the GPU input keeps the saved ones."""
    if "gpuUuids" in values:
        return [str(uuid) for uuid in values.get("gpuUuids") or []]
    placement = base.placement if base is not None else None
    return list(placement.gpu_uuids) if placement else []


def _field_message(error: Any) -> tuple[str, str]:
    location = [str(part) for part in error.get("loc", ())]
    message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    if not location:
        named = _WHOLE_MODEL.fullmatch(message)
        location, message = ([named.group(1)], named.group(2)) if named else (["id"], message)
    name = _input_of(".".join(location))
    if name in _RULES and error.get("type") in _RULE_ERRORS:
        return name, _RULES[name]
    return name, message[:1].lower() + message[1:]


def _input_of(path: str) -> str:
    """The editor input a wire path belongs to (``executable.name`` -> ``executable``)."""
    head = re.split(r"[.\[]", path, maxsplit=1)[0]
    if path.startswith("placement.gpuUuids"):
        return "gpuUuids"
    if head == "placement":
        return "nodeId"
    if path.startswith("-"):
        return "extraArgs"  # an owned flag found in the extra arguments (UnreadableFlagError)
    # A setting the editor has no input for (a vLLM-only one on another runtime) belongs to the runtime.
    return head if head in FORM_FIELDS else "runtime"


def _flag_message(exc: InvalidFieldError) -> str:
    return f"{exc.field}: {exc.reason}" if exc.field.startswith("-") else exc.reason
