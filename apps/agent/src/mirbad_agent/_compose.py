"""What an agent composes: every driver the machine supports, from its settings.

* The container driver when ``docker.enabled`` is on and dockerd answers at start-up.
* The process driver when ``process.enabled`` is on, the platform has a process host and an
  instance-key protector (owner-only files on POSIX, DPAPI on Windows), and at least one model root
  is configured.

A Linux PC therefore runs vLLM containers and llama-server side by side. A node with neither still
starts: it logs one warning, reports no runtime and refuses every launch with 422 spec_rejected.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from mirbad_protocol import ExecutableRef
from mirbad_protocol.agent import ContainerRuntimeInfo, ProcessRuntimeInfo
from mirbad_runtime import (
    CatalogedExecutable,
    ContainerDriver,
    ContainerDriverConfig,
    ContainerServices,
    Dpapi,
    DpapiInstanceKeyProtector,
    ExecutableCatalog,
    FileInstanceKeyProtector,
    GpuProcessProbe,
    HostdGpuProcessProbe,
    InstanceKeyProtector,
    MemoryProbe,
    NodeImages,
    NvidiaSmiProbe,
    NvidiaSmiProcessProbe,
    PreferredGpuProcessProbe,
    ProcessDriver,
    ProcessDriverConfig,
    ProcessHost,
    nvidia_gpu_present,
    platform_process_host,
    probe_docker_socket,
)
from mirbad_runtime.downloads import DownloadManager, NetworkLimits

from ._composition import AgentServices
from ._config import AgentSettings, DockerSettings
from ._dpapi import Win32Dpapi
from ._fence import EpochFence
from ._host_services import HostServicesGateway
from ._llama_server import LlamaServerFinder, find_llama_server, with_found_llama_server
from ._runtimes import ComposedDriver, NodeRuntimes

if TYPE_CHECKING:
    from docker import DockerClient

__all__ = [
    "compose_services",
    "connect_docker",
    "container_driver",
    "platform_key_protector",
    "process_driver",
]

logger = logging.getLogger(__name__)

_STATE_DIR_MODE = 0o700

# Stand-ins for the platform's process host and key protector (tests).
HostFactory = Callable[[], ProcessHost | None]
KeysFactory = Callable[[AgentSettings], InstanceKeyProtector | None]
KEYS_FOLDER = "keys"


def platform_key_protector(
    settings: AgentSettings, *, platform: str = sys.platform, dpapi: Callable[[], Dpapi] = Win32Dpapi
) -> InstanceKeyProtector | None:
    """The instance-key protector of ``platform``, or None where there is none (then no process driver).

    Owner-only files on POSIX; on Windows, where file modes protect nothing, keys sealed with DPAPI
    for the agent's account.

    Args:
        settings: the agent's settings (the keys live under its state folder).
        platform: a ``sys.platform`` value; tests pass ``"win32"`` to compose a Windows agent on Linux.
        dpapi: builds the DPAPI calls on Windows (pywin32's; a stand-in in tests).
    """
    folder = settings.state_dir / KEYS_FOLDER
    if platform == "win32":
        return DpapiInstanceKeyProtector(folder, dpapi())
    return FileInstanceKeyProtector(folder) if os.name == "posix" else None


async def compose_services(
    settings: AgentSettings,
    *,
    process_host: HostFactory = platform_process_host,
    key_protector: KeysFactory = platform_key_protector,
    llama_server: LlamaServerFinder | None = None,
) -> AgentServices:
    """Build the agent's services from ``settings``: the drivers, the probes and everything above them.

    Args:
        settings: the agent's settings.
        process_host: returns the platform's process host, or None where it has none.
        key_protector: returns the instance-key protector, or None where it has none.
        llama_server: finds the llama-server to catalogue when the settings name none
            (:func:`find_llama_server` with the ``llama_server`` setting when None).
    """
    finder = llama_server or partial(find_llama_server, configured=settings.llama_server)
    settings = await with_found_llama_server(settings, finder)
    settings.state_dir.mkdir(mode=_STATE_DIR_MODE, parents=True, exist_ok=True)
    for root in settings.model_roots:
        if not root.is_dir():
            logger.warning("model root %s is not a folder; nothing under it can be listed or run", root)
    reasons: list[str] = []
    drivers: list[ComposedDriver] = []
    for built in (
        await container_driver(settings),
        process_driver(settings, process_host(), key_protector(settings)),
    ):
        if isinstance(built, str):
            reasons.append(built)
        else:
            drivers.append(built)
    _report(drivers, reasons)
    gpu_probe = NvidiaSmiProbe(settings.nvidia_smi).query if settings.nvidia_smi else None
    memory = MemoryProbe(
        reserve_gib=settings.memory_reserve_gib, gpu_probe=gpu_probe, fake_total_gib=settings.fake_total_gib
    )
    catalog = next((composed.catalog for composed in drivers if composed.catalog is not None), None)
    gateway = HostServicesGateway(settings.hostd_socket) if settings.hostd_socket else None
    gpu_processes = _gpu_processes(settings, gateway)
    return AgentServices(
        runtimes=NodeRuntimes(drivers),
        memory=memory,
        node_name=settings.node_name,
        gpu_probe=gpu_probe,
        model_roots=settings.model_roots,
        catalog=catalog,
        telemetry_interval_s=settings.telemetry_interval_s,
        telemetry_capacity=settings.telemetry_capacity,
        start_slot_timeout_s=settings.start_slot_timeout_s,
        proxy_idle_timeout_s=settings.proxy_idle_timeout_s,
        downloads=_download_manager(settings),
        host_services=gateway,
        host_containers=_container_services(settings, drivers, gpu_processes),
        gpu_processes=gpu_processes,
        gpu_present=partial(nvidia_gpu_present, settings.nvidia_smi) if settings.nvidia_smi else None,
        models_mount=settings.models_host_path if settings.docker.enabled else None,
        images=_node_images(settings, drivers),
        # Mounted at /root/.cache in every model container: vLLM's default hub cache lies below it.
        hub_cache=settings.cache_host_path / "huggingface" / "hub" if settings.docker.enabled else None,
        fence=EpochFence(settings.state_dir),
    )


def _gpu_processes(settings: AgentSettings, gateway: HostServicesGateway | None) -> GpuProcessProbe | None:
    # hostd first: as root on the host it reads every pid's cgroup, also for an agent in a container.
    probes: list[GpuProcessProbe] = []
    if gateway is not None:
        probes.append(HostdGpuProcessProbe(gateway.client))
    if settings.nvidia_smi:
        probes.append(NvidiaSmiProcessProbe(settings.nvidia_smi))
    return PreferredGpuProcessProbe(probes) if probes else None


def _container_services(
    settings: AgentSettings, drivers: list[ComposedDriver], gpu: GpuProcessProbe | None
) -> ContainerServices | None:
    # Only where the container driver composed, i.e. dockerd answered at start-up.
    if not any(info.kind == "container" for composed in drivers for info in composed.runtimes):
        return None
    return ContainerServices(settings.docker.url, timeout_s=settings.docker.timeout_s, gpu=gpu)


def _node_images(settings: AgentSettings, drivers: list[ComposedDriver]) -> NodeImages | None:
    # As the host containers: only where the container driver composed (dockerd answered).
    if not any(info.kind == "container" for composed in drivers for info in composed.runtimes):
        return None
    options = settings.docker
    return NodeImages(
        options.url,
        timeout_s=options.timeout_s,
        pull_timeout_s=options.pull_timeout_s,
        network=options.network,
    )


def _download_manager(settings: AgentSettings) -> DownloadManager | None:
    options = settings.downloads
    if not options.enabled or not settings.model_roots:
        return None
    return DownloadManager(
        settings.model_roots,
        settings.state_dir / "downloads",
        hf_endpoint=options.hf_endpoint,
        ollama_registry=options.ollama_registry,
        max_concurrent=options.max_concurrent,
        space_margin_bytes=options.space_margin_mib << 20,
        retry_window_s=options.retry_window_minutes * 60,
        limits=NetworkLimits(
            connect_timeout_s=options.connect_timeout_s,
            read_timeout_s=options.read_timeout_s,
            plan_timeout_s=options.plan_timeout_s,
            max_info_bytes=options.max_info_bytes,
            min_bytes_per_second=options.min_bytes_per_second,
            rate_window_s=options.rate_window_s,
            max_planning=options.max_planning,
        ),
    )


def _report(drivers: list[ComposedDriver], reasons: list[str]) -> None:
    if not drivers:
        logger.warning(
            "no runtime is available on this node (%s); it reports no runtimes and refuses every launch",
            "; ".join(reasons),
        )
        return
    for reason in reasons:
        logger.info("%s", reason)
    offered = ", ".join(f"{info.runtime} ({info.kind})" for d in drivers for info in d.runtimes)
    logger.info("runtimes: %s", offered)


async def container_driver(settings: AgentSettings) -> ComposedDriver | str:
    """The container driver, or why there is none (Docker disabled, not answering, no models folder)."""
    options = settings.docker
    if not options.enabled:
        return "the container driver is off (docker.enabled = false)"
    models = settings.models_host_path
    if models is None:
        return "the container driver needs a model root or docker.models_host_path"
    try:
        client = await connect_docker(options)
    except Exception as exc:
        # Any failure to reach dockerd means no container driver; the reason goes in the warning.
        return f"Docker does not answer ({type(exc).__name__}: {exc}), so no container driver"
    settings.cache_host_path.mkdir(parents=True, exist_ok=True)
    config = ContainerDriverConfig(
        models_host_path=models,
        cache_host_path=settings.cache_host_path,
        network=options.network,
        port_range_start=options.port_range_start,
        port_range_end=options.port_range_end,
        gpus=options.gpus,
        use_container_network=options.use_container_network,
        upstream_host=options.upstream_host,
        entrypoint=tuple(options.entrypoint) if options.entrypoint is not None else None,
        docker_url=options.url,
        docker_timeout_s=options.timeout_s,
        pull_timeout_s=options.pull_timeout_s,
        stop_timeout_s=options.stop_timeout_s,
    )
    info = ContainerRuntimeInfo(runtime="vllm", network=options.network)
    return ComposedDriver(ContainerDriver(config, docker_client=client), (info,))


async def connect_docker(options: DockerSettings) -> DockerClient:
    """A docker-py client that has just answered a ping (API version negotiated), bounded in time.

    Raises:
        TimeoutError: dockerd did not answer within ``options.probe_timeout_s``.
        Exception: whatever docker-py raised for an unreachable or refusing endpoint.
    """
    with anyio.fail_after(options.probe_timeout_s + 1):
        # docker-py blocks; a hung socket is abandoned to its own timeout rather than awaited.
        return await anyio.to_thread.run_sync(_connect, options, abandon_on_cancel=True)


def _connect(options: DockerSettings) -> DockerClient:
    # docker-py leaks the socket of a unix connection that fails; try the socket with one we close.
    probe_docker_socket(options.url, options.probe_timeout_s)
    # version="auto" asks the daemon for its API version, which is the answer the probe wants.
    client = _client(options)
    # Later calls get the ordinary bound (docker-py adds a stop's own grace period to it).
    client.api.timeout = math.ceil(options.timeout_s)
    return client


def _client(options: DockerSettings) -> DockerClient:
    # Imported here: docker-py (with requests) is ~7 MB an agent whose container driver is off never needs.
    import docker

    arguments: dict[str, Any] = {"version": "auto", "timeout": math.ceil(options.probe_timeout_s)}
    if options.url:
        return docker.DockerClient(base_url=options.url, **arguments)
    return docker.from_env(**arguments)


def process_driver(
    settings: AgentSettings, host: ProcessHost | None, keys: InstanceKeyProtector | None
) -> ComposedDriver | str:
    """The process driver, or why there is none (off, no process host, no key protector, no root)."""
    options = settings.process
    if not options.enabled:
        return "the process driver is off (process.enabled = false)"
    if host is None:
        return "this platform has no process host, so no process driver"
    if keys is None:
        return "this platform has no instance-key protector, so no process driver"
    if not settings.model_roots:
        return "the process driver needs at least one model root"
    catalog = ExecutableCatalog(
        CatalogedExecutable(name=entry.name, version=entry.version, path=entry.path, sha256=entry.sha256)
        for entry in settings.executables
    )
    config = ProcessDriverConfig(
        state_dir=settings.state_dir,
        model_roots=tuple(settings.model_roots),
        port_range_start=options.port_range_start,
        port_range_end=options.port_range_end,
        stop_timeout_s=options.stop_timeout_s,
        inherit_environment=options.inherit_environment,
    )
    executables = [ExecutableRef(name=entry.name, version=entry.version) for entry in catalog.entries]
    infos = tuple(
        ProcessRuntimeInfo(runtime=runtime, executables=executables) for runtime in options.runtimes
    )
    return ComposedDriver(ProcessDriver(config, host=host, catalog=catalog, keys=keys), infos, catalog)
