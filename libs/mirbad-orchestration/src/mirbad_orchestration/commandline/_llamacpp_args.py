"""llama-server's command line: built from a definition, read back into one, and normalized.

The argv carries only the model's own settings, in this order::

    --model {modelPath} --alias {servedName} --ctx-size {maxModelLen * maxNumSeqs}
    --parallel {maxNumSeqs} [--batch-size {maxNumBatchedTokens}]
    [--cache-type-k {kvCacheDtype} --cache-type-v {kvCacheDtype}] [--n-gpu-layers {gpuLayers}]
    --metrics [--cache-ram {a quarter of memoryBudgetGiB, in MiB}] {extraArgs...}

The agent adds the plumbing it owns (``--host``, ``--port``, the per-instance key in ``LLAMA_API_KEY``)
and starts the process in the node's model root, so ``--model`` is the relative ``modelPath``.

llama-server treats ``--ctx-size`` as the total of all slots: with an explicit ``--parallel N`` (and no
``--kv-unified``) each slot gets ``ctx-size / N`` tokens, so ``maxModelLen * maxNumSeqs`` gives every
one of the ``maxNumSeqs`` slots ``maxModelLen`` tokens.

``--cache-ram`` caps llama-server's prompt cache by the budget (see
:func:`~mirbad_orchestration.commandline.llamacpp_cache_ram_mib`); a ``--cache-ram`` in ``extraArgs``
replaces it, and the parser drops the builder's own (the budget is not on the command line).

Settings Mirbad owns live only in typed fields once normalized. ``extraArgs`` come last on the command
line and llama-server keeps the last value of a repeated flag, so an owned flag found there (in any
spelling: short, long, ``--flag=value``, one ``"--flag value"`` element, ``_`` for ``-``) replaces the
typed value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from pydantic import ValidationError

from mirbad_orchestration.exceptions import UnreadableFlagError
from mirbad_protocol import ExecutableRef, InvalidFieldError, ModelDefinition, field_error_from_validation

from ._llamacpp_flags import (
    CACHE_RAM,
    INT32_MAX,
    LLAMACPP_CACHE_TYPES,
    LLAMACPP_MAX_SLOTS,
    METRICS,
    EffectiveSettings,
    llamacpp_cache_ram_mib,
    scan_flags,
    sets_cache_ram,
)

__all__ = ["build_llamacpp_args", "llamacpp_ctx_size", "normalize_llamacpp", "parse_llamacpp_args"]

_DEFAULT_BUDGET_GIB: Final[float] = ModelDefinition.model_fields["memory_budget_gib"].default


def _check_runtime(definition: ModelDefinition) -> None:
    if definition.runtime != "llamacpp":
        raise InvalidFieldError("runtime", f"{definition.runtime!r} is not a llama.cpp model")
    # The typed cache type comes before extraArgs, and llama-server stops at the first bad value.
    if definition.kv_cache_dtype != "auto" and definition.kv_cache_dtype not in LLAMACPP_CACHE_TYPES:
        allowed = ", ".join(("auto", *LLAMACPP_CACHE_TYPES))
        raise InvalidFieldError("kvCacheDtype", f"{definition.kv_cache_dtype!r} is not one of {allowed}")


def _check_definition(definition: ModelDefinition) -> None:
    _check_runtime(definition)
    if "," in definition.served_name:
        raise InvalidFieldError("servedName", "llama-server splits --alias at commas; use one name")
    if definition.max_num_seqs > LLAMACPP_MAX_SLOTS:
        raise InvalidFieldError("maxNumSeqs", f"llama.cpp serves at most {LLAMACPP_MAX_SLOTS} slots")
    if llamacpp_ctx_size(definition) > INT32_MAX:
        raise InvalidFieldError("maxModelLen", "maxModelLen x maxNumSeqs is larger than llama.cpp reads")


def validated_definition(fields: dict[str, Any]) -> ModelDefinition:
    """Validate a definition given by Python field names, naming a bad field by its wire name.

    Raises:
        InvalidFieldError: the first field the definition refuses.
    """
    known = ModelDefinition.model_fields
    wire = {(known[name].alias or name) if name in known else name: value for name, value in fields.items()}
    try:
        return ModelDefinition.model_validate(wire)
    except ValidationError as exc:
        raise field_error_from_validation(exc) from None


def _replace(definition: ModelDefinition, **changes: Any) -> ModelDefinition:
    return validated_definition({**definition.model_dump(), **changes})


def llamacpp_ctx_size(definition: ModelDefinition) -> int:
    """The ``--ctx-size`` the builder writes: ``maxModelLen`` tokens for each of ``maxNumSeqs`` slots."""
    return definition.max_model_len * definition.max_num_seqs


def normalize_llamacpp(definition: ModelDefinition) -> ModelDefinition:
    """Lift the owned flags of ``extraArgs`` into their typed fields, as llama-server would read them.

    The result is a fixed point: normalizing it again returns an equal definition.

    Raises:
        InvalidFieldError: a plumbing or identity flag in ``extraArgs``, or a typed value llama.cpp
            cannot take (``field`` names it).
        UnreadableFlagError: an owned flag in ``extraArgs`` whose value cannot be read.
    """
    _check_runtime(definition)
    scan = scan_flags(definition.extra_args, command_line=False)
    typed_cache = None if definition.kv_cache_dtype == "auto" else definition.kv_cache_dtype
    state = EffectiveSettings(
        ctx_size=llamacpp_ctx_size(definition),
        parallel=definition.max_num_seqs,
        batch=definition.max_num_batched_tokens,
        cache_k=typed_cache,
        cache_v=typed_cache,
        gpu_layers=definition.gpu_layers,
    )
    for flag, value, written in scan.owned:
        state.apply(flag, value, written)
    normalized = _replace(
        definition,
        max_model_len=state.per_slot_context(),
        max_num_seqs=state.parallel,
        max_num_batched_tokens=state.batch,
        kv_cache_dtype=state.kv_cache_dtype(),
        gpu_layers=state.gpu_layers,
        extra_args=scan.rest,
    )
    _check_definition(normalized)
    return normalized


def build_llamacpp_args(definition: ModelDefinition) -> list[str]:
    """Return llama-server's arguments for ``definition`` (normalized first), without the plumbing.

    Raises:
        InvalidFieldError: as :func:`normalize_llamacpp`.
    """
    model = normalize_llamacpp(definition)
    argv = ["--model", model.model_path, "--alias", model.served_name]
    argv += ["--ctx-size", str(llamacpp_ctx_size(model)), "--parallel", str(model.max_num_seqs)]
    if model.max_num_batched_tokens is not None:
        argv += ["--batch-size", str(model.max_num_batched_tokens)]
    if model.kv_cache_dtype != "auto":
        argv += ["--cache-type-k", model.kv_cache_dtype, "--cache-type-v", model.kv_cache_dtype]
    if model.gpu_layers is not None:
        argv += ["--n-gpu-layers", str(model.gpu_layers)]
    return [*argv, METRICS, *_cache_cap(model), *model.extra_args]


def _cache_cap(model: ModelDefinition) -> list[str]:
    # Right after --metrics, so the parser finds (and drops) exactly the builder's own.
    if sets_cache_ram(model.extra_args):
        return []
    return [CACHE_RAM, str(llamacpp_cache_ram_mib(model.memory_budget_gib))]


def parse_llamacpp_args(argv: Sequence[str], *, model_id: str, executable: ExecutableRef) -> ModelDefinition:
    """Read a llama-server command line back into a normalized definition.

    The agent's plumbing (``--host``, ``--port``, ``--api-key``, ``--api-key-file``) and ``--metrics``
    are dropped; flags Mirbad does not own land in ``extraArgs``. A command line without ``--alias``
    serves under ``model_id``; owned settings it does not give take the definition's defaults.

    Raises:
        UnreadableFlagError: no ``--model``, or an owned flag whose value cannot be read.
        InvalidFieldError: a value the definition refuses (an absolute model path ...).
    """
    # A leading program name (llama-server takes no positional argument) is not part of the settings.
    flags = argv[1:] if argv and not argv[0].startswith("-") else argv
    scan = scan_flags(flags, command_line=True)
    if "modelPath" not in scan.identity:
        raise UnreadableFlagError("--model", "the command line names no model file")
    owned = [element for _, value, written in scan.owned for element in (written, value)]
    rest = _without_builder_cache_cap(scan.rest)
    base = validated_definition(
        {
            "id": model_id,
            "served_name": scan.identity.get("servedName", model_id),
            "runtime": "llamacpp",
            "executable": executable,
            "model_path": scan.identity["modelPath"],
            "extra_args": owned + rest,
        }
    )
    return normalize_llamacpp(base)


def _without_builder_cache_cap(rest: list[str]) -> list[str]:
    # The builder writes its cap first after --metrics; one that equals the cap of the parsed
    # definition's budget (the default: the command line has none) is the builder's, not a setting.
    derived = [CACHE_RAM, str(llamacpp_cache_ram_mib(_DEFAULT_BUDGET_GIB))]
    return rest[2:] if rest[:2] == derived else rest
