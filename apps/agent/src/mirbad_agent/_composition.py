"""Everything the agent's routes and background tasks work with, built once and closed once."""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import anyio
import httpx

from mirbad_protocol import GpuMemory
from mirbad_protocol.agent import AgentInfo, FeatureFlag
from mirbad_router import UPSTREAM_KEEPALIVE_S, create_upstream_client
from mirbad_runtime import (
    AdmissionController,
    ContainerServices,
    ExecutableCatalog,
    GpuProcessProbe,
    MemoryProbe,
    NodeImages,
    TelemetryRing,
)
from mirbad_runtime.downloads import DownloadManager

from ._boot import boot_id
from ._fence import EpochFence
from ._folders import ModelFolders
from ._host_services import HostServicesGateway
from ._lifecycle import ModelLifecycle
from ._runtimes import NodeRuntimes
from ._telemetry_loop import TelemetryCollector

__all__ = ["AgentServices", "GpuProbe", "agent_version"]

GpuProbe = Callable[[], Awaitable[Sequence[GpuMemory]]]
"""An async source of the node's discrete GPUs (``NvidiaSmiProbe().query``)."""

# What every agent offers beyond its runtimes.
_BASE_FEATURES = (
    FeatureFlag.GGUF_INSPECT,
    FeatureFlag.ADMISSION_GPU_BUDGETS,
    FeatureFlag.TELEMETRY_RING,
    FeatureFlag.LOGS_FOLLOW,
    FeatureFlag.FOLDERS_LIST,
    FeatureFlag.MODEL_FILES,
    FeatureFlag.LLAMA_SERVER_BUILDS,
)
_HTTP_TIMEOUT_S = 10.0


def agent_version() -> str:
    """The installed version of the ``mirbad-agent`` distribution."""
    try:
        return importlib.metadata.version("mirbad-agent")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


class AgentServices:
    """The agent's parts: drivers, admission, probes, the telemetry ring and its collector, folders.

    Use it as an async context manager (or call :meth:`aclose`): closing it closes the drivers and
    the HTTP clients it created, while the models keep running.

    Args:
        runtimes: the composed drivers.
        memory: the memory probe (admission and the memory route read it).
        node_name: the node's name.
        gpu_probe: the discrete-GPU source; None for a node without one.
        model_roots: the folders listings and GGUF reads resolve under.
        catalog: the executable catalogue, checked once in the background at start-up.
        telemetry_interval_s: seconds between telemetry passes.
        telemetry_capacity: samples kept per model.
        start_slot_timeout_s: how long an admitted start may hold the one-start slot.
        http: the client for telemetry scrapes (created and closed here when None).
        proxy_client: the client of the reverse proxy (created and closed here when None).
        proxy_idle_timeout_s: end a proxied request whose model sends nothing this long, before its
            response headers or mid-stream (None: never; the agent's settings always give one).
        version: the reported agent version (the installed one when None).
        downloads: the download jobs (run in the app's lifespan); None on a node that offers none.
        host_services: the gateway to the node's hostd (probed in the app's lifespan); None: no hostd.
        host_containers: the node's Docker containers as host services; None on a node without Docker.
        gpu_processes: lists the GPU's compute processes for each model's GPU memory in telemetry;
            None: telemetry carries no GPU memory.
        gpu_present: whether the node has an NVIDIA GPU (blocking): where it has and its processes
            cannot be listed, telemetry carries each model's budget instead; None: it has none.
        models_mount: the folder the container driver mounts at ``/models``: looked in, besides the
            model roots, when the master asks whether a model's files are on the node.
        images: the node's Docker images and image pulls (run in the app's lifespan); None without Docker.
        hub_cache: the Hugging Face hub cache of the model containers: a model folder's ``config.json``
            is looked for there last (the tuning gates' drafter given as a hub id).
        fence: the highest master epoch seen, which every command passes (None: commands are not
            fenced; tests of single routes).
    """

    def __init__(
        self,
        *,
        runtimes: NodeRuntimes,
        memory: MemoryProbe,
        node_name: str,
        gpu_probe: GpuProbe | None = None,
        model_roots: Sequence[Path] = (),
        catalog: ExecutableCatalog | None = None,
        telemetry_interval_s: float = 5.0,
        telemetry_capacity: int = 360,
        start_slot_timeout_s: float = 1800.0,
        http: httpx.AsyncClient | None = None,
        proxy_client: httpx.AsyncClient | None = None,
        proxy_idle_timeout_s: float | None = None,
        version: str | None = None,
        downloads: DownloadManager | None = None,
        host_services: HostServicesGateway | None = None,
        host_containers: ContainerServices | None = None,
        gpu_processes: GpuProcessProbe | None = None,
        gpu_present: Callable[[], bool] | None = None,
        models_mount: Path | None = None,
        images: NodeImages | None = None,
        hub_cache: Path | None = None,
        fence: EpochFence | None = None,
    ) -> None:
        self.runtimes = runtimes
        self.memory = memory
        self.node_name = node_name
        self.gpu_probe = gpu_probe
        self.catalog = catalog
        self.version = version or agent_version()
        self.telemetry_interval_s = telemetry_interval_s
        self.proxy_idle_timeout_s = proxy_idle_timeout_s
        self.folders = ModelFolders(model_roots, mount=models_mount, hub_cache=hub_cache)
        self.ring = TelemetryRing(telemetry_capacity)
        self.admission = AdmissionController(memory.snapshot, start_slot_timeout_s=start_slot_timeout_s)
        self.lifecycle = ModelLifecycle(runtimes, self.admission, self.ring)
        self._owned: list[httpx.AsyncClient] = []
        # Health checks and metrics scrapes reach the same model servers as the proxy: the same reuse bound.
        polls = httpx.Limits(keepalive_expiry=UPSTREAM_KEEPALIVE_S)
        self.http = http or self._own(
            httpx.AsyncClient(timeout=_HTTP_TIMEOUT_S, trust_env=False, limits=polls)
        )
        self.proxy_client = proxy_client or self._own(create_upstream_client())
        self.downloads = downloads
        self.host_services = host_services
        self.host_containers = host_containers
        self.gpu_processes = gpu_processes
        self.images = images
        self.fence = fence
        self.telemetry = TelemetryCollector(
            runtimes, self.lifecycle, self.ring, self.http, gpu=gpu_processes, gpu_present=gpu_present
        )

    def info(self) -> AgentInfo:
        """What this agent reports at ``GET /agent/v1/runtimes``."""
        features = [*self.runtimes.runtime_features(), *_BASE_FEATURES]
        if self.downloads is not None:
            features += [
                FeatureFlag.DOWNLOADS_HF_NATIVE,
                FeatureFlag.DOWNLOADS_OLLAMA,
                FeatureFlag.DOWNLOADS_SIZE,
            ]
        if self.host_services is not None and self.host_services.available:
            features.append(FeatureFlag.HOST_SERVICES)
            if self.host_services.backup_mount:
                features.append(FeatureFlag.HOST_BACKUP_MOUNT)
        if self.host_containers is not None:
            features.append(FeatureFlag.HOST_CONTAINERS)
        if self.images is not None:
            features.append(FeatureFlag.IMAGES_PULL)
        return AgentInfo(
            node_name=self.node_name,
            version=self.version,
            runtimes=self.runtimes.runtimes,
            features=[flag.value for flag in features],
            model_roots=[str(root) for root in self.folders.roots],
            boot_id=boot_id(),
            cpu_count=_cpu_count(),
        )

    async def gpus(self) -> list[GpuMemory]:
        """The discrete GPUs now (none without a GPU probe)."""
        return list(await self.gpu_probe()) if self.gpu_probe is not None else []

    async def aclose(self) -> None:
        """Close the drivers and the clients created here; running models are left running."""
        with anyio.CancelScope(shield=True):
            await self.runtimes.aclose()
            if self.host_services is not None:
                await self.host_services.aclose()
            if self.host_containers is not None:
                await self.host_containers.aclose()
            if self.images is not None:
                await self.images.aclose()
            for client in self._owned:
                await client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _own(self, client: httpx.AsyncClient) -> httpx.AsyncClient:
        self._owned.append(client)
        return client


def _cpu_count() -> int | None:
    # The cores this process may use (a container or a cgroup's affinity), not the host's total.
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or None
    return os.cpu_count()
