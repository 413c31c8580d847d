"""The canonical effective configuration of a vLLM model.

The settings Mirbad owns live only in typed fields. When one of them also appears in ``extra_args``
(which the builder emits after the typed fields), the normalizer computes what vLLM would run:

* a scalar or switch written later replaces the typed value (the last one wins);
* a whole JSON config replaces the whole earlier config, typed one included (the last one wins);
* when any dotted key of a config is present (``-cc.cudagraph_mode=FULL``), vLLM builds that config
  from the dotted keys alone (the last one wins per key) and discards every whole JSON object for it,
  wherever it stood. vLLM gathers dotted keys per spelling and appends one object per spelling after
  all other arguments, so with both ``-cc.x`` and ``--compilation-config.y`` present, the spelling
  whose first dotted key comes last provides the whole config;
* every key of a JSON config is kept; ``cudagraph_mode`` moves out of a compilation object into the
  typed field, so a compilation object without it leaves no CUDA graph mode behind.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import JsonValue

from mirbad_orchestration.exceptions import UnreadableFlagError
from mirbad_protocol import InvalidFieldError, ModelDefinition, SpeculativeDecoding

from ._vllm_flags import OwnedDotted, OwnedObject, OwnedScalar, OwnedSwitch, split_owned

__all__ = ["normalize_vllm"]

_SCALAR_FIELDS: Final = (
    "kv_cache_dtype",
    "max_num_seqs",
    "max_num_batched_tokens",
    "mamba_cache_mode",
    "enable_prefix_caching",
    "async_scheduling",
)
_TYPED_SPECULATIVE_KEYS: Final = frozenset({"method", "model", "num_speculative_tokens"})


@dataclass
class _Config:
    """Tracks what vLLM ends up with for one JSON config, and which flag wrote each top-level key."""

    full: dict[str, JsonValue] | None
    full_flag: str
    groups: dict[str, dict[str, JsonValue]] = field(default_factory=dict)
    sources: dict[str, dict[str, str]] = field(default_factory=dict)

    def replace(self, flag: str, value: dict[str, JsonValue]) -> None:
        self.full, self.full_flag = value, flag

    def set_key(self, dotted: OwnedDotted) -> None:
        *parents, last = dotted.path
        nested: dict[str, JsonValue] = {last: copy.deepcopy(dotted.value)}
        for key in reversed(parents):
            nested = {key: nested}
        _merge(self.groups.setdefault(dotted.group, {}), nested)
        self.sources.setdefault(dotted.group, {})[dotted.path[0]] = dotted.flag

    def result(self) -> tuple[dict[str, JsonValue] | None, dict[str, str], str]:
        """The effective object, the flag behind each of its keys, and the flag behind the rest."""
        if self.groups:
            last = list(self.groups)[-1]
            return self.groups[last], self.sources[last], self.full_flag
        return self.full, {}, self.full_flag


def _merge(original: dict[str, JsonValue], update: dict[str, JsonValue]) -> None:
    """Merge like vLLM's dotted keys: objects merge key by key, lists append, anything else replaces."""
    for key, value in update.items():
        old = original.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            _merge(old, value)
        elif isinstance(value, list) and isinstance(old, list):
            old.extend(value)
        else:
            original[key] = value


def normalize_vllm(definition: ModelDefinition) -> ModelDefinition:
    """Return the canonical effective configuration of a vLLM definition.

    Owned settings found in ``extra_args`` in any spelling vLLM accepts move into their typed fields
    with vLLM's precedence (see the module documentation); every other argument stays in
    ``extra_args``, verbatim and in order. Normalizing a normalized definition returns it unchanged.

    Raises:
        UnreadableFlagError: an owned flag whose value is missing or cannot be read, named as written.
        InvalidFieldError: the definition is not a vLLM one.
    """
    if definition.runtime != "vllm":
        raise InvalidFieldError("runtime", f"a {definition.runtime} model has no vLLM command line")
    owned, others = split_owned(definition.extra_args)
    scalars: dict[str, Any] = {name: getattr(definition, name) for name in _SCALAR_FIELDS}
    speculative = _Config(_typed_speculative(definition), "speculative")
    compilation = _Config(_typed_compilation(definition), "compilationConfig")
    for flag in owned:
        if isinstance(flag, OwnedScalar | OwnedSwitch):
            scalars[flag.setting] = flag.value
        else:
            config = speculative if flag.config == "speculative" else compilation
            if isinstance(flag, OwnedObject):
                config.replace(flag.flag, flag.value)
            else:
                config.set_key(flag)
    cudagraph_mode, compilation_config = _split_compilation(*compilation.result())
    update = {
        **scalars,
        "mamba_cache_mode": scalars["mamba_cache_mode"] or None,
        "speculative": _speculative_from(*speculative.result()),
        "cudagraph_mode": cudagraph_mode,
        "compilation_config": compilation_config,
        "extra_args": others,
    }
    return definition.model_copy(update=update)


def _typed_speculative(definition: ModelDefinition) -> dict[str, JsonValue] | None:
    return definition.speculative.as_vllm_object() if definition.speculative is not None else None


def _typed_compilation(definition: ModelDefinition) -> dict[str, JsonValue] | None:
    """The compilation object the typed fields stand for; a key of the dict wins over the typed mode."""
    mode = {"cudagraph_mode": definition.cudagraph_mode} if definition.cudagraph_mode else {}
    merged: dict[str, JsonValue] = {**mode, **definition.compilation_config}
    return merged or None


def _speculative_from(
    value: dict[str, JsonValue] | None, sources: dict[str, str], fallback: str
) -> SpeculativeDecoding | None:
    if value is None:
        return None
    depth = value.get("num_speculative_tokens")
    if depth is not None and (type(depth) is not int or depth < 0):
        flag = sources.get("num_speculative_tokens", fallback)
        raise UnreadableFlagError(
            flag, f"num_speculative_tokens must be a non-negative integer, not {depth!r}"
        )
    result = SpeculativeDecoding(
        method=_optional_text(value, "method", sources, fallback),
        model=_optional_text(value, "model", sources, fallback),
        num_speculative_tokens=depth,
        extra={key: item for key, item in value.items() if key not in _TYPED_SPECULATIVE_KEYS},
    )
    return None if result.is_empty() else result


def _optional_text(
    value: dict[str, JsonValue], key: str, sources: dict[str, str], fallback: str
) -> str | None:
    text = value.get(key)
    if text is not None and not isinstance(text, str):
        raise UnreadableFlagError(sources.get(key, fallback), f"{key} must be a string, not {text!r}")
    return text or None


def _split_compilation(
    value: dict[str, JsonValue] | None, sources: dict[str, str], fallback: str
) -> tuple[str | None, dict[str, JsonValue]]:
    if value is None:
        return None, {}
    rest = dict(value)
    mode = _optional_text(rest, "cudagraph_mode", sources, fallback)
    rest.pop("cudagraph_mode", None)
    return mode, rest
