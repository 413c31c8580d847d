"""One entry point per command-line operation, dispatching on the definition's runtime."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Final

from mirbad_protocol import (
    ContainerLaunch,
    ExecutableRef,
    GpuSelection,
    ModelDefinition,
    ProcessLaunch,
    RuntimeKind,
)

from ._config_hash import config_hash
from ._llamacpp_args import build_llamacpp_args, normalize_llamacpp, parse_llamacpp_args
from ._mlx_args import build_mlx_args, normalize_mlx, parse_mlx_args
from ._vllm_args import build_vllm_args
from ._vllm_normalize import normalize_vllm
from ._vllm_parse import parse_vllm_args

__all__ = [
    "DEFAULT_TOTAL_GIB",
    "build_args",
    "detect_runtime",
    "launch_spec_for",
    "normalize_definition",
    "parse_args",
]

DEFAULT_TOTAL_GIB: Final = 121.0
"""Memory assumed when no node reports one: the spec's development default (a DGX Spark's memory)."""

_DEFAULT_VLLM_IMAGE: Final = ModelDefinition.model_fields["image"].default


def normalize_definition(definition: ModelDefinition) -> ModelDefinition:
    """Return the canonical effective configuration of ``definition`` for its runtime.

    Owned flags found in ``extra_args`` are lifted into their typed fields with the runtime's own
    precedence; the result is a fixed point (normalizing it again changes nothing).
    """
    if definition.runtime == "vllm":
        return normalize_vllm(definition)
    if definition.runtime == "llamacpp":
        return normalize_llamacpp(definition)
    return normalize_mlx(definition)


def build_args(definition: ModelDefinition, *, total_gib: float = DEFAULT_TOTAL_GIB) -> list[str]:
    """Return the argv ``definition`` launches with (vLLM: the arguments of ``vllm serve``).

    ``total_gib`` is the node's memory; only vLLM uses it (``--gpu-memory-utilization``).
    """
    if definition.runtime == "vllm":
        return build_vllm_args(definition, total_gib=total_gib)
    if definition.runtime == "llamacpp":
        return build_llamacpp_args(definition)
    return build_mlx_args(definition)


def detect_runtime(argv: Sequence[str]) -> RuntimeKind:
    """Guess the runtime of an argv from its program name; vLLM when it starts with a flag."""
    program = PurePosixPath(argv[0].replace("\\", "/")).name.lower() if argv else ""
    if "llama-server" in program or "llama_server" in program:
        return "llamacpp"
    if program.startswith("mlx"):
        return "mlx"
    return "vllm"


def parse_args(
    argv: Sequence[str],
    *,
    runtime: RuntimeKind = "vllm",
    model_id: str | None = None,
    image: str | None = None,
    executable: ExecutableRef | None = None,
    total_gib: float = DEFAULT_TOTAL_GIB,
) -> ModelDefinition:
    """Read an argv back into the (normalized) definition it describes.

    Without ``model_id`` the id is derived from the served name. A leading program name
    (``vllm serve``, ``llama-server``, ``mlx_lm.server``) is tolerated.
    """
    placeholder = "parsed"
    if runtime == "vllm":
        parsed = parse_vllm_args(
            argv, model_id=model_id or placeholder, image=image or _DEFAULT_VLLM_IMAGE, total_gib=total_gib
        )
    else:
        exe = executable or ExecutableRef(
            name="llama-server" if runtime == "llamacpp" else "mlx-lm", version="unknown"
        )
        parse = parse_llamacpp_args if runtime == "llamacpp" else parse_mlx_args
        parsed = parse(argv, model_id=model_id or placeholder, executable=exe)
    if model_id is None:
        parsed = parsed.model_copy(update={"id": _id_from_name(parsed.served_name)})
    return parsed


def _id_from_name(name: str) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:40].rstrip("-")
    return slug or "parsed"


def launch_spec_for(
    definition: ModelDefinition, *, total_gib: float = DEFAULT_TOTAL_GIB, labels: dict[str, str] | None = None
) -> ContainerLaunch | ProcessLaunch:
    """Return the launch spec an agent needs to run ``definition``, with its config hash.

    The hash covers what identifies the execution: the image (or logical executable and version) and the
    canonical argv, so an unchanged definition keeps its hash across saves and restarts.
    """
    argv = build_args(definition, total_gib=total_gib)
    placement = definition.placement
    common: dict[str, object] = {
        "model_id": definition.id,
        "served_name": definition.served_name,
        "runtime": definition.runtime,
        "argv": argv,
        "model_path": definition.model_path,
        "budget_gib": definition.memory_budget_gib,
        "gpus": GpuSelection(mode="uuids", uuids=placement.gpu_uuids)
        if placement and placement.gpu_uuids
        else GpuSelection(),
        "labels": dict(labels or {}),
    }
    if definition.runtime == "vllm":
        image = definition.image
        return ContainerLaunch.model_validate(
            {**common, "image": image, "config_hash": config_hash(image, argv)}
        )
    assert definition.executable is not None  # guaranteed by ModelDefinition's own validation
    identity = f"{definition.executable.name}@{definition.executable.version}"
    return ProcessLaunch.model_validate(
        {**common, "executable": definition.executable, "config_hash": config_hash(identity, argv)}
    )
