"""What a running instance runs, read back from the command line its node reports.

An agent reports each instance's argv (a container's command, a native process's command line
without the executable). Read back with the runtime's parser, it gives the settings the instance runs,
whoever launched it: this master, an earlier one, or nobody (an adopted instance). Its config hash is
recomputed from it, so restart-pending and the Apply dialog's "old -> new" list do not depend on the
master's memory of its own launches.

The command line does not carry the image (or the executable's version), the placement or the
bookkeeping settings (tags, sources, automatic starts, idle unload). The image is recognised through
the instance's label: a launch's label is the hash of its image and the very argv it runs, so the
candidate image whose hash with the reported argv equals the label is the one it runs. When no
candidate matches, the instance runs an image the master cannot name, which is said so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from mirbad_protocol import MirbadError, ModelDefinition, ModelStatus

from ._commandline import DEFAULT_TOTAL_GIB, launch_spec_for, parse_args
from ._config_hash import canonicalize_vllm_args, config_hash
from ._llamacpp_flags import CACHE_RAM, llamacpp_cache_ram_mib

__all__ = ["RunningConfig", "launched_argv", "read_running_config"]

# What the command line carries, in the definition's field names; every other field is taken from
# the definition the instance's label points at (or the saved one).
_COMMAND_LINE: Final = (
    "served_name",
    "model_path",
    "quantization",
    "kv_cache_dtype",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "memory_budget_gib",
    "tool_call_parser",
    "reasoning_parser",
    "enable_prefix_caching",
    "speculative",
    "compilation_config",
    "cudagraph_mode",
    "async_scheduling",
    "mamba_cache_mode",
    "gpu_layers",
    "extra_args",
)
# The process driver appends its own plumbing to the launch's argv (see mirbad_runtime's process_argv).
_PLUMBING: Final = ("--host", "--port")


@dataclass(frozen=True)
class RunningConfig:
    """The configuration an instance runs, as far as its command line tells.

    Attributes:
        definition: the settings it runs: the command line's, the rest from the definition its label
            points at; ``None`` when the command line cannot be read.
        config_hash: the hash of its image (or executable) and canonical argv, comparable with the
            saved definition's launch hash; ``None`` when the command line cannot be read or its image
            is not one the master knows.
        problem: why its settings cannot be told in full (an unreadable command line, an unknown
            image); ``None`` when they can.
    """

    definition: ModelDefinition | None
    config_hash: str | None
    problem: str | None = None


def launched_argv(definition: ModelDefinition, argv: Sequence[str]) -> list[str]:
    """The launch's own argv in what a node reports: a native process's plumbing flags removed."""
    if definition.runtime == "vllm":
        return list(argv)
    if len(argv) >= 4 and (argv[-4], argv[-2]) == _PLUMBING:
        return list(argv[:-4])
    return list(argv)


def read_running_config(
    definition: ModelDefinition,
    status: ModelStatus,
    *,
    launched: ModelDefinition | None = None,
    total_gib: float = DEFAULT_TOTAL_GIB,
) -> RunningConfig | None:
    """Read what ``status``'s instance runs from its reported argv; ``None`` when none is reported.

    Args:
        definition: the model's saved definition.
        status: the instance's status with its ``argv`` and label (``config_hash``).
        launched: the definition this master launched it with, when it remembers one: a second
            candidate for the image and the settings the command line does not carry.
        total_gib: the node's memory, which vLLM's utilization argument is read against.
    """
    if status.argv is None:
        return None
    argv = launched_argv(definition, status.argv)
    candidates = [definition] if launched is None else [launched, definition]
    base = next((c for c in candidates if _matches_label(c, argv, status.config_hash)), None)
    try:
        parsed = parse_args(
            argv,
            runtime=definition.runtime,
            model_id=definition.id,
            image=(base or definition).image,
            executable=(base or definition).executable,
            total_gib=total_gib,
        )
        read_back = {name: getattr(parsed, name) for name in _COMMAND_LINE}
        if definition.runtime == "llamacpp":
            read_back.update(_llamacpp_budget(parsed, status.budget_gib))
        running = (base or definition).model_copy(update=read_back)
        if base is None:
            what = "image" if definition.runtime == "vllm" else "executable version"
            return RunningConfig(running, None, f"the instance runs another {what} than the saved one")
        return RunningConfig(running, _hash(running, argv, total_gib))
    except (MirbadError, ValueError) as error:
        return RunningConfig(None, None, f"the running command line cannot be read: {error}")


def _llamacpp_budget(parsed: ModelDefinition, budget_gib: float | None) -> dict[str, object]:
    # llama-server has no budget flag: the builder derives a --cache-ram from the budget, which the
    # parser can only recognise for the default budget. The node reports the instance's budget, so
    # the cap derived from it is the builder's, not an extra argument.
    if budget_gib is None:
        return {}
    cap = [CACHE_RAM, str(llamacpp_cache_ram_mib(budget_gib))]
    extra = parsed.extra_args[2:] if parsed.extra_args[:2] == cap else parsed.extra_args
    return {"memory_budget_gib": budget_gib, "extra_args": extra}


def _identity(definition: ModelDefinition) -> str:
    if definition.runtime == "vllm":
        return definition.image
    assert definition.executable is not None  # guaranteed by ModelDefinition's own validation
    return f"{definition.executable.name}@{definition.executable.version}"


def _matches_label(candidate: ModelDefinition, argv: Sequence[str], label: str | None) -> bool:
    # No label (an instance launched outside Mirbad): the saved image is the best guess there is.
    return label is None or config_hash(_identity(candidate), argv) == label


def _hash(running: ModelDefinition, argv: Sequence[str], total_gib: float) -> str:
    if running.runtime == "vllm":
        # The utilization text as written, so a node's memory measured differently moves nothing.
        return config_hash(running.image, canonicalize_vllm_args(argv))
    return launch_spec_for(running, total_gib=total_gib).config_hash
