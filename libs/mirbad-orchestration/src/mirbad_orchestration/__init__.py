"""mirbad_orchestration: the master-side logic of Mirbad.

Argument builders, normalizers and parsers for vLLM, llama.cpp and MLX, the config hash, the model
registry and tags.
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
from ._enrollment import (
    DEFAULT_TOKEN_TTL,
    ENROLLMENT_TOKENS_FILE,
    NODE_NAME_PATTERN,
    Enrollment,
    EnrollmentTokens,
)
from ._llamacpp_args import build_llamacpp_args, llamacpp_ctx_size, normalize_llamacpp, parse_llamacpp_args
from ._llamacpp_flags import LLAMACPP_CACHE_TYPES, LLAMACPP_MAX_SLOTS
from ._llamacpp_memory import (
    COMPUTE_ALLOWANCE_BYTES,
    estimate_llamacpp_definition_gib,
    estimate_llamacpp_gib,
    llamacpp_kv_cache_bytes,
    llamacpp_kv_cells,
)
from ._mlx_args import build_mlx_args, normalize_mlx, parse_mlx_args
from ._model_rules import Normalizer, check_served_name, prepare_definition
from ._registry import REGISTRY_FILE_NAME, ModelRegistry
from ._registry_file import REGISTRY_SCHEMA_VERSION
from ._seed import SEED_MODEL
from ._tags import (
    MAX_TAG_LENGTH,
    MAX_TAGS,
    TAG_CATALOGUE,
    TagInfo,
    filter_by_tags,
    has_all,
    normalize_tags,
    suggest_tags,
)
from ._vllm_args import build_vllm_args, format_gpu_memory_utilization
from ._vllm_normalize import normalize_vllm
from ._vllm_parse import parse_vllm_args
from .exceptions import (
    DuplicateServedNameError,
    EnrollmentError,
    EnrollmentStoreError,
    EnrollmentTokenError,
    EnrollmentTokenExpiredError,
    EnrollmentTokenUsedError,
    MirbadOrchestrationError,
    RegistryError,
    UnknownEnrollmentTokenError,
    UnknownModelError,
    UnreadableFlagError,
)

__all__ = [
    "COMPUTE_ALLOWANCE_BYTES",
    "DEFAULT_TOKEN_TTL",
    "DEFAULT_TOTAL_GIB",
    "ENROLLMENT_TOKENS_FILE",
    "LLAMACPP_CACHE_TYPES",
    "LLAMACPP_MAX_SLOTS",
    "MAX_TAGS",
    "MAX_TAG_LENGTH",
    "NODE_NAME_PATTERN",
    "REGISTRY_FILE_NAME",
    "REGISTRY_SCHEMA_VERSION",
    "SEED_MODEL",
    "TAG_CATALOGUE",
    "DuplicateServedNameError",
    "Enrollment",
    "EnrollmentError",
    "EnrollmentStoreError",
    "EnrollmentTokenError",
    "EnrollmentTokenExpiredError",
    "EnrollmentTokenUsedError",
    "EnrollmentTokens",
    "MirbadOrchestrationError",
    "ModelRegistry",
    "Normalizer",
    "RegistryError",
    "TagInfo",
    "UnknownEnrollmentTokenError",
    "UnknownModelError",
    "UnreadableFlagError",
    "build_args",
    "build_llamacpp_args",
    "build_mlx_args",
    "build_vllm_args",
    "canonicalize_vllm_args",
    "check_served_name",
    "config_hash",
    "detect_runtime",
    "estimate_llamacpp_definition_gib",
    "estimate_llamacpp_gib",
    "filter_by_tags",
    "format_gpu_memory_utilization",
    "has_all",
    "launch_spec_for",
    "llamacpp_ctx_size",
    "llamacpp_kv_cache_bytes",
    "llamacpp_kv_cells",
    "normalize_definition",
    "normalize_llamacpp",
    "normalize_mlx",
    "normalize_tags",
    "normalize_vllm",
    "parse_args",
    "parse_llamacpp_args",
    "parse_mlx_args",
    "parse_vllm_args",
    "prepare_definition",
    "suggest_tags",
]
