"""The master-agent contract: routes, request and response envelopes, error codes and feature flags.

Every route sits under :data:`AGENT_API_PREFIX` on the node agent (mutual TLS, port
:data:`DEFAULT_AGENT_PORT`). Bodies are the wire models below (camelCase, defaults omitted, unknown
fields ignored, a nested variant keeping its ``kind``); every refusal answers the
:class:`AgentErrorBody` envelope, whose ``code`` tells the master what happened without parsing the
message. The envelope deliberately differs from the OpenAI error shape (no ``type``, no ``param``):
a client can tell an agent refusal from a model's own error coming back through the proxy.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Final, Literal
from urllib.parse import quote

from pydantic import Field

from ._definition import ExecutableRef
from ._host_telemetry import HostGpuSample
from ._launch import LaunchSpec
from ._status import GpuMemory, ModelMetrics, ModelStatus
from ._wire import WireModel

__all__ = [
    "AGENT_API_PREFIX",
    "AGENT_CLIENT_KEEPALIVE_S",
    "AGENT_IDLE_TIMEOUT_S",
    "DEFAULT_AGENT_PORT",
    "LOG_STREAM_MEDIA_TYPE",
    "MAX_MODEL_CONFIG_BYTES",
    "MAX_MODEL_FILES",
    "MAX_PROXY_BODY_BYTES",
    "MAX_REQUEST_BODY_BYTES",
    "ROUTE_FOLDERS",
    "ROUTE_GGUF_INSPECT",
    "ROUTE_GPUS",
    "ROUTE_MEMORY",
    "ROUTE_MODEL",
    "ROUTE_MODELS",
    "ROUTE_MODEL_CONFIG",
    "ROUTE_MODEL_FILES",
    "ROUTE_MODEL_LOGS",
    "ROUTE_MODEL_RESTART",
    "ROUTE_MODEL_START",
    "ROUTE_MODEL_STOP",
    "ROUTE_PROXY",
    "ROUTE_RUNTIMES",
    "ROUTE_TELEMETRY",
    "AgentError",
    "AgentErrorBody",
    "AgentErrorCode",
    "AgentInfo",
    "ContainerRuntimeInfo",
    "FeatureFlag",
    "FolderEntry",
    "FolderListing",
    "GgufInspectRequest",
    "GpuList",
    "LogEnd",
    "LogEvent",
    "LogLine",
    "LogTail",
    "ModelConfigInfo",
    "ModelFile",
    "ModelFileList",
    "ModelFilesRequest",
    "ModelTelemetry",
    "ProcessRuntimeInfo",
    "RestartRequest",
    "RuntimeInfo",
    "StartRequest",
    "StatusList",
    "TelemetrySnapshot",
    "agent_error_body",
    "agent_path",
    "proxy_path",
]

AGENT_API_PREFIX: Final = "/agent/v1"
"""Where every agent route lives: ``https://{node}:9443/agent/v1/...``."""
DEFAULT_AGENT_PORT: Final = 9443
"""The port an agent listens on unless configured otherwise."""
MAX_PROXY_BODY_BYTES: Final = 64 * 1024 * 1024
"""The largest request body the proxy forwards to a model (64 MiB); larger ones get 413."""
MAX_REQUEST_BODY_BYTES: Final = 30_000_000
"""The largest request body every other agent route reads; larger ones get 413."""
AGENT_IDLE_TIMEOUT_S: Final = 30.0
"""How long the agent keeps an idle kept-alive connection open before it closes it."""
AGENT_CLIENT_KEEPALIVE_S: Final = 15.0
"""How long a client of the agent may reuse an idle connection: well inside :data:`AGENT_IDLE_TIMEOUT_S`.

Both were 5 s (httpx's and uvicorn's defaults) while the master polls every 5 s, so now and then a
request went out on a connection the agent was closing that very moment: "Server disconnected", and an
idle node was marked unreachable about every two minutes.
"""
LOG_STREAM_MEDIA_TYPE: Final = "application/x-ndjson"
"""The media type of a followed log: one :data:`LogEvent` JSON object per line."""

# Route paths, relative to AGENT_API_PREFIX; {model_id} is one path segment (see agent_path).
ROUTE_RUNTIMES: Final = "/runtimes"
"""GET: :class:`AgentInfo`, the node's runtimes and feature flags."""
ROUTE_MODELS: Final = "/models"
"""GET: :class:`StatusList`, every model instance the node's runtimes have."""
ROUTE_MODEL: Final = "/models/{model_id}"
"""GET: the model's :class:`~mirbad_protocol.ModelStatus` (Stopped when no instance exists)."""
ROUTE_MODEL_START: Final = "/models/{model_id}/start"
"""POST :class:`StartRequest` (``?force=true`` also forces): admission, then the launch; a ModelStatus."""
ROUTE_MODEL_STOP: Final = "/models/{model_id}/stop"
"""POST (no body): stop and remove the instance; the resulting ModelStatus."""
ROUTE_MODEL_RESTART: Final = "/models/{model_id}/restart"
"""POST :class:`RestartRequest`: stop, then start the (possibly new) spec; a ModelStatus."""
ROUTE_MODEL_LOGS: Final = "/models/{model_id}/logs"
"""GET ``?tail=N``: :class:`LogTail`; with ``&follow=true`` a :data:`LOG_STREAM_MEDIA_TYPE` stream."""
ROUTE_MEMORY: Final = "/node/memory"
"""GET: the node's :class:`~mirbad_protocol.MemorySnapshot` (with its discrete GPUs and reserve)."""
ROUTE_GPUS: Final = "/node/gpus"
"""GET: :class:`GpuList`, what nvidia-smi reports now."""
ROUTE_TELEMETRY: Final = "/telemetry"
"""GET ``?model=ID&since=ISO&limit=N``: :class:`TelemetrySnapshot` from the agent's telemetry ring."""
ROUTE_GGUF_INSPECT: Final = "/gguf/inspect"
"""POST :class:`GgufInspectRequest`: the file's :class:`~mirbad_protocol.agent.GgufInfo`."""
ROUTE_FOLDERS: Final = "/folders"
"""GET ``?root=I&path=REL``: :class:`FolderListing` of a folder under a model root."""
ROUTE_MODEL_FILES: Final = "/model-files"
"""POST :class:`ModelFilesRequest`: :class:`ModelFileList`, whether each path is under a model root."""
ROUTE_MODEL_CONFIG: Final = "/model-config"
"""GET ``?path=REL``: :class:`ModelConfigInfo`, a model folder's ``config.json`` and its weights' size."""
MAX_MODEL_CONFIG_BYTES: Final = 1024 * 1024
"""The largest ``config.json`` :data:`ROUTE_MODEL_CONFIG` reads (real ones are a few KiB)."""
ROUTE_PROXY: Final = "/proxy/{model_id}/{path:path}"
"""Any method: forwarded to the model's own server (``.../proxy/{id}/v1/chat/completions``)."""


class AgentErrorCode(StrEnum):
    """Why an agent refused a request; each code has one HTTP status (:attr:`http_status`)."""

    INVALID_REQUEST = "invalid_request"
    """400: the body or a query parameter breaks the contract (``field`` names it)."""
    PATH_REFUSED = "path_refused"
    """403: a path that is absolute, climbs with ``..`` or leads out of the model roots."""
    MODEL_NOT_FOUND = "model_not_found"
    """404: the model has no instance on this node (logs, proxy, telemetry of an unknown model)."""
    PATH_NOT_FOUND = "path_not_found"
    """404: nothing at that path under the model roots."""
    DOWNLOAD_NOT_FOUND = "download_not_found"
    """404: the agent has no download job with that id."""
    SOURCE_NOT_FOUND = "source_not_found"
    """404: the hub or registry has no such repository, revision, model or tag (``field`` names it)."""
    SERVICE_NOT_FOUND = "service_not_found"
    """404: no container of that name that is a host service (model and download containers are not)."""
    ROUTE_NOT_FOUND = "route_not_found"
    """404: no such agent route (an older agent than the caller expects)."""
    METHOD_NOT_ALLOWED = "method_not_allowed"
    """405: the route exists but not with this method."""
    ADMISSION_REFUSED = "admission_refused"
    """409: the model's memory budget does not fit; start again with ``force`` to override."""
    START_CONFLICT = "start_conflict"
    """409: another model is still starting on unified memory, or the model runs under another runtime."""
    SOURCE_NEEDS_TOKEN = "source_needs_token"  # noqa: S105 - an error code, not a secret
    """403: the hub refused the repository without a (valid) token: "this repository needs a token"."""
    DOWNLOAD_CONFLICT = "download_conflict"
    """409: the target folder exists, another job writes it, or the job is not in a state for that."""
    INSUFFICIENT_SPACE = "insufficient_space"
    """409: the model root has less free space than the download needs (the message names the shortfall)."""
    REQUEST_TOO_LARGE = "request_too_large"
    """413: the body is over the route's limit (64 MiB through the proxy, 30,000,000 bytes elsewhere)."""
    SPEC_REJECTED = "spec_rejected"
    """422: a launch spec this node cannot run (no such runtime, executable, model file, port ...)."""
    GGUF_UNREADABLE = "gguf_unreadable"
    """422: the file is not a GGUF file the reader accepts."""
    CONFIG_UNREADABLE = "config_unreadable"
    """422: a model folder's ``config.json`` is not a JSON object, or is over its size cap."""
    INTERNAL_ERROR = "internal_error"
    """500: a fault in the agent itself (the agent's log has the details)."""
    UPSTREAM_UNREACHABLE = "upstream_unreachable"
    """502: through the proxy, the model's server refused or broke the connection."""
    RUNTIME_UNAVAILABLE = "runtime_unavailable"
    """503: Docker or the process host did not answer."""
    MODEL_NOT_RUNNING = "model_not_running"
    """503 (with Retry-After): through the proxy, the model is known but has no running server."""
    PROBE_FAILED = "probe_failed"
    """503: memory or GPUs could not be read (a wedged nvidia-smi, unreadable meminfo)."""
    UPSTREAM_TIMEOUT = "upstream_timeout"
    """504: through the proxy, the model stayed silent past the agent's idle timeout."""
    HOSTD_UNAVAILABLE = "hostd_unavailable"
    """503: the ``/host/...`` routes on a node whose hostd is missing, silent or off its contract."""
    INVALID_IMAGE_REFERENCE = "invalid_image_reference"
    """422: an image pull names a reference that does not parse (``field`` is ``image``)."""
    PULL_NOT_FOUND = "pull_not_found"
    """404: the agent has no image pull with that id."""
    PULL_CONFLICT = "pull_conflict"
    """409: a pull of the same image reference is running already."""
    INSUFFICIENT_STORAGE = "insufficient_storage"
    """507: the agent's own state file cannot be written, its disk is full (a stop is done all the same)."""
    FENCED = "fenced"
    """409: a command from a master below the highest epoch the agent has seen (both epochs named)."""

    @property
    def http_status(self) -> int:
        """The HTTP status an agent answers this code with."""
        return _HTTP_STATUS[self]


_HTTP_STATUS: Final = {
    AgentErrorCode.INVALID_REQUEST: 400,
    AgentErrorCode.PATH_REFUSED: 403,
    AgentErrorCode.MODEL_NOT_FOUND: 404,
    AgentErrorCode.PATH_NOT_FOUND: 404,
    AgentErrorCode.DOWNLOAD_NOT_FOUND: 404,
    AgentErrorCode.SOURCE_NOT_FOUND: 404,
    AgentErrorCode.SERVICE_NOT_FOUND: 404,
    AgentErrorCode.ROUTE_NOT_FOUND: 404,
    AgentErrorCode.METHOD_NOT_ALLOWED: 405,
    AgentErrorCode.ADMISSION_REFUSED: 409,
    AgentErrorCode.START_CONFLICT: 409,
    AgentErrorCode.SOURCE_NEEDS_TOKEN: 403,
    AgentErrorCode.DOWNLOAD_CONFLICT: 409,
    AgentErrorCode.INSUFFICIENT_SPACE: 409,
    AgentErrorCode.REQUEST_TOO_LARGE: 413,
    AgentErrorCode.SPEC_REJECTED: 422,
    AgentErrorCode.GGUF_UNREADABLE: 422,
    AgentErrorCode.CONFIG_UNREADABLE: 422,
    AgentErrorCode.INTERNAL_ERROR: 500,
    AgentErrorCode.UPSTREAM_UNREACHABLE: 502,
    AgentErrorCode.RUNTIME_UNAVAILABLE: 503,
    AgentErrorCode.MODEL_NOT_RUNNING: 503,
    AgentErrorCode.PROBE_FAILED: 503,
    AgentErrorCode.UPSTREAM_TIMEOUT: 504,
    AgentErrorCode.HOSTD_UNAVAILABLE: 503,
    AgentErrorCode.INVALID_IMAGE_REFERENCE: 422,
    AgentErrorCode.PULL_NOT_FOUND: 404,
    AgentErrorCode.PULL_CONFLICT: 409,
    AgentErrorCode.INSUFFICIENT_STORAGE: 507,
    AgentErrorCode.FENCED: 409,
}


class FeatureFlag(StrEnum):
    """What an agent can do, reported in :attr:`AgentInfo.features`.

    The wire carries plain strings, so a master reads the flags of a newer agent (and ignores those it
    does not know) without failing.
    """

    RUNTIME_VLLM_CONTAINER = "runtime.vllm.container"
    """vLLM models as Docker containers."""
    RUNTIME_LLAMACPP_PROCESS = "runtime.llamacpp.process"
    """llama.cpp's llama-server as native processes."""
    RUNTIME_MLX_PROCESS = "runtime.mlx.process"
    """MLX (``mlx_lm.server``) as native processes."""
    GGUF_INSPECT = "gguf.inspect"
    """GGUF header reads under the model roots."""
    ADMISSION_GPU_BUDGETS = "admission.gpu-budgets"
    """Per-GPU budget admission on discrete GPUs."""
    TELEMETRY_RING = "telemetry.ring"
    """Per-model metrics history with token rates."""
    LOGS_FOLLOW = "logs.follow"
    """Followed logs as a stream of events."""
    FOLDERS_LIST = "folders.list"
    """Folder listings under the model roots."""
    DOWNLOADS_HF_NATIVE = "downloads.hf-native"
    """Download jobs from a Hugging Face hub (or a mirror of one) into the model roots."""
    DOWNLOADS_OLLAMA = "downloads.ollama"
    """Download jobs of Ollama models (the GGUF layer) from an Ollama registry into the model roots."""
    DOWNLOADS_SIZE = "downloads.size"
    """:data:`~mirbad_protocol.downloads.ROUTE_DOWNLOAD_SIZE`: what a download would fetch, asked of its
    source without starting it (a restore preview's sizes)."""
    HOST_SERVICES = "host.services"
    """The ``/host/...`` routes: host services through the node's hostd (reported while hostd answers)."""
    HOST_BACKUP_MOUNT = "host.backup-mount"
    """The ``/host/backup-mount`` routes: the backup share through the node's hostd (while it offers it)."""
    HOST_CONTAINERS = "host.containers"
    """The ``/host/containers`` routes: the node's Docker containers as host services."""
    MODEL_FILES = "model-files.check"
    """:data:`ROUTE_MODEL_FILES`: whether a model's files are on the node, asked before it is started."""
    LLAMA_SERVER_BUILDS = "releases.llama-server"
    """:data:`~mirbad_protocol.releases.ROUTE_LLAMA_SERVER_BUILDS`: the catalogued llama-servers."""
    IMAGES_PULL = "images.pull"
    """:data:`~mirbad_protocol.releases.ROUTE_IMAGES` and the image pull jobs (a node with Docker)."""


class AgentError(WireModel):
    """The inner object of an agent refusal.

    Attributes:
        code: an :class:`AgentErrorCode` value (kept as text, so a newer agent's code still reads).
        message: what went wrong, for people.
        field: the offending field or query parameter, for ``invalid_request``.
        pattern: the deny pattern of a ``denied`` refusal the agent passes on from hostd.
        epoch: for ``fenced``: the highest master epoch the agent has seen.
        request_epoch: for ``fenced``: the epoch the refused command carried (None: it carried none).
    """

    code: str
    message: str
    field: str | None = None
    pattern: str | None = None
    epoch: int | None = None
    request_epoch: int | None = None


class AgentErrorBody(WireModel):
    """Every agent error response: ``{"error": {"code", "message"[, "field"][, "pattern"]}}``."""

    error: AgentError


def agent_error_body(
    code: AgentErrorCode,
    message: str,
    *,
    field: str | None = None,
    epoch: int | None = None,
    request_epoch: int | None = None,
) -> dict[str, Any]:
    """The JSON body of an agent refusal (send it with ``code.http_status``); the epochs are ``fenced``'s."""
    error = AgentError(
        code=code.value, message=message, field=field, epoch=epoch, request_epoch=request_epoch
    )
    return AgentErrorBody(error=error).to_wire()


def agent_path(route: str, **params: str) -> str:
    """The full path of ``route`` (one of the ``ROUTE_*`` constants) with its parameters filled in.

    Each parameter is percent-encoded as one path segment, so a value can never add segments.

    >>> agent_path(ROUTE_MODEL_START, model_id="qwen3-8b")
    '/agent/v1/models/qwen3-8b/start'
    """
    return AGENT_API_PREFIX + route.format(**{key: quote(value, safe="") for key, value in params.items()})


def proxy_path(model_id: str, path: str) -> str:
    """The proxy path that reaches ``path`` (``v1/chat/completions``) on the model's own server."""
    return f"{AGENT_API_PREFIX}/proxy/{quote(model_id, safe='')}/{path.lstrip('/')}"


# ---------------------------------------------------------------- runtimes and feature flags


class ContainerRuntimeInfo(WireModel):
    """A runtime this node runs as Docker containers (vLLM).

    Attributes:
        runtime: the runtime kind (``vllm``).
        network: the Docker network the models join.
    """

    kind: Literal["container"] = "container"
    runtime: str
    network: str | None = None


class ProcessRuntimeInfo(WireModel):
    """A runtime this node runs as native processes (llama.cpp, MLX).

    Attributes:
        runtime: the runtime kind (``llamacpp``, ``mlx``).
        executables: the catalogued executables a launch spec may name.
    """

    kind: Literal["process"] = "process"
    runtime: str
    executables: list[ExecutableRef] = Field(default_factory=list)


RuntimeInfo = Annotated[ContainerRuntimeInfo | ProcessRuntimeInfo, Field(discriminator="kind")]
"""One runtime of a node, told apart by ``kind`` (how it delivers models)."""


class AgentInfo(WireModel):
    """What an agent is and can do: the answer of :data:`ROUTE_RUNTIMES`.

    Attributes:
        node_name: the node's name (its certificate's common name once enrolled).
        version: the agent's version.
        runtimes: the runtimes it can launch; empty on a node with neither Docker nor a process host.
        features: :class:`FeatureFlag` values (plain strings; unknown ones are to be ignored).
        model_roots: the folders launch specs and listings resolve model paths under, in order.
        boot_id: an id of the host's current boot (it changes on every reboot, and for an agent in a
            container with every new container), so the master can tell a rebooted node and relaunch
            what ran there; None where the platform offers none.
        cpu_count: the CPU cores the agent's processes may run on (tuning tries thread counts from
            them); None from an agent that does not say.
    """

    node_name: str
    version: str
    runtimes: list[RuntimeInfo] = Field(default_factory=list)
    features: list[str] = Field(default_factory=list)
    model_roots: list[str] = Field(default_factory=list)
    boot_id: str | None = None
    cpu_count: int | None = None


# ---------------------------------------------------------------- models


class StartRequest(WireModel):
    """The body of :data:`ROUTE_MODEL_START`.

    Attributes:
        spec: what to run; its ``modelId`` must be the one in the path.
        force: skip the memory rules of admission (start conflicts still apply).
    """

    spec: LaunchSpec
    force: bool = False


class RestartRequest(WireModel):
    """The body of :data:`ROUTE_MODEL_RESTART`: the running instance's budget counts as free.

    Attributes:
        spec: what to run from now on (the same spec, or a changed one).
        force: skip the memory rules of admission.
    """

    spec: LaunchSpec
    force: bool = False


class StatusList(WireModel):
    """The answer of :data:`ROUTE_MODELS`: every instance the node's runtimes have, in id order."""

    models: list[ModelStatus] = Field(default_factory=list)


class LogTail(WireModel):
    """The last lines of a model's log (stdout and stderr interleaved), oldest first."""

    model_id: str
    lines: list[str] = Field(default_factory=list)


class LogLine(WireModel):
    """One line of a followed log."""

    kind: Literal["line"] = "line"
    line: str


class LogEnd(WireModel):
    """The last event of a followed log.

    Attributes:
        reason: ``exited`` (the model's process or container ended) or ``error`` (reading failed).
        message: what went wrong, for ``error``.
    """

    kind: Literal["end"] = "end"
    reason: Literal["exited", "error"] = "exited"
    message: str | None = None


LogEvent = Annotated[LogLine | LogEnd, Field(discriminator="kind")]
"""One event of a followed log, told apart by ``kind``."""


# ---------------------------------------------------------------- node


class GpuList(WireModel):
    """The answer of :data:`ROUTE_GPUS`: the discrete GPUs nvidia-smi reports (none on unified memory)."""

    gpus: list[GpuMemory] = Field(default_factory=list)


class ModelTelemetry(WireModel):
    """The kept metrics samples of one model, oldest first; samples after the first carry rates."""

    model_id: str
    samples: list[ModelMetrics] = Field(default_factory=list)


class TelemetrySnapshot(WireModel):
    """The answer of :data:`ROUTE_TELEMETRY`.

    Attributes:
        taken_at: when the agent answered.
        interval_s: how often the agent scrapes each Ready model.
        models: one entry per model with samples, in id order.
        host_samples: the GPU memory of the node's host services per pass, oldest first; only in the
            answer for every model (no ``model`` filter), and empty where no GPU processes were read.
    """

    taken_at: datetime
    interval_s: Annotated[float, Field(gt=0)]
    models: list[ModelTelemetry] = Field(default_factory=list)
    host_samples: list[HostGpuSample] = Field(default_factory=list)


class GgufInspectRequest(WireModel):
    """The body of :data:`ROUTE_GGUF_INSPECT`.

    Attributes:
        path: the file, relative to a model root (``org/model/model-Q4_K_M.gguf``); the roots are
            searched in order, as for a launch spec's ``modelPath``.
    """

    path: Annotated[str, Field(min_length=1)]


class FolderEntry(WireModel):
    """One entry of a folder listing (symlinks are reported as what they lead to).

    Attributes:
        name: the entry's name.
        kind: ``directory`` or ``file``.
        size_bytes: the size of a file.
    """

    name: str
    kind: Literal["directory", "file"]
    size_bytes: Annotated[int, Field(ge=0)] | None = None


class FolderListing(WireModel):
    """The answer of :data:`ROUTE_FOLDERS`.

    Attributes:
        root: the index of the model root in :attr:`AgentInfo.model_roots`.
        path: the listed folder relative to that root (``""`` for the root itself), ``/``-separated.
        entries: directories and files, by name; entries leading out of the root are left out.
        truncated: the folder holds more entries than one listing returns.
    """

    root: Annotated[int, Field(ge=0)] = 0
    path: str = ""
    entries: list[FolderEntry] = Field(default_factory=list)
    truncated: bool = False


MAX_MODEL_FILES: Final = 1_000
"""The most paths one :class:`ModelFilesRequest` asks about."""


class ModelFilesRequest(WireModel):
    """The body of :data:`ROUTE_MODEL_FILES`.

    Attributes:
        paths: files or folders relative to a model root (a launch spec's ``modelPath``, a source's
            folder), looked up as a launch looks up ``modelPath``: every root in order, plus the folder
            the container driver mounts at ``/models``.
    """

    paths: Annotated[list[str], Field(max_length=MAX_MODEL_FILES)] = Field(default_factory=list)


class ModelFile(WireModel):
    """Whether one path of a :class:`ModelFilesRequest` is on the node.

    Attributes:
        path: the path as asked.
        present: a file or folder is there (symlinks followed, never out of the root); a refused path
            (absolute, with ``..``) is not present.
    """

    path: str
    present: bool = False


class ModelConfigInfo(WireModel):
    """The answer of :data:`ROUTE_MODEL_CONFIG`: what the tuning gates read of a Hugging Face folder.

    Attributes:
        path: the folder as asked.
        config: its ``config.json``, parsed (keys as the file has them).
        weights_bytes: the size of its weights: the ``*.safetensors`` files, else the ``*.bin`` ones
            (vLLM loads safetensors when both are there), symlinks followed within the root.
        weights_files: how many files ``weights_bytes`` counts.
    """

    path: str
    config: dict[str, Any] = Field(default_factory=dict)
    weights_bytes: Annotated[int, Field(ge=0)] = 0
    weights_files: Annotated[int, Field(ge=0)] = 0


class ModelFileList(WireModel):
    """The answer of :data:`ROUTE_MODEL_FILES`: one entry per asked path, in the order asked."""

    files: list[ModelFile] = Field(default_factory=list)
