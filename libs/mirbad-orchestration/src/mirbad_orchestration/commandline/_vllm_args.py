"""The ``vllm serve`` command line of a model definition, in one fixed order.

The order and formats are part of the config hash: change them and every running model reads as
restart-pending. JSON arguments are compact with keys sorted at every depth, except that the
compilation config names ``cudagraph_mode`` first.
"""

from __future__ import annotations

import json
import math
from typing import Final

from pydantic import JsonValue

from mirbad_protocol import InvalidFieldError, ModelDefinition

from ._vllm_normalize import normalize_vllm

__all__ = ["build_vllm_args", "format_gpu_memory_utilization"]

DEFAULT_QUIET_ENDPOINTS: Final = "/health,/metrics"
"""Endpoints kept out of vLLM's access log: the health monitor and the metrics poller call them often."""

_BUDGET_FIELD: Final = "memoryBudgetGiB"


def format_gpu_memory_utilization(budget_gib: float, total_gib: float) -> str:
    """Return ``budget_gib / total_gib`` with exactly 4 decimals and a ``.``, whatever the locale.

    Raises:
        InvalidFieldError: (``memoryBudgetGiB``) the total is not positive, or the share is not in (0, 1].
    """
    check_total_gib(total_gib)
    share = budget_gib / total_gib
    text = f"{share:.4f}"
    if not 0 < share <= 1 or float(text) == 0:
        raise InvalidFieldError(
            _BUDGET_FIELD,
            f"{budget_gib} GiB of {total_gib} GiB is a GPU memory utilization of {text}, not in (0, 1]",
        )
    return text


def check_total_gib(total_gib: float) -> None:
    """Refuse a GPU memory total that is not a positive size.

    Raises:
        InvalidFieldError: (``memoryBudgetGiB``) the total is not a positive finite number.
    """
    if not math.isfinite(total_gib) or total_gib <= 0:
        raise InvalidFieldError(
            _BUDGET_FIELD, f"the GPU memory total must be a positive size, not {total_gib}"
        )


def compact_json(value: JsonValue) -> str:
    """Return ``value`` as compact JSON with keys sorted at every depth (one spelling per value)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False, allow_nan=False)


def build_vllm_args(
    definition: ModelDefinition, *, total_gib: float | None = None, utilization: str | None = None
) -> list[str]:
    """Return the arguments of ``vllm serve`` for ``definition`` (normalized first).

    Give exactly one of ``total_gib`` (the node's GPU memory; the utilization is the budget's share
    of it, 4 decimals) or ``utilization`` (the text to emit verbatim, as canonicalization keeps it).

    Raises:
        InvalidFieldError: the utilization is outside (0, 1] or the total is not positive.
        UnreadableFlagError: an owned flag in ``extra_args`` cannot be read.
    """
    if total_gib is not None and utilization is None:
        utilization = format_gpu_memory_utilization(definition.memory_budget_gib, total_gib)
    elif total_gib is None and utilization is not None:
        _check_utilization(utilization)
    else:
        raise TypeError("give exactly one of total_gib and utilization")
    model = normalize_vllm(definition)
    return [*_head(model), "--gpu-memory-utilization", utilization, *_tail(model)]


def _check_utilization(text: str) -> None:
    try:
        share = float(text)
    except ValueError:
        share = math.nan
    if not 0 < share <= 1:
        raise InvalidFieldError(_BUDGET_FIELD, f"a GPU memory utilization of {text!r} is not in (0, 1]")


def _head(model: ModelDefinition) -> list[str]:
    args = ["--model", f"/models/{model.model_path}", "--served-model-name", model.served_name]
    if model.quantization:
        args += ["--quantization", model.quantization]
    args += ["--kv-cache-dtype", model.kv_cache_dtype]
    args += ["--max-model-len", str(model.max_model_len), "--max-num-seqs", str(model.max_num_seqs)]
    if model.max_num_batched_tokens is not None:
        args += ["--max-num-batched-tokens", str(model.max_num_batched_tokens)]
    return args


def _tail(model: ModelDefinition) -> list[str]:
    args: list[str] = []
    if model.tool_call_parser:
        args += ["--enable-auto-tool-choice", "--tool-call-parser", model.tool_call_parser]
    if model.reasoning_parser:
        args += ["--reasoning-parser", model.reasoning_parser]
    args += _switch("enable-prefix-caching", model.enable_prefix_caching)
    # An empty config means "no speculation" here, while vLLM reads `{}` as a draft model without one.
    if model.speculative is not None and not model.speculative.is_empty():
        args += ["--speculative-config", compact_json(model.speculative.as_vllm_object())]
    if model.cudagraph_mode is not None or model.compilation_config:
        args += ["--compilation-config", _compilation_json(model)]
    args += _switch("async-scheduling", model.async_scheduling)
    if model.mamba_cache_mode:
        args += ["--mamba-cache-mode", model.mamba_cache_mode]
    return [*args, "--disable-access-log-for-endpoints", DEFAULT_QUIET_ENDPOINTS, *model.extra_args]


def _switch(name: str, value: bool | None) -> list[str]:
    if value is None:
        return []
    return [f"--{name}" if value else f"--no-{name}"]


def _compilation_json(model: ModelDefinition) -> str:
    body = compact_json(model.compilation_config)
    if model.cudagraph_mode is None:
        return body
    mode = '"cudagraph_mode":' + compact_json(model.cudagraph_mode)
    # The mode leads (as operators read it); the other keys follow in sorted order.
    return "{" + mode + ("," + body[1:] if model.compilation_config else "}")
