"""Reading a container's ``vllm serve`` command line back into the definition vLLM effectively ran.

The builder writes the typed flags first, then ``--disable-access-log-for-endpoints /health,/metrics``,
then the extra arguments. The reader therefore lifts typed flags only before that marker (the whole
line when it is missing), and only the first occurrence of each: vLLM lets a later occurrence win, and a
later one left among the extra arguments is emitted after the typed flag again, so it still wins. A
first occurrence whose value this reader cannot take (``--max-model-len 32k``) stays among the extra
arguments for the same reason. Owned settings, in any spelling, go through :func:`normalize_vllm`.

A ``--model`` under ``/models/`` becomes the path below it. Any other model (``/data/m``, ``org/repo``)
is read as a path relative to the model root with its leading slashes dropped, so it rebuilds under
``/models``; that folds ``/data/m`` onto ``/models/data/m``, which is harmless for the config hash
because every definition Mirbad launches lives under ``/models``. Flags the line lacks take
vLLM's defaults where Mirbad has a setting for them (served name: the model as written; utilization:
0.9) and the definition's defaults otherwise (``max_model_len``, ``max_num_seqs``, ``kv_cache_dtype``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from mirbad_orchestration.exceptions import UnreadableFlagError
from mirbad_protocol import InvalidFieldError, ModelDefinition

from ._vllm_args import DEFAULT_QUIET_ENDPOINTS, check_total_gib
from ._vllm_flags import read_flag
from ._vllm_normalize import normalize_vllm

__all__ = ["parse_vllm_args"]

DEFAULT_GPU_MEMORY_UTILIZATION: Final = "0.9000"
"""vLLM's own default, written as the builder writes a utilization."""

_MODELS_ROOT: Final = "/models/"
_AUTO_TOOL: Final = "--enable-auto-tool-choice"
_QUIET: Final = "--disable-access-log-for-endpoints"
_TYPED: Final = {
    "--model": "model",
    "--served-model-name": "served_name",
    "--quantization": "quantization",
    "-q": "quantization",
    "--max-model-len": "max_model_len",
    "--gpu-memory-utilization": "utilization",
    "--tool-call-parser": "tool_call_parser",
    "--reasoning-parser": "reasoning_parser",
}
# Wire fields a bad typed value is reported under, mapped back to the flag that carried it.
_FLAG_OF_FIELD: Final = {"modelPath": "--model", "servedName": "--served-model-name"}


def _text(value: str) -> str | None:
    return value if value.strip() else None


def _served_name(value: str) -> str | None:
    return value if re.fullmatch(r"\S{1,200}", value) else None


def _count(value: str) -> int | None:
    return int(value) if re.fullmatch(r"[0-9]+", value) and int(value) > 0 else None


def _utilization(value: str) -> str | None:
    try:
        share = float(value)
    except ValueError:
        return None
    return value if math.isfinite(share) and 0 < share <= 1 else None


_READERS: Final[dict[str, Callable[[str], Any]]] = {
    "model": _text,
    "served_name": _served_name,
    "quantization": _text,
    "max_model_len": _count,
    "utilization": _utilization,
    "tool_call_parser": _text,
    "reasoning_parser": _text,
}


@dataclass
class _Lifted:
    values: dict[str, Any] = field(default_factory=dict)
    taken: dict[str, list[int]] = field(default_factory=dict)

    def take(self, setting: str, value: Any, indexes: list[int]) -> None:
        self.values[setting], self.taken[setting] = value, indexes

    def drop(self, setting: str) -> None:
        self.values.pop(setting, None)
        self.taken.pop(setting, None)

    def indexes(self) -> set[int]:
        return {index for group in self.taken.values() for index in group}


def parse_vllm_args(argv: Sequence[str], *, model_id: str, image: str, total_gib: float) -> ModelDefinition:
    """Read a container's command line back into the normalized definition vLLM effectively ran.

    ``argv`` may start with ``vllm serve`` and name the model positionally. The budget is the
    utilization times ``total_gib``; unknown flags stay in ``extra_args`` in their order. Fields the
    command line cannot tell (tags, sources, placement, auto-start) keep their defaults.

    Raises:
        UnreadableFlagError: the line names no model, or an owned flag cannot be read.
        InvalidFieldError: ``total_gib`` is not positive.
    """
    check_total_gib(total_gib)
    definition, utilization = read_vllm_command(argv, model_id=model_id, image=image)
    return definition.model_copy(update={"memory_budget_gib": float(utilization) * total_gib})


def read_vllm_command(
    argv: Sequence[str], *, model_id: str, image: str = "vllm/vllm-openai:latest"
) -> tuple[ModelDefinition, str]:
    """Read a command line into a normalized definition and its utilization text, kept verbatim.

    The definition's budget is the utilization itself (a total of 1 GiB); callers scale it.
    """
    args = _without_program(argv)
    end = next((i for i, arg in enumerate(args) if _named(arg, _QUIET)), len(args))
    lifted = _lift(args, end)
    taken = lifted.indexes() | _quiet_marker(args, end)
    rest = [arg for i, arg in enumerate(args) if i not in taken]
    values = lifted.values
    if "model" not in values:
        raise UnreadableFlagError("--model", "the command line names no model")
    utilization = values.get("utilization", DEFAULT_GPU_MEMORY_UTILIZATION)
    fields: dict[str, Any] = {
        "id": model_id,
        "image": image,
        "model_path": _model_path(values["model"]),
        "served_name": values.get("served_name", values["model"]),
        "memory_budget_gib": float(utilization),
        "extra_args": rest,
    }
    for setting in ("quantization", "max_model_len", "tool_call_parser", "reasoning_parser"):
        if setting in values:
            fields[setting] = values[setting]
    return normalize_vllm(_definition(fields)), utilization


def _without_program(argv: Sequence[str]) -> list[str]:
    args = list(argv)
    if args and (args[0] == "vllm" or args[0].endswith("/vllm")):
        args = args[1:]
    return args[1:] if args[:1] == ["serve"] else args


def _named(arg: str, name: str) -> bool:
    flag = read_flag(arg)
    return flag is not None and flag.name == name


def _lift(args: list[str], end: int) -> _Lifted:
    """Take the first occurrence of each typed flag before ``end`` whose value this reader can take."""
    lifted = _Lifted()
    seen: set[str] = set()
    auto_tool: list[int] = []
    if args and read_flag(args[0]) is None:
        seen.add("model")
        lifted.take("model", args[0], [0])
    for index in range(end):
        flag = read_flag(args[index])
        if flag is None or index in lifted.indexes():
            continue  # a value, or the positional model
        if flag.name == _AUTO_TOOL and "auto_tool" not in seen:
            seen.add("auto_tool")
            auto_tool = [index] if flag.value is None else []
        setting = _TYPED.get(flag.name)
        if setting is None or setting in seen:
            continue
        seen.add(setting)
        value_at = None if flag.value is not None or index + 1 >= end else index + 1
        text = flag.value if value_at is None else args[value_at]
        if text is None or (value_at is not None and read_flag(text) is not None):
            continue  # no value: left in place, where vLLM meets it too
        value = _READERS[setting](text)
        if value is not None:
            lifted.take(setting, value, [index] if value_at is None else [index, value_at])
    # The builder writes the parser only together with auto tool choice; alone, either stays verbatim.
    if auto_tool and "tool_call_parser" in lifted.values:
        lifted.taken["tool_call_parser"] += auto_tool
    else:
        lifted.drop("tool_call_parser")
    return lifted


def _quiet_marker(args: list[str], end: int) -> set[int]:
    """The indexes of the builder's own quiet-endpoints flag, or none when its value differs."""
    if end >= len(args):
        return set()
    flag = read_flag(args[end])
    if flag is not None and flag.value is not None:
        return {end} if flag.value == DEFAULT_QUIET_ENDPOINTS else set()
    has_default = end + 1 < len(args) and args[end + 1] == DEFAULT_QUIET_ENDPOINTS
    return {end, end + 1} if has_default else set()


def _model_path(model: str) -> str:
    path = model.rstrip("/") + "/"
    # The root itself leaves an empty path, which the definition refuses by name.
    return path.removeprefix(_MODELS_ROOT).strip("/")


def _definition(fields: dict[str, Any]) -> ModelDefinition:
    wire = {ModelDefinition.model_fields[name].alias or name: value for name, value in fields.items()}
    try:
        return ModelDefinition.from_wire(wire)
    except InvalidFieldError as exc:
        flag = _FLAG_OF_FIELD.get(exc.field)
        if flag is None:
            raise
        raise UnreadableFlagError(flag, exc.reason) from None
