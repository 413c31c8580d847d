"""The exceptions of mirbad_runtime.

The tree of its exceptions, each under its first base here (one with more bases names them all)::

    MirbadRuntimeError(MirbadError)
    ├── StateWriteError
    ├── GgufFormatError(MirbadRuntimeError, ValueError)
    ├── RuntimeUnavailableError
    ├── HostContainerNotFoundError(MirbadRuntimeError, LookupError)
    ├── LaunchRejectedError
    │   ├── UnknownExecutableError(LaunchRejectedError, LookupError)
    │   ├── ExecutableIntegrityError
    │   └── ModelPathRejectedError
    ├── ImagePullError
    ├── ImagePullConflictError
    ├── ImagePullNotFoundError(MirbadRuntimeError, LookupError)
    ├── ModelNotFoundError(MirbadRuntimeError, LookupError)
    ├── MeminfoFormatError(MirbadRuntimeError, ValueError)
    ├── GpuProbeError
    ├── MetricsReadError
    ├── MemoryAdmissionError
    ├── StartConflictError
    ├── DuplicateExecutableError(MirbadRuntimeError, ValueError)
    ├── DpapiError
    ├── InstanceKeyError
    ├── DownloadError
    │   ├── DownloadRefusedError(DownloadError, ValueError)
    │   ├── SourceNotFoundError
    │   ├── SourceNeedsTokenError
    │   ├── SourceUnavailableError
    │   │   └── SourceStalledError
    │   ├── InsufficientSpaceError
    │   ├── DownloadConflictError
    │   ├── DownloadNotFoundError(DownloadError, KeyError)
    │   └── DownloadVerificationError
    ├── HostdUnavailableError
    └── HostdRefusedError
"""

from __future__ import annotations

from pathlib import Path

from mirbad_protocol import MirbadError

__all__ = [
    "DownloadConflictError",
    "DownloadError",
    "DownloadNotFoundError",
    "DownloadRefusedError",
    "DownloadVerificationError",
    "GgufFormatError",
    "HostContainerNotFoundError",
    "HostdRefusedError",
    "HostdUnavailableError",
    "ImagePullConflictError",
    "ImagePullError",
    "ImagePullNotFoundError",
    "InsufficientSpaceError",
    "LaunchRejectedError",
    "MirbadRuntimeError",
    "ModelNotFoundError",
    "RuntimeUnavailableError",
    "SourceNeedsTokenError",
    "SourceNotFoundError",
    "SourceStalledError",
    "SourceUnavailableError",
    "StateWriteError",
]


class MirbadRuntimeError(MirbadError):
    """Root of the exceptions of :mod:`mirbad_runtime`."""


class StateWriteError(MirbadRuntimeError):
    """A state file of the node (the process records) could not be written; the change itself was made.

    The file keeps its previous content and the change is written with the next write that succeeds.

    Attributes:
        path: the file.
        disk_full: whether the disk (or the quota) is full.
    """

    def __init__(self, path: Path, message: str, *, disk_full: bool) -> None:
        super().__init__(message)
        self.path = path
        self.disk_full = disk_full


class GgufFormatError(MirbadRuntimeError, ValueError):
    """A file that is not a GGUF file the reader accepts.

    Wrong magic, an unsupported version or byte order, a truncated header, or a count or length beyond
    the reader's bounds (a corrupt or hostile header) all raise it before anything large is allocated.

    Attributes:
        path: the file that was read.
        reason: what is wrong with it, including the byte offset where that helps.
    """

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"{path}: not a readable GGUF file: {reason}")
        self.path = Path(path)
        self.reason = reason


class RuntimeUnavailableError(MirbadRuntimeError):
    """The runtime (dockerd, the process host) could not be reached or did not answer in time."""


class HostContainerNotFoundError(MirbadRuntimeError, LookupError):
    """No container of that name that is a host service (Mirbad's own, model and download ones are not).

    Attributes:
        name: the container name that was asked for.
    """

    def __init__(self, name: str) -> None:
        super().__init__(f"no container {name!r} that is a host service on this node")
        self.name = name


class LaunchRejectedError(MirbadRuntimeError):
    """A launch spec this driver cannot run here: wrong kind, no free port, refused by the runtime."""


class ImagePullError(MirbadRuntimeError):
    """A model's container image is missing locally and could not be pulled.

    Attributes:
        image: the image reference from the launch spec.
        reason: what the registry or Docker said.
    """

    def __init__(self, image: str, reason: str) -> None:
        super().__init__(f"could not pull image {image}: {reason}")
        self.image = image
        self.reason = reason


class ImagePullConflictError(MirbadRuntimeError):
    """A pull of this image reference is running already (one pull per image at a time).

    Attributes:
        image: the reference asked for.
    """

    def __init__(self, image: str) -> None:
        super().__init__(f"a pull of {image} is running already")
        self.image = image


class ImagePullNotFoundError(MirbadRuntimeError, LookupError):
    """No image pull job with that id.

    Attributes:
        pull_id: the id asked for.
    """

    def __init__(self, pull_id: str) -> None:
        super().__init__(f"no image pull {pull_id!r}")
        self.pull_id = pull_id


class ModelNotFoundError(MirbadRuntimeError, LookupError):
    """No running or failed instance of the model exists on this node (for its logs, its upstream).

    Attributes:
        model_id: the model that was asked for.
    """

    def __init__(self, model_id: str) -> None:
        super().__init__(f"model {model_id} has no instance on this node")
        self.model_id = model_id


# ---------------------------------------------------------------- probes, metrics and admission

__all__ += [
    "GpuProbeError",
    "MeminfoFormatError",
    "MemoryAdmissionError",
    "MetricsReadError",
    "StartConflictError",
]


class MeminfoFormatError(MirbadRuntimeError, ValueError):
    """A meminfo text without the ``MemTotal`` / ``MemAvailable`` lines (in kB) the memory probe reads.

    Attributes:
        reason: what is missing or wrong.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(f"unreadable meminfo: {reason}")
        self.reason = reason


class GpuProbeError(MirbadRuntimeError):
    """nvidia-smi is installed but failed, timed out or printed rows the probe cannot read.

    A node without nvidia-smi is not an error (it has no discrete GPUs); this one means the GPUs are
    there but cannot be counted, so admission must not guess.

    Attributes:
        reason: what went wrong, with nvidia-smi's own message where it gave one.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(f"GPU probe failed: {reason}")
        self.reason = reason


class MetricsReadError(MirbadRuntimeError):
    """A model's metrics page could not be fetched or is not Prometheus text.

    Attributes:
        reason: what went wrong.
        url: the page that was scraped, when the text came from one.
    """

    def __init__(self, reason: str, *, url: str | None = None) -> None:
        super().__init__(f"cannot read metrics{f' from {url}' if url else ''}: {reason}")
        self.reason = reason
        self.url = url


class MemoryAdmissionError(MirbadRuntimeError):
    """A start refused because the model's memory budget does not fit (``force`` overrides it).

    Attributes:
        model_id: the model that was to start.
        requested_gib: its budget.
        available_gib: the memory it was compared with before the reserve: the system's available
            memory (plus the running instance's budget on a restart) or, on a discrete GPU, the GPU's
            total minus the budgets already placed on it.
        reserve_gib: the memory admission always keeps free.
        gpu_uuid: the GPU that lacked room, or None for system memory.
    """

    def __init__(
        self,
        model_id: str,
        requested_gib: float,
        available_gib: float,
        reserve_gib: float,
        *,
        gpu_uuid: str | None = None,
    ) -> None:
        where = f" on GPU {gpu_uuid}" if gpu_uuid else ""
        headroom = max(available_gib - reserve_gib, 0.0)
        super().__init__(
            f"model {model_id} needs {requested_gib:.1f} GiB{where}, {headroom:.1f} GiB available "
            f"after the {reserve_gib:.1f} GiB reserve"
        )
        self.model_id = model_id
        self.requested_gib = requested_gib
        self.available_gib = available_gib
        self.reserve_gib = reserve_gib
        self.gpu_uuid = gpu_uuid


class StartConflictError(MirbadRuntimeError):
    """A start refused because another model is still starting on this unified-memory node.

    Attributes:
        model_id: the model that was to start.
        starting_model_id: the model still loading; retry once it is Ready or has failed.
    """

    def __init__(self, model_id: str, starting_model_id: str) -> None:
        super().__init__(
            f"model {model_id} cannot start while model {starting_model_id} is still starting "
            "(one start at a time on unified memory)"
        )
        self.model_id = model_id
        self.starting_model_id = starting_model_id


class UnknownExecutableError(LaunchRejectedError, LookupError):
    """A launch spec names an executable (name and version) that this node's catalogue does not list.

    Attributes:
        name: the logical executable name asked for.
        version: the version asked for.
    """

    def __init__(self, name: str, version: str) -> None:
        super().__init__(f"executable {name} {version} is not in this node's catalogue")
        self.name = name
        self.version = version


class ExecutableIntegrityError(LaunchRejectedError):
    """A catalogued executable that cannot be trusted: missing, not executable, or another SHA-256.

    Attributes:
        name: the logical executable name.
        version: its catalogued version.
        path: the configured path.
        reason: what the check found.
    """

    def __init__(self, name: str, version: str, path: str | Path, reason: str) -> None:
        super().__init__(f"executable {name} {version} at {path} failed verification: {reason}")
        self.name = name
        self.version = version
        self.path = Path(path)
        self.reason = reason


class DuplicateExecutableError(MirbadRuntimeError, ValueError):
    """The node's configuration lists one executable name and version twice.

    Attributes:
        name: the duplicated logical name.
        version: the duplicated version.
    """

    def __init__(self, name: str, version: str) -> None:
        super().__init__(f"executable {name} {version} is listed more than once")
        self.name = name
        self.version = version


__all__ += ["DpapiError"]


class DpapiError(MirbadRuntimeError):
    """Windows' DPAPI refused to seal or open a blob.

    The blob is another account's, was changed or damaged, or was sealed with other entropy.
    """


class InstanceKeyError(MirbadRuntimeError):
    """A model instance's API key that cannot be stored, read back or trusted.

    Attributes:
        model_id: the model whose key it is.
        reason: what is wrong.
    """

    def __init__(self, model_id: str, reason: str) -> None:
        super().__init__(f"instance key of model {model_id}: {reason}")
        self.model_id = model_id
        self.reason = reason


class ModelPathRejectedError(LaunchRejectedError):
    """A launch spec's model path that does not lead to a file inside one of the node's model roots.

    Attributes:
        model_path: the relative path from the spec.
        reason: why it was refused (absolute, ``..``, a symlink leading out, missing).
    """

    def __init__(self, model_path: str, reason: str) -> None:
        super().__init__(f"model path {model_path!r} refused: {reason}")
        self.model_path = model_path
        self.reason = reason


class DownloadError(MirbadRuntimeError):
    """Root of the download failures: a refused request, a source that cannot be read, a bad file."""


class DownloadRefusedError(DownloadError, ValueError):
    """A download request the agent will not run (no such model root, a hostile file path ...).

    Attributes:
        field: the request field at fault.
        reason: why it is refused.
    """

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class SourceNotFoundError(DownloadError):
    """The hub or registry has no such repository, revision, model or tag.

    Attributes:
        field: the request field that names what is missing.
        reason: what the source said.
    """

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class SourceNeedsTokenError(DownloadError):
    """The hub refused the repository without a (valid) token (its 401 or 403).

    Attributes:
        field: always ``token``.
    """

    field = "token"


class SourceUnavailableError(DownloadError):
    """The hub or registry could not be reached or answered with a server error."""


class SourceStalledError(SourceUnavailableError):
    """A transfer fell below the rate floor (a drip-fed or silent body): not retried, the job fails."""


class InsufficientSpaceError(DownloadError):
    """The model root has less free space than the download still needs.

    Attributes:
        needed_bytes: what the download still has to write.
        free_bytes: what the root's file system has free.
        shortfall_bytes: the difference.
    """

    field = "root"

    def __init__(self, root: Path | str, needed_bytes: int, free_bytes: int) -> None:
        self.needed_bytes = needed_bytes
        self.free_bytes = free_bytes
        self.shortfall_bytes = needed_bytes - free_bytes
        super().__init__(
            f"not enough free space in {root}: the download needs {needed_bytes} bytes, "
            f"{free_bytes} are free ({self.shortfall_bytes} bytes short)"
        )


class DownloadConflictError(DownloadError):
    """The target folder exists or another job writes it, or the job's state does not allow the action.

    Attributes:
        field: what is in conflict (``folder``, the job's ``state``); None when neither.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class DownloadNotFoundError(DownloadError, KeyError):
    """No download job with that id.

    Attributes:
        download_id: the id asked for.
    """

    def __init__(self, download_id: str) -> None:
        super().__init__(f"no download job {download_id!r}")
        self.download_id = download_id

    def __str__(self) -> str:
        return f"no download job {self.download_id!r}"


class DownloadVerificationError(DownloadError):
    """A downloaded file whose size or sha256 is not what the source announced; it is removed.

    Attributes:
        path: the file inside the job's folder.
        reason: what did not match.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}; the file was removed")
        self.path = path
        self.reason = reason


class HostdUnavailableError(MirbadRuntimeError):
    """hostd cannot be reached over its socket, did not answer in time, or answered outside its contract.

    A node without hostd (a container-only node, a Mac without the LaunchDaemon) raises it on every
    call; the agent then falls back (per-model memory from budgets) instead of failing.
    """


class HostdRefusedError(MirbadRuntimeError):
    """hostd refused a request with its error envelope.

    Attributes:
        status: the HTTP status.
        code: the :class:`mirbad_protocol.hostd.HostdErrorCode` value (text, so a newer hostd's code reads).
        message: hostd's own message.
        field: the offending field of an ``invalid_request``.
        pattern: the deny pattern of a ``denied``.
    """

    def __init__(
        self, status: int, code: str, message: str, *, field: str | None = None, pattern: str | None = None
    ) -> None:
        super().__init__(f"hostd refused ({status} {code}): {message}")
        self.message = message
        self.status = status
        self.code = code
        self.field = field
        self.pattern = pattern
