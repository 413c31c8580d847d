"""The admin API's refusals: every error code the master's ``/api`` answers, and the envelope.

Every refusal is ``{"error": {"code", "message", ...}}``: the agent envelope's shape, with optional
subject fields naming what the refusal is about (the field of a 400, the model of a 404, the node
that did not answer ...), so a client reads ids from fields instead of from the message. The fields
are additive and omitted when the master does not know them; a client keeps reading the envelope of a
newer master (an unknown code, an unknown field).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Final

from ._wire import WireModel

__all__ = ["AdminError", "AdminErrorBody", "AdminErrorCode", "admin_error_body"]


class AdminErrorCode(StrEnum):
    """Every code of the admin API's error envelope (``docs/api.md`` has the table with the statuses)."""

    INVALID_REQUEST = "invalid_request"
    """A field of the request is invalid or unknown; ``field`` names it (wire spelling)."""
    UNAUTHORIZED = "unauthorized"
    """No or a wrong administrator password or session."""
    CROSS_ORIGIN = "cross_origin"
    """A cookie-authenticated write from another origin, or naming none."""
    MODEL_NOT_FOUND = "model_not_found"
    """No model with that id, or its node has no instance of it; ``modelId`` names it."""
    NODE_NOT_FOUND = "node_not_found"
    """No node with that id; ``nodeId`` names it."""
    KEY_NOT_FOUND = "key_not_found"
    """No API key with that id; ``keyId`` names it."""
    ROUTE_NOT_FOUND = "route_not_found"
    """No such route."""
    METHOD_NOT_ALLOWED = "method_not_allowed"
    """The route does not take that method."""
    MODEL_EXISTS = "model_exists"
    """A new model's id is taken (``field`` is ``id``)."""
    SERVED_NAME_TAKEN = "served_name_taken"
    """Another model (``modelId``) serves under that name (``servedName``) already."""
    NODE_EXISTS = "node_exists"
    """A node with that id, or at that agent URL, is registered already; ``nodeId`` names it."""
    NODE_HAS_MODELS = "node_has_models"
    """Models are placed on the node to remove (``nodeId``)."""
    LOCAL_NODE = "local_node"
    """The master's own node (``nodeId``) cannot be removed."""
    ADMISSION_REFUSED = "admission_refused"
    """The model's memory budget does not fit on its node; start again with ``force=true``."""
    START_CONFLICT = "start_conflict"
    """The node is starting another model, or runs this one under another runtime."""
    FENCED = "fenced"
    """A node refused this master's command: it follows a master at a newer epoch (a takeover)."""
    START_LANE_BUSY = "start_lane_busy"
    """The start waited too long for its node's start lane."""
    NODE_CONFLICT = "node_conflict"
    """The node refused a start for now."""
    REQUEST_TOO_LARGE = "request_too_large"
    """The request's body is too large."""
    UNKNOWN_GPU = "unknown_gpu"
    """A placement names a GPU its node does not report (``field`` is ``placement.gpuUuids``, ``nodeId``
    names the node; the message lists the node's GPUs)."""
    SPEC_REJECTED = "spec_rejected"
    """The node cannot run the launch at all (no such runtime, executable or model file)."""
    TOO_MANY_ATTEMPTS = "too_many_attempts"
    """Too many wrong passwords; ``retryAfterS`` (and ``Retry-After``) say when to try again."""
    INTERNAL_ERROR = "internal_error"
    """A bug of the master; its log has the details."""
    STORAGE_ERROR = "storage_error"
    """A file of the master cannot be read or written."""
    NODE_REFUSED = "node_refused"
    """The node refused the request in a way the master does not pass on as its own refusal."""
    BAD_GATEWAY = "bad_gateway"
    """The node answered outside the agent contract."""
    LOG_STREAM_FAILED = "log_stream_failed"
    """The model's log could not be read any further."""
    NODE_UNREACHABLE = "node_unreachable"
    """The node's agent cannot be reached."""
    NODE_TIMEOUT = "node_timeout"
    """The node's agent did not answer in time."""
    CONFIRM = "confirm"
    """403: a protected host service's stop, restart, autostart-off or unprotect (or a whitelist add)
    without its name typed in ``confirm``."""
    DENIED = "denied"
    """403: the unit is on the node's hard deny list; nothing can touch it."""
    NOT_WHITELISTED = "not_whitelisted"
    """403: a container action for a container not on the master's container whitelist."""
    WHITELIST_REFUSED = "whitelist_refused"
    """403: a whitelist change without a signed-in administrator."""
    SERVICE_NOT_FOUND = "service_not_found"
    """404: no host service (whitelisted unit, container, action) of that name on the node."""
    HOSTD_UNAVAILABLE = "hostd_unavailable"
    """503: the node has no hostd that answers (no host services there)."""
    INSUFFICIENT_STORAGE = "insufficient_storage"
    """A file of the master cannot be written: its disk is full (the message names the file)."""
    JOB_CONFLICT = "job_conflict"
    """A job runs on the model's node already; ``jobId``, ``modelId`` and ``nodeId`` name it."""
    MODEL_NOT_READY = "model_not_ready"
    """The model is not Ready (the message says its state); ``modelId`` names it."""
    UNKNOWN_PRESET = "unknown_preset"
    """No benchmark preset of that name (``field`` is ``preset``; the message lists the presets)."""
    UNKNOWN_TUNING_STEP = "unknown_tuning_step"
    """A tuning request names steps the model's runtime does not tune (``field`` is ``steps``; the
    message names each and lists the steps there are)."""
    PRESET_NOT_FOR_MODEL = "preset_not_for_model"
    """The model cannot run that benchmark (a reranker; a preset for the other kind of model); the
    message says why and ``modelId`` names the model."""
    JOB_NOT_FOUND = "job_not_found"
    """No benchmark job is running (on that node)."""
    FEATURE_MISSING = "feature_missing"
    """The node lacks the feature flag the request needs (``downloads.hf-native``, ``downloads.ollama``);
    ``nodeId`` names the node, ``field`` the request field (``kind``) and the message the feature."""
    DOWNLOAD_NOT_FOUND = "download_not_found"
    """The node has no download job of that id; ``nodeId`` names the node."""
    SOURCE_NOT_FOUND = "source_not_found"
    """The download's source has no such repository, revision or tag; ``field`` names it."""
    SOURCE_NEEDS_TOKEN = "source_needs_token"  # noqa: S105 - an error code, not a secret
    """The repository is private or gated: start again with a ``token`` (``field`` is ``token``)."""
    DOWNLOAD_CONFLICT = "download_conflict"
    """The download's folder exists on the node already, or another job writes it (``field``)."""
    INSUFFICIENT_SPACE = "insufficient_space"
    """The node's model root has too little free space; the message names the bytes short."""
    MODEL_FILES_MISSING = "model_files_missing"
    """The model's files are not on its node (``field`` is ``modelPath``; the message names the path)."""
    INVALID_IMAGE_REFERENCE = "invalid_image_reference"
    """An image pull names a reference that does not parse (``field`` is ``image``)."""
    PULL_NOT_FOUND = "pull_not_found"
    """The node has no image pull of that id; ``nodeId`` names the node."""
    PULL_CONFLICT = "pull_conflict"
    """A pull of the same image reference runs on that node already."""
    BACKUP_NOT_FOUND = "backup_not_found"
    """No backup of that name in the backup directory (or a name that is no backup's), or a download
    token that is unknown, used or expired."""
    PASSPHRASE_TOO_SHORT = "passphrase_too_short"  # noqa: S105 - an error code, not a secret
    """A backup passphrase shorter than 12 characters (``field`` is ``passphrase``)."""
    BACKUP_FAILED = "backup_failed"
    """The backup could not be written (no backup directory set, the directory missing, a full disk);
    the message says why, and ``GET /api/backup`` shows it as the last failure."""
    MOUNT_CONFLICT = "mount_conflict"
    """The backup target holds a mount unit, automount or mount that hostd did not make."""
    MOUNT_FAILED = "mount_failed"
    """The backup share did not mount, or the backup account could not write to it; nothing was changed."""
    MOUNT_BUSY = "mount_busy"
    """The backup share is in use and could not be unmounted; nothing was removed."""
    SHARE_NOT_CONFIGURED = "share_not_configured"
    """No backup share is set up to disconnect."""
    INVALID_BACKUP = "invalid_backup"
    """An uploaded backup this master does not restore: not a backup, a schema version it does not
    read, a weakened key derivation, over 64 MiB, or a passphrase that does not open it (``field``
    names what: ``(document)``, ``file``, ``schemaVersion``, ``passphrase`` ...)."""
    INVALID_AUDIT_QUERY = "invalid_audit_query"
    """A reading of the audit log with a time that does not parse, since after until, a limit out of
    range or a cursor the log did not give out (``field`` names it: ``since``, ``until``, ``limit``,
    ``cursor``)."""
    HTTP_ERROR = "http_error"
    """Any other HTTP error, with its own status."""

    @property
    def http_status(self) -> int:
        """The HTTP status the admin API answers this code with (``http_error``: 400, or its own)."""
        return _HTTP_STATUS[self]


_HTTP_STATUS: Final = {
    AdminErrorCode.INVALID_REQUEST: 400,
    AdminErrorCode.HTTP_ERROR: 400,
    AdminErrorCode.UNAUTHORIZED: 401,
    AdminErrorCode.CROSS_ORIGIN: 403,
    AdminErrorCode.MODEL_NOT_FOUND: 404,
    AdminErrorCode.NODE_NOT_FOUND: 404,
    AdminErrorCode.KEY_NOT_FOUND: 404,
    AdminErrorCode.ROUTE_NOT_FOUND: 404,
    AdminErrorCode.METHOD_NOT_ALLOWED: 405,
    AdminErrorCode.MODEL_EXISTS: 409,
    AdminErrorCode.JOB_CONFLICT: 409,
    AdminErrorCode.MODEL_NOT_READY: 409,
    AdminErrorCode.UNKNOWN_PRESET: 422,
    AdminErrorCode.UNKNOWN_TUNING_STEP: 422,
    AdminErrorCode.PRESET_NOT_FOR_MODEL: 422,
    AdminErrorCode.JOB_NOT_FOUND: 404,
    AdminErrorCode.SERVED_NAME_TAKEN: 409,
    AdminErrorCode.NODE_EXISTS: 409,
    AdminErrorCode.NODE_HAS_MODELS: 409,
    AdminErrorCode.LOCAL_NODE: 409,
    AdminErrorCode.ADMISSION_REFUSED: 409,
    AdminErrorCode.START_CONFLICT: 409,
    AdminErrorCode.FENCED: 409,
    AdminErrorCode.START_LANE_BUSY: 409,
    AdminErrorCode.NODE_CONFLICT: 409,
    AdminErrorCode.FEATURE_MISSING: 409,
    AdminErrorCode.DOWNLOAD_NOT_FOUND: 404,
    AdminErrorCode.SOURCE_NOT_FOUND: 404,
    AdminErrorCode.SOURCE_NEEDS_TOKEN: 403,
    AdminErrorCode.DOWNLOAD_CONFLICT: 409,
    AdminErrorCode.INSUFFICIENT_SPACE: 409,
    AdminErrorCode.MODEL_FILES_MISSING: 409,
    AdminErrorCode.INVALID_IMAGE_REFERENCE: 422,
    AdminErrorCode.INVALID_BACKUP: 422,
    AdminErrorCode.PULL_NOT_FOUND: 404,
    AdminErrorCode.PULL_CONFLICT: 409,
    AdminErrorCode.BACKUP_NOT_FOUND: 404,
    AdminErrorCode.PASSPHRASE_TOO_SHORT: 422,
    AdminErrorCode.BACKUP_FAILED: 409,
    AdminErrorCode.REQUEST_TOO_LARGE: 413,
    AdminErrorCode.SPEC_REJECTED: 422,
    AdminErrorCode.UNKNOWN_GPU: 422,
    AdminErrorCode.TOO_MANY_ATTEMPTS: 429,
    AdminErrorCode.INTERNAL_ERROR: 500,
    AdminErrorCode.STORAGE_ERROR: 500,
    AdminErrorCode.NODE_REFUSED: 502,
    AdminErrorCode.BAD_GATEWAY: 502,
    AdminErrorCode.LOG_STREAM_FAILED: 502,
    AdminErrorCode.NODE_UNREACHABLE: 503,
    AdminErrorCode.NODE_TIMEOUT: 504,
    AdminErrorCode.INSUFFICIENT_STORAGE: 507,
    AdminErrorCode.CONFIRM: 403,
    AdminErrorCode.DENIED: 403,
    AdminErrorCode.NOT_WHITELISTED: 403,
    AdminErrorCode.WHITELIST_REFUSED: 403,
    AdminErrorCode.SERVICE_NOT_FOUND: 404,
    AdminErrorCode.HOSTD_UNAVAILABLE: 503,
    AdminErrorCode.MOUNT_CONFLICT: 409,
    AdminErrorCode.MOUNT_FAILED: 422,
    AdminErrorCode.MOUNT_BUSY: 422,
    AdminErrorCode.SHARE_NOT_CONFIGURED: 404,
    AdminErrorCode.INVALID_AUDIT_QUERY: 422,
}


class AdminError(WireModel):
    """The inner object of an admin API refusal; the subject fields are present when known.

    Attributes:
        code: an :class:`AdminErrorCode` value (kept as text, so a newer master's code still reads).
        message: what went wrong, for people.
        field: the offending field or query parameter (wire spelling), for ``invalid_request`` and the
            other refusals of one field (``model_exists``, ``served_name_taken``).
        node_id: the node the refusal is about (the one that did not answer, refused, or is unknown).
        model_id: the model the refusal is about (the unknown one, the one already serving a name).
        key_id: the unknown API key, for ``key_not_found``.
        served_name: the served name asked for, for ``served_name_taken``.
        retry_after_s: the seconds to wait before trying again, for ``too_many_attempts``.
        job_id: the job in the way, for ``job_conflict``.
        pattern: the node's deny pattern that refused a host service, for ``denied``.
    """

    code: str
    message: str
    field: str | None = None
    node_id: str | None = None
    model_id: str | None = None
    key_id: str | None = None
    served_name: str | None = None
    retry_after_s: int | None = None
    job_id: str | None = None
    pattern: str | None = None


class AdminErrorBody(WireModel):
    """Every admin API error response: ``{"error": {"code", "message"[, "field", "nodeId", ...]}}``."""

    error: AdminError


def admin_error_body(
    code: AdminErrorCode | str,
    message: str,
    *,
    field: str | None = None,
    node_id: str | None = None,
    model_id: str | None = None,
    key_id: str | None = None,
    served_name: str | None = None,
    retry_after_s: int | None = None,
    job_id: str | None = None,
    pattern: str | None = None,
) -> dict[str, Any]:
    """The JSON body of an admin API refusal (send it with ``code.http_status``).

    The subjects are :class:`AdminError`'s optional fields; one that is ``None`` is left out.
    """
    error = AdminError(
        code=str(code),
        message=message,
        field=field,
        node_id=node_id,
        model_id=model_id,
        key_id=key_id,
        served_name=served_name,
        retry_after_s=retry_after_s,
        job_id=job_id,
        pattern=pattern,
    )
    return AdminErrorBody(error=error).to_wire()
