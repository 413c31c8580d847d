"""mirbad_orchestration: the master-side logic of Mirbad.

Argument builders, normalizers and parsers for vLLM, llama.cpp and MLX, the config hash, the model
registry and tags.
"""

from ._agent_client import AgentClient, AgentTimeouts
from ._agent_clients import AgentClients, TransportFactory
from ._api_key_file import API_KEYS_FILE, ApiKeyImport, secret_sha256
from ._api_key_usage import API_KEY_USAGE_FILE, DEFAULT_MAX_MODELS_PER_KEY, OTHER_MODELS
from ._api_keys import DEFAULT_USAGE_FLUSH_SECONDS, ApiKeyStore
from ._audit import AUDIT_FOLDER_NAME, AuditEntry, AuditLog, AuditOutcome
from ._commandline import (
    DEFAULT_TOTAL_GIB,
    build_args,
    detect_runtime,
    launch_spec_for,
    normalize_definition,
    parse_args,
)
from ._config_hash import canonicalize_vllm_args, config_hash
from ._endpoint_resolver import AgentEndpoint, AgentEndpointResolver
from ._enrollment import (
    DEFAULT_TOKEN_TTL,
    ENROLLMENT_TOKENS_FILE,
    NODE_NAME_PATTERN,
    Enrollment,
    EnrollmentTokens,
)
from ._health_monitor import HealthMonitor
from ._health_settings import (
    AUTOSTART_ACTOR,
    IDLE_UNLOAD_ACTOR,
    DefinitionSource,
    HealthSettings,
    LastUsed,
    SkipCheck,
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
from ._node_monitor import DEFAULT_POLL_INTERVAL_S, NodeMonitor, NodeState, StatusCache
from ._nodes import LOCAL_NODE_ID, NODE_ID_PATTERN, NODES_FILE_NAME, NodeRecord, NodeRegistry
from ._recovery_state import RECOVERY_FILE_NAME, RecoveryState
from ._registry import REGISTRY_FILE_NAME, ModelRegistry
from ._registry_file import REGISTRY_SCHEMA_VERSION
from ._remote_runtime import DEFAULT_CACHE_MAX_AGE_S, RemoteModelRuntime, launch_total_gib
from ._remote_telemetry import (
    DEFAULT_HISTORY_CAPACITY,
    DEFAULT_TELEMETRY_INTERVAL_S,
    RemoteTelemetryCollector,
)
from ._restart_pauses import RESTART_PAUSES_FILE_NAME, RestartPause, RestartPauses
from ._restart_pending import (
    TUNING_LABEL,
    RestartPendingCheck,
    RunningLaunch,
    SettingChange,
    changed_settings,
)
from ._runtime import ModelRuntime, NodeView
from ._seed import SEED_MODEL
from ._start_lanes import DEFAULT_LANE_WAIT, StartLanes
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
    AgentProtocolError,
    AgentRequestError,
    ApiKeyError,
    ApiKeyExpiredError,
    ApiKeyRefusedError,
    ApiKeyRevokedError,
    ApiKeyStoreError,
    DuplicateNodeError,
    DuplicateServedNameError,
    EnrollmentError,
    EnrollmentStoreError,
    EnrollmentTokenError,
    EnrollmentTokenExpiredError,
    EnrollmentTokenUsedError,
    LaunchRejectedError,
    LogStreamError,
    MemoryAdmissionRefusedError,
    MirbadOrchestrationError,
    ModelNotOnNodeError,
    NodeConflictError,
    NodeError,
    NodeIdentityError,
    NodeRegistryError,
    NodeTimeoutError,
    NodeUnreachableError,
    RegistryError,
    StartConflictError,
    StartLaneBusyError,
    StateFileError,
    UnknownApiKeyError,
    UnknownEnrollmentTokenError,
    UnknownModelError,
    UnknownNodeError,
    UnreadableFlagError,
)

__all__ = [
    "API_KEYS_FILE",
    "API_KEY_USAGE_FILE",
    "AUDIT_FOLDER_NAME",
    "AUTOSTART_ACTOR",
    "COMPUTE_ALLOWANCE_BYTES",
    "DEFAULT_CACHE_MAX_AGE_S",
    "DEFAULT_HISTORY_CAPACITY",
    "DEFAULT_LANE_WAIT",
    "DEFAULT_MAX_MODELS_PER_KEY",
    "DEFAULT_POLL_INTERVAL_S",
    "DEFAULT_TELEMETRY_INTERVAL_S",
    "DEFAULT_TOKEN_TTL",
    "DEFAULT_TOTAL_GIB",
    "DEFAULT_USAGE_FLUSH_SECONDS",
    "ENROLLMENT_TOKENS_FILE",
    "IDLE_UNLOAD_ACTOR",
    "LLAMACPP_CACHE_TYPES",
    "LLAMACPP_MAX_SLOTS",
    "LOCAL_NODE_ID",
    "MAX_TAGS",
    "MAX_TAG_LENGTH",
    "NODES_FILE_NAME",
    "NODE_ID_PATTERN",
    "NODE_NAME_PATTERN",
    "OTHER_MODELS",
    "RECOVERY_FILE_NAME",
    "REGISTRY_FILE_NAME",
    "REGISTRY_SCHEMA_VERSION",
    "RESTART_PAUSES_FILE_NAME",
    "SEED_MODEL",
    "TAG_CATALOGUE",
    "TUNING_LABEL",
    "AgentClient",
    "AgentClients",
    "AgentEndpoint",
    "AgentEndpointResolver",
    "AgentProtocolError",
    "AgentRequestError",
    "AgentTimeouts",
    "ApiKeyError",
    "ApiKeyExpiredError",
    "ApiKeyImport",
    "ApiKeyRefusedError",
    "ApiKeyRevokedError",
    "ApiKeyStore",
    "ApiKeyStoreError",
    "AuditEntry",
    "AuditLog",
    "AuditOutcome",
    "DefinitionSource",
    "DuplicateNodeError",
    "DuplicateServedNameError",
    "Enrollment",
    "EnrollmentError",
    "EnrollmentStoreError",
    "EnrollmentTokenError",
    "EnrollmentTokenExpiredError",
    "EnrollmentTokenUsedError",
    "EnrollmentTokens",
    "HealthMonitor",
    "HealthSettings",
    "LastUsed",
    "LaunchRejectedError",
    "LogStreamError",
    "MemoryAdmissionRefusedError",
    "MirbadOrchestrationError",
    "ModelNotOnNodeError",
    "ModelRegistry",
    "ModelRuntime",
    "NodeConflictError",
    "NodeError",
    "NodeIdentityError",
    "NodeMonitor",
    "NodeRecord",
    "NodeRegistry",
    "NodeRegistryError",
    "NodeState",
    "NodeTimeoutError",
    "NodeUnreachableError",
    "NodeView",
    "Normalizer",
    "RecoveryState",
    "RegistryError",
    "RemoteModelRuntime",
    "RemoteTelemetryCollector",
    "RestartPause",
    "RestartPauses",
    "RestartPendingCheck",
    "RunningLaunch",
    "SettingChange",
    "SkipCheck",
    "StartConflictError",
    "StartLaneBusyError",
    "StartLanes",
    "StateFileError",
    "StatusCache",
    "TagInfo",
    "TransportFactory",
    "UnknownApiKeyError",
    "UnknownEnrollmentTokenError",
    "UnknownModelError",
    "UnknownNodeError",
    "UnreadableFlagError",
    "build_args",
    "build_llamacpp_args",
    "build_mlx_args",
    "build_vllm_args",
    "canonicalize_vllm_args",
    "changed_settings",
    "check_served_name",
    "config_hash",
    "detect_runtime",
    "estimate_llamacpp_definition_gib",
    "estimate_llamacpp_gib",
    "filter_by_tags",
    "format_gpu_memory_utilization",
    "has_all",
    "launch_spec_for",
    "launch_total_gib",
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
    "secret_sha256",
    "suggest_tags",
]
