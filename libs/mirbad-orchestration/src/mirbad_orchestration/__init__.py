"""mirbad_orchestration: the master-side logic of Mirbad, in subpackages by concept.

- :mod:`~mirbad_orchestration.commandline`: vLLM, llama.cpp and MLX argument builders, normalizers and
  parsers, launch specs, the config hash and the restart-pending check.
- :mod:`~mirbad_orchestration.registry`: the model registry (``models.json``), model rules and tags.
- :mod:`~mirbad_orchestration.keys`: API keys, their usage ledger and the ``/v1`` key check.
- :mod:`~mirbad_orchestration.fleet`: nodes, enrollment, the agent client, node monitor, remote runtime
  and telemetry.
- :mod:`~mirbad_orchestration.supervision`: starting, stopping and restarting models (``ModelControl``),
  start lanes, the health monitor, crash restarts, restart pauses and recovery state.
- :mod:`~mirbad_orchestration.stores`: the lock-guarded atomic JSON store and the audit log.
- :mod:`~mirbad_orchestration.exceptions` (every error of the library) and
  :mod:`~mirbad_orchestration.testing` (hand-written fakes).

The root re-exports the handful of names a notebook or an embedding app reaches for; everything else is
imported from its subpackage (``from mirbad_orchestration.fleet import NodeRegistry``).
"""

from .commandline import (
    build_args,
    config_hash,
    detect_runtime,
    launch_spec_for,
    normalize_definition,
    parse_args,
)
from .exceptions import (
    AgentAdmissionRefusedError,
    AgentLaunchRejectedError,
    AgentProtocolError,
    AgentRequestError,
    AgentStartConflictError,
    ApiKeyError,
    ApiKeyExpiredError,
    ApiKeyRefusedError,
    ApiKeyRevokedError,
    ApiKeyStoreError,
    BenchmarkRequestError,
    DuplicateNodeError,
    DuplicateServedNameError,
    EnrollmentError,
    EnrollmentStoreError,
    EnrollmentTokenError,
    EnrollmentTokenExpiredError,
    EnrollmentTokenUsedError,
    JobConflictError,
    JobError,
    JobTargetLostError,
    LogStreamError,
    MirbadOrchestrationError,
    ModelNotOnNodeError,
    ModelNotReadyError,
    NodeConflictError,
    NodeError,
    NodeFeatureMissingError,
    NodeIdentityError,
    NodeRegistryError,
    NodeTimeoutError,
    NodeUnreachableError,
    NoJobRunningError,
    PresetNotForModelError,
    RegistryError,
    RejectedMeasurementError,
    StartLaneBusyError,
    StateFileError,
    StoreFileError,
    UnknownApiKeyError,
    UnknownEnrollmentTokenError,
    UnknownModelError,
    UnknownNodeError,
    UnknownPresetError,
    UnreadableFlagError,
)
from .keys import ApiKeyStore
from .registry import ModelRegistry

__all__ = [
    "AgentAdmissionRefusedError",
    "AgentLaunchRejectedError",
    "AgentProtocolError",
    "AgentRequestError",
    "AgentStartConflictError",
    "ApiKeyError",
    "ApiKeyExpiredError",
    "ApiKeyRefusedError",
    "ApiKeyRevokedError",
    "ApiKeyStore",
    "ApiKeyStoreError",
    "BenchmarkRequestError",
    "DuplicateNodeError",
    "DuplicateServedNameError",
    "EnrollmentError",
    "EnrollmentStoreError",
    "EnrollmentTokenError",
    "EnrollmentTokenExpiredError",
    "EnrollmentTokenUsedError",
    "JobConflictError",
    "JobError",
    "JobTargetLostError",
    "LogStreamError",
    "MirbadOrchestrationError",
    "ModelNotOnNodeError",
    "ModelNotReadyError",
    "ModelRegistry",
    "NoJobRunningError",
    "NodeConflictError",
    "NodeError",
    "NodeFeatureMissingError",
    "NodeIdentityError",
    "NodeRegistryError",
    "NodeTimeoutError",
    "NodeUnreachableError",
    "PresetNotForModelError",
    "RegistryError",
    "RejectedMeasurementError",
    "StartLaneBusyError",
    "StateFileError",
    "StoreFileError",
    "UnknownApiKeyError",
    "UnknownEnrollmentTokenError",
    "UnknownModelError",
    "UnknownNodeError",
    "UnknownPresetError",
    "UnreadableFlagError",
    "build_args",
    "config_hash",
    "detect_runtime",
    "launch_spec_for",
    "normalize_definition",
    "parse_args",
]
