"""The container driver's settings and the Docker create arguments it derives from a launch spec."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from mirbad_protocol import ContainerLaunch

__all__ = ["MODEL_LABEL", "ContainerDriverConfig", "container_name"]

MODEL_LABEL: Final = "mirbad.model"
"""The label that marks a model container; its value is the model id."""
SERVED_NAME_LABEL: Final = "mirbad.served-name"
PORT_LABEL: Final = "mirbad.port"
CONFIG_HASH_LABEL: Final = "mirbad.config-hash"
BUDGET_LABEL: Final = "mirbad.budget-gib"
RUNTIME_LABEL: Final = "mirbad.runtime"
CONTAINER_PORT: Final = 8000
"""The port the model server listens on inside its container (vLLM's default)."""


@dataclass(frozen=True, kw_only=True)
class ContainerDriverConfig:
    """How the container driver runs models on this node.

    Attributes:
        models_host_path: host folder mounted read-only at ``/models`` (launch specs name files under it).
        cache_host_path: host folder mounted at ``/root/.cache`` (compiled kernels, Hugging Face cache).
        network: Docker network every model joins, with the alias ``ss-{id}``; created when missing.
        port_range_start: the lowest loopback host port a model may be published on.
        port_range_end: the highest one (inclusive).
        gpus: request every NVIDIA GPU (or the spec's UUIDs) for the container; turn it off on a node
            whose Docker has no NVIDIA runtime, where such a request fails the start.
        use_container_network: reach models at ``http://ss-{id}:8000/`` over the Docker network (the
            agent itself runs in a container on that network) instead of the published loopback port.
        upstream_host: the host name of the published port when ``use_container_network`` is off.
        entrypoint: replaces the image's entrypoint; ``None`` keeps it (vLLM images run ``vllm serve``,
            and the spec's argv becomes its arguments).
        docker_url: the Docker endpoint (``unix:///var/run/docker.sock``); ``None`` reads DOCKER_HOST.
        docker_timeout_s: bound on every ordinary Docker call.
        pull_timeout_s: bound on pulling a missing image.
        stop_timeout_s: seconds Docker waits after SIGTERM before it kills a model.
        health_timeout_s: bound on one ``GET /health`` of a running model.
    """

    models_host_path: Path
    cache_host_path: Path
    network: str = "mirbad"
    port_range_start: int = 8100
    port_range_end: int = 8999
    gpus: bool = True
    use_container_network: bool = False
    upstream_host: str = "127.0.0.1"
    entrypoint: tuple[str, ...] | None = None
    docker_url: str | None = None
    docker_timeout_s: float = 30.0
    pull_timeout_s: float = 1800.0
    stop_timeout_s: int = 30
    health_timeout_s: float = 2.0

    def __post_init__(self) -> None:
        if not 1 <= self.port_range_start <= self.port_range_end <= 65535:
            raise ValueError(
                f"port range {self.port_range_start}-{self.port_range_end} is not an ascending range of ports"
            )
        if self.stop_timeout_s < 0:
            raise ValueError("stop_timeout_s cannot be negative")


def container_name(model_id: str) -> str:
    """The container (and network alias) of a model: ``ss-{id}``."""
    return f"ss-{model_id}"


def create_arguments(spec: ContainerLaunch, config: ContainerDriverConfig, port: int) -> dict[str, Any]:
    """The keyword arguments of docker-py's ``containers.create`` for ``spec`` on host port ``port``.

    Plain JSON data only, so the result can be compared with a golden file.
    """
    name = container_name(spec.model_id)
    arguments: dict[str, Any] = {
        "image": spec.image,
        "command": list(spec.argv),
        "name": name,
        "labels": container_labels(spec, port),
        "environment": dict(spec.env),
        "ports": {f"{CONTAINER_PORT}/tcp": ("127.0.0.1", port)},
        "volumes": {
            str(config.models_host_path): {"bind": "/models", "mode": "ro"},
            str(config.cache_host_path): {"bind": "/root/.cache", "mode": "rw"},
        },
        "network": config.network,
        "networking_config": {config.network: {"Aliases": [name]}},
        "restart_policy": {"Name": "no"},
        "ipc_mode": "host",
        "detach": True,
    }
    if config.entrypoint is not None:
        arguments["entrypoint"] = list(config.entrypoint)
    device_request = _gpu_request(spec, config)
    if device_request is not None:
        arguments["device_requests"] = [device_request]
    return arguments


def container_labels(spec: ContainerLaunch, port: int) -> dict[str, str]:
    """The spec's own labels plus the driver's, which a spec can never override."""
    return {
        **spec.labels,
        MODEL_LABEL: spec.model_id,
        SERVED_NAME_LABEL: spec.served_name,
        PORT_LABEL: str(port),
        CONFIG_HASH_LABEL: spec.config_hash,
        BUDGET_LABEL: repr(spec.budget_gib),
        RUNTIME_LABEL: spec.runtime,
    }


def _gpu_request(spec: ContainerLaunch, config: ContainerDriverConfig) -> dict[str, Any] | None:
    if not config.gpus or spec.gpus.mode == "none":
        return None
    if spec.gpus.mode == "uuids":
        return {"Driver": "nvidia", "DeviceIDs": list(spec.gpus.uuids), "Capabilities": [["gpu"]]}
    return {"Driver": "nvidia", "Count": -1, "Capabilities": [["gpu"]]}
