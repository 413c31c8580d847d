"""The exceptions of mirbad_orchestration.

The tree of its exceptions, each under its first base here (one with more bases names them all)::

    MirbadOrchestrationError(MirbadError)
    ├── UnreadableFlagError(InvalidFieldError, MirbadOrchestrationError)
    ├── AuditQueryError(InvalidFieldError, MirbadOrchestrationError)
    ├── StoreFileError
    │   ├── EnrollmentStoreError(StoreFileError, EnrollmentError)
    │   ├── ApiKeyStoreError(StoreFileError, ApiKeyError)
    │   ├── NodeRegistryError
    │   ├── StateFileError
    │   └── HostServicesFileError(StoreFileError, HostServiceError)
    ├── RegistryError
    ├── UnknownModelError(MirbadOrchestrationError, KeyError)
    ├── DuplicateServedNameError(InvalidFieldError, MirbadOrchestrationError)
    ├── EnrollmentError
    │   └── EnrollmentTokenError
    │       ├── UnknownEnrollmentTokenError
    │       ├── EnrollmentTokenUsedError
    │       └── EnrollmentTokenExpiredError
    ├── ApiKeyError
    │   └── UnknownApiKeyError(ApiKeyError, KeyError)
    ├── NodeError
    │   ├── NodeFeatureMissingError
    │   ├── UnknownNodeError(NodeError, KeyError)
    │   ├── DuplicateNodeError
    │   ├── NodeUnreachableError
    │   │   └── NodeIdentityError
    │   ├── NodeTimeoutError
    │   ├── AgentProtocolError
    │   ├── LogStreamError
    │   └── AgentRequestError
    │       ├── NodeConflictError
    │       │   ├── NodeNotReadyToStartError
    │       │   ├── AgentAdmissionRefusedError
    │       │   └── AgentStartConflictError
    │       ├── AgentFencedError
    │       ├── AgentLaunchRejectedError
    │       └── ModelNotOnNodeError(AgentRequestError, UnknownModelError)
    ├── StartLaneBusyError
    ├── JobError
    │   ├── JobConflictError
    │   │   └── ModelHeldByJobError
    │   ├── ModelNotReadyError
    │   ├── UnknownPresetError(InvalidFieldError, JobError)
    │   ├── PresetNotForModelError
    │   ├── NoJobRunningError
    │   ├── JobTargetLostError
    │   ├── BenchmarkRequestError
    │   ├── RejectedMeasurementError
    │   └── TuningError
    │       ├── UnknownTuningStepError(InvalidFieldError, TuningError)
    │       │   └── NoTuningStepsError
    │       ├── CandidateFailedError
    │       ├── TuningInfrastructureError
    │       └── NoTuningRunError
    ├── HostServiceError
    │   ├── HostServiceConfirmError
    │   ├── ContainerNotWhitelistedError
    │   └── WhitelistChangeRefusedError
    └── BackupError
        ├── BackupFormatError(InvalidFieldError, BackupError)
        │   ├── BackupVersionError
        │   └── WeakBackupKdfError
        ├── BackupPassphraseError
        ├── BackupPassphraseTooShortError(InvalidFieldError, BackupError)
        ├── BackupNotEncryptedError
        ├── BackupRunError
        ├── RestoreRunningError
        ├── NoRestoreJobError
        └── FleetRecoveryRefusedError
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from mirbad_protocol import InvalidFieldError, MirbadError

__all__ = [
    "AgentAdmissionRefusedError",
    "AgentFencedError",
    "AgentLaunchRejectedError",
    "AgentProtocolError",
    "AgentRequestError",
    "AgentStartConflictError",
    "ApiKeyError",
    "ApiKeyStoreError",
    "AuditQueryError",
    "BackupError",
    "BackupFormatError",
    "BackupNotEncryptedError",
    "BackupPassphraseError",
    "BackupPassphraseTooShortError",
    "BackupRunError",
    "BackupVersionError",
    "BenchmarkRequestError",
    "CandidateFailedError",
    "ContainerNotWhitelistedError",
    "DuplicateNodeError",
    "DuplicateServedNameError",
    "EnrollmentError",
    "EnrollmentStoreError",
    "EnrollmentTokenError",
    "EnrollmentTokenExpiredError",
    "EnrollmentTokenUsedError",
    "FleetRecoveryRefusedError",
    "HostServiceConfirmError",
    "HostServiceError",
    "HostServicesFileError",
    "JobConflictError",
    "JobError",
    "JobTargetLostError",
    "LogStreamError",
    "MirbadOrchestrationError",
    "ModelNotOnNodeError",
    "ModelNotReadyError",
    "NoJobRunningError",
    "NoRestoreJobError",
    "NoTuningRunError",
    "NodeConflictError",
    "NodeError",
    "NodeFeatureMissingError",
    "NodeIdentityError",
    "NodeNotReadyToStartError",
    "NodeRegistryError",
    "NodeTimeoutError",
    "NodeUnreachableError",
    "PresetNotForModelError",
    "RegistryError",
    "RejectedMeasurementError",
    "RestoreRunningError",
    "StartLaneBusyError",
    "StateFileError",
    "StoreFileError",
    "TuningError",
    "TuningInfrastructureError",
    "UnknownApiKeyError",
    "UnknownEnrollmentTokenError",
    "UnknownModelError",
    "UnknownNodeError",
    "UnknownPresetError",
    "UnknownTuningStepError",
    "UnreadableFlagError",
    "WeakBackupKdfError",
    "WhitelistChangeRefusedError",
]


class MirbadOrchestrationError(MirbadError):
    """Root of the exceptions of :mod:`mirbad_orchestration`."""


class UnreadableFlagError(InvalidFieldError, MirbadOrchestrationError):
    """An owned flag in a command line or in ``extraArgs`` whose value cannot be read.

    ``field`` is the flag as written (``--max-num-seqs``, ``--speculative-config.num_speculative_tokens``).
    """


class AuditQueryError(InvalidFieldError, MirbadOrchestrationError):
    """A reading of the audit log that cannot be answered: a bad time, limit or cursor (``field``)."""


class StoreFileError(MirbadOrchestrationError):
    """A file one of the master's stores keeps cannot be read or written; nothing is overwritten to recover.

    Attributes:
        path: the file.
        reason: what is wrong with it.
        disk_full: whether it failed because its disk (or the quota) is full.
    """

    def __init__(self, path: Path, reason: str, *, disk_full: bool = False) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
        self.disk_full = disk_full


class RegistryError(MirbadOrchestrationError):
    """The registry file cannot be read or written.

    Attributes:
        disk_full: whether a write failed because the disk (or the quota) is full.
    """

    def __init__(self, message: str, *, disk_full: bool = False) -> None:
        super().__init__(message)
        self.disk_full = disk_full


class UnknownModelError(MirbadOrchestrationError, KeyError):
    """No model with that id is registered."""

    def __init__(self, model_id: str) -> None:
        super().__init__(model_id)
        self.model_id = model_id

    def __str__(self) -> str:
        return f"no model with id {self.model_id!r}"


class DuplicateServedNameError(InvalidFieldError, MirbadOrchestrationError):
    """Another model already serves under that name (compared case-insensitively)."""

    def __init__(self, served_name: str, owner_id: str) -> None:
        super().__init__("servedName", f"{served_name!r} is already served by model {owner_id!r}")
        self.served_name = served_name
        self.owner_id = owner_id


class EnrollmentError(MirbadOrchestrationError):
    """Root of the errors of node enrollment on the master."""


class EnrollmentStoreError(StoreFileError, EnrollmentError):
    """The enrollment token file cannot be read or written."""


class EnrollmentTokenError(EnrollmentError):
    """An enrollment token the master refuses; the node needs a new token from the operator."""


class UnknownEnrollmentTokenError(EnrollmentTokenError):
    """A token this master never issued: mistyped, forged, meant for another master, or long expired."""

    def __init__(self) -> None:
        super().__init__(
            "enrollment token not recognised: this master did not issue it (check for a typing mistake "
            "or the wrong master URL) or it was pruned long after expiring; ask for a new token"
        )


class EnrollmentTokenUsedError(EnrollmentTokenError):
    """A token that already enrolled a node: every token enrolls exactly once.

    Attributes:
        node_name: the node the token was issued for.
        used_at: when it was redeemed.
    """

    def __init__(self, node_name: str, used_at: datetime) -> None:
        super().__init__(
            f"enrollment token for node {node_name!r} was already used at {used_at.isoformat()}; "
            "a token enrolls once, so ask for a new token"
        )
        self.node_name = node_name
        self.used_at = used_at


class EnrollmentTokenExpiredError(EnrollmentTokenError):
    """A token presented after its expiry.

    Attributes:
        node_name: the node the token was issued for.
        expired_at: when it stopped being valid.
    """

    def __init__(self, node_name: str, expired_at: datetime) -> None:
        super().__init__(
            f"enrollment token for node {node_name!r} expired at {expired_at.isoformat()}; "
            "ask for a new token"
        )
        self.node_name = node_name
        self.expired_at = expired_at


class ApiKeyError(MirbadOrchestrationError):
    """Root of the errors of the API key store."""


class ApiKeyStoreError(StoreFileError, ApiKeyError):
    """An API key file (keys or usage) cannot be read or written; it is never overwritten to recover."""


class UnknownApiKeyError(ApiKeyError, KeyError):
    """No API key has that id."""

    def __init__(self, key_id: str) -> None:
        super().__init__(key_id)
        self.key_id = key_id

    def __str__(self) -> str:
        return f"no API key with id {self.key_id!r}"


# ---------------------------------------------------------------- nodes and their agents


class NodeRegistryError(StoreFileError):
    """The node registry file cannot be read or written; it is never overwritten to recover."""


class NodeError(MirbadOrchestrationError):
    """Root of the errors about one node of the fleet or its agent.

    Attributes:
        node_id: the node concerned.
    """

    def __init__(self, node_id: str, message: str) -> None:
        super().__init__(message)
        self.node_id = node_id


class NodeFeatureMissingError(NodeError):
    """The node's agent does not report the feature flag a request needs (a download kind).

    Attributes:
        feature: the missing feature flag (``downloads.hf-native``, ``downloads.ollama``).
        field: the request field that asked for it (``kind``).
    """

    def __init__(self, node_id: str, feature: str, field: str = "kind") -> None:
        super().__init__(
            node_id, f"node {node_id!r} does not offer {feature} (its agent reports no such feature)"
        )
        self.feature = feature
        self.field = field


class UnknownNodeError(NodeError, KeyError):
    """No node with that id is registered."""

    def __init__(self, node_id: str) -> None:
        super().__init__(node_id, f"no node with id {node_id!r}")

    def __str__(self) -> str:
        return str(self.args[0])


class DuplicateNodeError(NodeError):
    """A node with that id, or another node at the same agent URL, is already registered (a conflict)."""


class NodeUnreachableError(NodeError):
    """The node's agent could not be reached: connection refused, no route, TLS handshake refused."""


class NodeIdentityError(NodeUnreachableError):
    """The agent at the node's URL presented a certificate that is not the node's (name or key pin)."""


class NodeTimeoutError(NodeError):
    """The node's agent accepted the request but did not answer within the call's timeout."""


class AgentProtocolError(NodeError):
    """The agent answered something that does not follow the agent contract (a bad gateway)."""


class LogStreamError(NodeError):
    """The agent ended a followed log because reading the model's log failed."""


class AgentRequestError(NodeError):
    """The agent refused a request with its error envelope.

    Attributes:
        status_code: the HTTP status the agent answered.
        code: the envelope's ``code`` (an ``AgentErrorCode`` value, or ``None`` without an envelope).
        message: the envelope's message, for people.
        field: the offending field, for ``invalid_request``.
        pattern: the deny pattern of a ``denied`` refusal (hostd's, passed on by the agent).
    """

    def __init__(
        self,
        node_id: str,
        status_code: int,
        code: str | None,
        message: str,
        field: str | None = None,
        *,
        pattern: str | None = None,
    ) -> None:
        super().__init__(node_id, f"node {node_id!r}: {message}")
        self.status_code = status_code
        self.code = code
        self.message = message
        self.field = field
        self.pattern = pattern


class NodeConflictError(AgentRequestError):
    """The node refused a start for now (HTTP 409 at the admin API); the message says why."""


class NodeNotReadyToStartError(NodeConflictError):
    """The node cannot start the model yet, but will be able to later without anyone's doing.

    Its executable is still being installed, say (``mirbad up``'s background llama-server build). The
    health monitor tries the start again later instead of counting it as a crash of the model; the
    router answers the ``/v1`` request as for a model still starting (503, ``Retry-After``).
    """


class AgentAdmissionRefusedError(NodeConflictError):
    """The agent answered ``admission_refused``: the model's memory budget does not fit on the node.

    Starting with ``force`` overrides it. On the node itself the refusal is mirbad_runtime's
    ``MemoryAdmissionError``; this is how the master sees it.
    """


class AgentStartConflictError(NodeConflictError):
    """The agent answered ``start_conflict``: the node is busy starting another model, or has this one.

    Another model is still starting on the node, or the model runs under another runtime there
    (mirbad_runtime's ``StartConflictError`` on the node).
    """


class AgentFencedError(AgentRequestError):
    """The agent answered ``fenced``: it follows a master at a newer epoch than this one.

    This master is stale (a recovered or promoted master took over): it must not drive the node. On
    the node the refusal is mirbad_agent's ``FencedError``.

    Attributes:
        epoch: the highest master epoch the agent has seen (None from an agent that did not say).
        request_epoch: the epoch this master's command carried.
    """

    def __init__(
        self, node_id: str, status_code: int, message: str, epoch: int | None, request_epoch: int | None
    ) -> None:
        super().__init__(node_id, status_code, "fenced", message)
        self.epoch = epoch
        self.request_epoch = request_epoch


class AgentLaunchRejectedError(AgentRequestError):
    """The agent answered ``spec_rejected``: the node cannot run the launch spec at all.

    No such runtime, executable, model file ... (mirbad_runtime's ``LaunchRejectedError`` on the node).
    """


class ModelNotOnNodeError(AgentRequestError, UnknownModelError):
    """The node has no instance of the model (its logs, telemetry or proxy were asked for)."""

    def __init__(self, node_id: str, model_id: str, message: str) -> None:
        AgentRequestError.__init__(self, node_id, 404, "model_not_found", message)
        self.model_id = model_id

    def __str__(self) -> str:
        return f"node {self.node_id!r} has no instance of model {self.model_id!r}: {self.message}"


class StartLaneBusyError(MirbadOrchestrationError):
    """A launch waited too long for its node's start lane: another model kept starting there.

    Attributes:
        node_id: the node whose lane was busy.
        holder: what held the lane when the wait ended (a model id), if known.
        waited: how many seconds the launch waited.
    """

    def __init__(self, node_id: str, holder: str | None, waited: float) -> None:
        busy = f"starting {holder!r}" if holder else "busy"
        super().__init__(f"node {node_id!r} is {busy}; gave up waiting for its start lane after {waited:g}s")
        self.node_id = node_id
        self.holder = holder
        self.waited = waited


class StateFileError(StoreFileError):
    """A state file of the master (recovery state, restart pauses) could not be read or written."""


class JobError(MirbadOrchestrationError):
    """Root of the refusals and failures of jobs (benchmarks) on a node."""


class JobConflictError(JobError):
    """A job runs on the node already: one job at a time per node.

    Attributes:
        job_id: the running job.
        model_id: the model it holds.
        node_id: the node.
    """

    def __init__(self, job_id: str, model_id: str, node_id: str) -> None:
        super().__init__(
            f"node {node_id!r} is running job {job_id!r} (a benchmark or tuning run of {model_id!r}); "
            "wait for it to end or cancel it"
        )
        self.job_id = job_id
        self.model_id = model_id
        self.node_id = node_id


class ModelHeldByJobError(JobConflictError):
    """A running job holds the model: a tuning run stops it and starts it again at its end.

    An edit or a delete in between would be undone, or brought back as a model outside the registry,
    by that restart; it is refused until the run ends or is cancelled.
    """

    def __init__(self, job_id: str, model_id: str, node_id: str) -> None:
        JobError.__init__(
            self,
            f"model {model_id!r} is held by tuning run {job_id!r} on node {node_id!r}, which starts it "
            "again when it ends; wait for the run to end or cancel it, then change the model",
        )
        self.job_id = job_id
        self.model_id = model_id
        self.node_id = node_id


class ModelNotReadyError(JobError):
    """A job was asked for a model that is not Ready.

    Attributes:
        model_id: the model.
        state: the state it is in (``Stopped``, ``Starting`` ...).
    """

    def __init__(self, model_id: str, state: str) -> None:
        super().__init__(f"model {model_id!r} is {state}, not Ready: start it first")
        self.model_id = model_id
        self.state = state


class UnknownPresetError(InvalidFieldError, JobError):
    """No benchmark preset of that name; the message lists the presets there are."""

    def __init__(self, preset: str, presets: list[str]) -> None:
        super().__init__("preset", f"unknown preset {preset!r}; the presets are: {', '.join(presets)}")
        self.preset = preset
        self.presets = presets


class PresetNotForModelError(JobError):
    """A model cannot run that benchmark: a reranker, or a preset made for the other kind of model.

    Attributes:
        model_id: the model.
        reason: why, in words.
    """

    def __init__(self, model_id: str, reason: str) -> None:
        super().__init__(f"model {model_id!r} cannot be benchmarked so: {reason}")
        self.model_id = model_id
        self.reason = reason


class NoJobRunningError(JobError):
    """A cancel found no running job (on the node asked for)."""


class JobTargetLostError(JobError):
    """The model a job measures went away mid-job (deleted, stopped, crashed or its node gone)."""


class BenchmarkRequestError(JobError):
    """A benchmark request failed outright (the model refused it or the exchange broke)."""


class HostServiceError(MirbadOrchestrationError):
    """A host-service request the master refuses itself, before any node is asked."""


class HostServicesFileError(StoreFileError, HostServiceError):
    """``host-services.json`` cannot be read or written: container actions fail closed until it is fixed."""


class HostServiceConfirmError(HostServiceError):
    """A protected service's stop, restart, autostart-off or unprotect without the right typed name.

    A whitelist add without the typed name is refused the same way.

    Attributes:
        name: the name that had to be typed.
    """

    def __init__(self, name: str) -> None:
        super().__init__(f"type the service's name {name!r} to confirm")
        self.name = name


class ContainerNotWhitelistedError(HostServiceError):
    """An action on a container that is not on the master's container whitelist.

    Attributes:
        node_id: the node.
        name: the container.
    """

    def __init__(self, node_id: str, name: str, *, replaced: bool = False) -> None:
        message = f"container {name!r} on node {node_id!r} is not on the whitelist"
        if replaced:
            message += " (the container whitelisted under that name was replaced; whitelist it again)"
        super().__init__(message)
        self.node_id = node_id
        self.name = name


class WhitelistChangeRefusedError(HostServiceError):
    """A whitelist change without a signed-in administrator (the caller resolved no principal)."""


class RejectedMeasurementError(JobError):
    """A preset run cannot be scored: a measurement is not a finite positive number (or none overlap).

    Attributes:
        component: the score component.
        side: ``candidate`` or ``baseline``.
        value: the measurement.
    """

    def __init__(self, component: str, side: str, value: float, *, detail: str | None = None) -> None:
        super().__init__(
            detail
            or f"the {side}'s {component} is {value!r}, not a finite positive number: the run is rejected"
        )
        self.component = component
        self.side = side
        self.value = value


class TuningError(JobError):
    """Root of the refusals and failures of tuning runs."""


class UnknownTuningStepError(InvalidFieldError, TuningError):
    """A tuning request names steps (dimensions) the model's runtime does not have.

    Attributes:
        unknown: the names refused, in the request's order.
        known: the names there are.
    """

    def __init__(self, unknown: list[str], known: list[str]) -> None:
        super().__init__(
            "steps", f"unknown steps {', '.join(unknown)}; this model's steps are: {', '.join(known)}"
        )
        self.unknown = unknown
        self.known = known


class NoTuningStepsError(UnknownTuningStepError):
    """A tuning request gives ``steps`` as an empty list: a run with nothing to try (HTTP 422, ``steps``).

    Leaving ``steps`` out tunes the search's dimensions; an empty list is a mistake, not "none".
    """

    def __init__(self, known: list[str]) -> None:
        reason = f"name at least one step, or leave steps out; this model's steps are: {', '.join(known)}"
        InvalidFieldError.__init__(self, "steps", reason)
        self.unknown = []
        self.known = known


class CandidateFailedError(TuningError):
    """One candidate could not be measured (launch refused, never Ready, benchmark failed).

    Only that candidate fails; the run goes on with the next one.

    Attributes:
        cause: why, in words (the node's failure report when it has one).
    """

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


class TuningInfrastructureError(TuningError):
    """A tuning instance could not be removed (verified gone) in time: the run stops and restores."""


class NoTuningRunError(TuningError):
    """No stored tuning run of that name, or one without tuned settings to apply (the baseline won)."""


# ---------------------------------------------------------------- backups


class BackupError(MirbadOrchestrationError):
    """Root of the errors of backups: reading, opening and writing backup documents."""


class BackupFormatError(InvalidFieldError, BackupError):
    """Bytes that are not a backup this master reads: bad JSON, a wrong type, an unknown field.

    ``field`` is the offending field's dotted wire path, or ``(document)`` when the bytes are not a JSON
    object at all.
    """


class BackupVersionError(BackupFormatError):
    """A backup of a schema version this master does not read (it reads 1 and 2).

    Attributes:
        version: the version the document declares (``None`` when it declares none).
    """

    def __init__(self, version: object) -> None:
        super().__init__(
            "schemaVersion", f"{version!r} is not a backup schema version this master reads (1, 2)"
        )
        self.version = version


class WeakBackupKdfError(BackupFormatError):
    """An encrypted section whose key derivation is weaker than the one this master writes.

    Refused before any passphrase is tried, so a file crafted with a cheap KDF cannot make guessing
    the passphrase cheap.
    """


class BackupPassphraseError(BackupError):
    """The encrypted section did not open: the passphrase is wrong, or the backup was altered.

    The two cannot be told apart (that is what authenticated encryption gives), and nothing of the
    section is returned either way.
    """

    def __init__(self) -> None:
        super().__init__("the passphrase is wrong, or the backup was altered after it was written")


class BackupPassphraseTooShortError(InvalidFieldError, BackupError):
    """A passphrase shorter than the minimum offered to encrypt a backup (``field`` is ``passphrase``)."""


class BackupNotEncryptedError(BackupError):
    """A passphrase was given for a backup that has no encrypted section (nothing to open)."""

    def __init__(self) -> None:
        super().__init__("this backup has no encrypted section: it was written without a passphrase")


class BackupRunError(BackupError):
    """A backup could not be written (no such directory, a full disk, the document could not be built).

    Attributes:
        reason: what went wrong, for people (also what the backup state records).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RestoreRunningError(BackupError):
    """A restore was asked for while one runs: one restore at a time.

    Attributes:
        job_id: the running restore job.
    """

    def __init__(self, job_id: str) -> None:
        super().__init__(f"restore job {job_id!r} is running; wait for it to end or cancel it")
        self.job_id = job_id


class NoRestoreJobError(BackupError):
    """No restore job to show or cancel (none has run since the master started, or none runs now)."""


class FleetRecoveryRefusedError(BackupError):
    """A backup that cannot bring a fleet back in recovery mode, checked before anything is written.

    Recovery needs what only a fleet's passphrase backup carries: a version 2 document (nodes, the
    master's identity) with an encrypted section that holds the fleet CA. Without the CA every node
    would have to enroll again, which is exactly what recovery exists to avoid.

    Attributes:
        reason: why, for people.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(f"this backup cannot recover a fleet: {reason}")
        self.reason = reason
