"""Command lines: what the master hands an agent to start a model, and what it reads back.

The builders turn a :class:`~mirbad_protocol.ModelDefinition` into the argv of ``vllm serve``,
``llama-server`` or ``mlx_lm.server`` (:func:`build_args`), the normalizers lift owned flags out of
``extraArgs`` into their fields (:func:`normalize_definition`), the parsers read a command line back
into a definition (:func:`parse_args`), and :func:`launch_spec_for` wraps it all into the launch spec an
agent executes. :func:`config_hash` fingerprints a launch; :class:`RestartPendingCheck` compares a
running launch with the stored definition (the portal's "restart pending" and Apply dialog), reading
what an instance runs back from the argv its node reports (:func:`read_running_config`).
"""

from ._commandline import (
    DEFAULT_TOTAL_GIB,
    build_args,
    detect_runtime,
    launch_spec_for,
    normalize_definition,
    parse_args,
)
from ._config_hash import canonicalize_vllm_args, config_hash
from ._llamacpp_args import build_llamacpp_args, llamacpp_ctx_size, normalize_llamacpp, parse_llamacpp_args
from ._llamacpp_flags import (
    LLAMACPP_CACHE_RAM_MAX_MIB,
    LLAMACPP_CACHE_TYPES,
    LLAMACPP_MAX_SLOTS,
    PROMPT_CACHE_SHARE,
    llamacpp_cache_ram_mib,
)
from ._llamacpp_memory import (
    COMPUTE_ALLOWANCE_BYTES,
    estimate_llamacpp_definition_gib,
    estimate_llamacpp_gib,
    llamacpp_kv_cache_bytes,
    llamacpp_kv_cells,
)
from ._mlx_args import build_mlx_args, normalize_mlx, parse_mlx_args
from ._restart_pending import (
    TUNING_LABEL,
    PendingReview,
    RestartPendingCheck,
    RunningLaunch,
    SettingChange,
    changed_settings,
)
from ._running_config import RunningConfig, launched_argv, read_running_config
from ._vllm_args import build_vllm_args, format_gpu_memory_utilization
from ._vllm_flags import check_vllm_values
from ._vllm_normalize import normalize_vllm
from ._vllm_parse import parse_vllm_args

__all__ = [
    "COMPUTE_ALLOWANCE_BYTES",
    "DEFAULT_TOTAL_GIB",
    "LLAMACPP_CACHE_RAM_MAX_MIB",
    "LLAMACPP_CACHE_TYPES",
    "LLAMACPP_MAX_SLOTS",
    "PROMPT_CACHE_SHARE",
    "TUNING_LABEL",
    "PendingReview",
    "RestartPendingCheck",
    "RunningConfig",
    "RunningLaunch",
    "SettingChange",
    "build_args",
    "build_llamacpp_args",
    "build_mlx_args",
    "build_vllm_args",
    "canonicalize_vllm_args",
    "changed_settings",
    "check_vllm_values",
    "config_hash",
    "detect_runtime",
    "estimate_llamacpp_definition_gib",
    "estimate_llamacpp_gib",
    "format_gpu_memory_utilization",
    "launch_spec_for",
    "launched_argv",
    "llamacpp_cache_ram_mib",
    "llamacpp_ctx_size",
    "llamacpp_kv_cache_bytes",
    "llamacpp_kv_cells",
    "normalize_definition",
    "normalize_llamacpp",
    "normalize_mlx",
    "normalize_vllm",
    "parse_args",
    "parse_llamacpp_args",
    "parse_mlx_args",
    "parse_vllm_args",
    "read_running_config",
]
