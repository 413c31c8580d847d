"""The container driver: vLLM models as Docker containers named ``ss-{id}``."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import httpx

from mirbad_protocol import ContainerLaunch, ModelState, ModelStatus, ProcessLaunch, RuntimeKind
from mirbad_protocol.support import single_errors

from ._container_spec import (
    CONTAINER_PORT,
    MODEL_LABEL,
    PORT_LABEL,
    ContainerDriverConfig,
    container_name,
    create_arguments,
)
from ._container_state import (
    ContainerPhase,
    container_labels_of,
    container_phase,
    status_from_container,
)
from ._docker_calls import (
    close_stream,
    create_and_start,
    ensure_image,
    ensure_network,
    log_text,
    model_containers,
    next_chunk,
    read_logs,
    read_stats,
    remove_container,
)
from ._docker_gateway import DockerGateway
from ._docker_ports import ports_taken_by_containers
from ._driver import FAILURE_LOG_LINES, RuntimeDriver
from ._gpu_attribution import GpuOwner
from ._memory_usage import container_memory_bytes
from ._ports import loopback_port_free, lowest_free_port
from .exceptions import LaunchRejectedError, ModelNotFoundError

if TYPE_CHECKING:
    import docker
    from docker import DockerClient
else:
    from ._lazy_modules import docker  # imported at its first use: see the module

__all__ = ["ContainerDriver"]

logger = logging.getLogger(__name__)

_MAX_LOG_FOLLOWERS = 32
"""Log streams read at once; more followers wait for a free reader."""


class ContainerDriver(RuntimeDriver):
    """Runs each model as the Docker container ``ss-{id}`` and reads its state back from Docker.

    Docker is the only record: every status is derived from the container list and a ``GET /health``
    at the moment it is asked for, so a new driver instance (after an agent restart) sees exactly what
    the old one left running. The driver itself only remembers which starts and stops are in flight.

    Args:
        config: where models, caches, ports and the network are on this node.
        docker_client: a docker-py client to use (the driver closes it); by default one is created
            on first use with ``version="auto"``.
        http: the client for health checks (the driver does not close one passed in).
    """

    def __init__(
        self,
        config: ContainerDriverConfig,
        *,
        docker_client: DockerClient | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self._config = config
        self._docker = DockerGateway(config.docker_url, config.docker_timeout_s, docker_client)
        self._owns_http = http is None
        # Health checks go straight to loopback or the container network, never through a proxy.
        self._http = http or httpx.AsyncClient(timeout=config.health_timeout_s, trust_env=False)
        self._start_lock = anyio.Lock()
        self._followers = anyio.CapacityLimiter(_MAX_LOG_FOLLOWERS)
        self._starting: set[str] = set()
        self._stopping: set[str] = set()
        # Only for naming a model that has no container right now; never read as its state.
        self._names: dict[str, tuple[str, RuntimeKind]] = {}

    @property
    def config(self) -> ContainerDriverConfig:
        """The settings this driver runs with."""
        return self._config

    async def adopt(self) -> list[ModelStatus]:
        """Report the model containers found in Docker; nothing else is needed to take them over."""
        statuses = await self.list_statuses()
        for status in statuses:
            logger.info("adopted model %s (%s, port %s)", status.id, status.state, status.port)
        return statuses

    async def start(self, spec: ContainerLaunch | ProcessLaunch) -> ModelStatus:
        """Create and start ``ss-{id}``, pulling the image and creating the network when missing."""
        if not isinstance(spec, ContainerLaunch):
            raise LaunchRejectedError("the container driver runs container launch specs only")
        model_id = spec.model_id
        if model_id in self._stopping:
            raise LaunchRejectedError(f"model {model_id} is stopping; start it again once it has stopped")
        self._names[model_id] = (spec.served_name, spec.runtime)
        async with self._start_lock:
            self._starting.add(model_id)
            try:
                attrs = await self._launch(spec)
            finally:
                self._starting.discard(model_id)
        return await self._status_of(attrs)

    async def stop(self, model_id: str) -> None:
        """Stop the container (SIGTERM, then SIGKILL after the stop timeout) and remove it."""
        self._stopping.add(model_id)
        try:
            deadline = self._config.stop_timeout_s + self._config.docker_timeout_s
            await self._docker.call(
                f"stop model {model_id}", lambda client: self._stop_all(client, model_id), timeout_s=deadline
            )
        finally:
            self._stopping.discard(model_id)

    async def status(self, model_id: str) -> ModelStatus:
        """Read the model's state from Docker (and its ``/health`` when it runs)."""
        attrs = await self._inspect(model_id)
        if attrs is None:
            return self._absent_status(model_id)
        return await self._status_of(attrs)

    async def list_statuses(self) -> list[ModelStatus]:
        """Every model container Docker has, plus models whose start or stop is in flight."""
        network = self._config.network
        containers = await self._docker.call(
            "list model containers", lambda client: model_containers(client, network=network)
        )
        statuses: dict[str, ModelStatus] = {}

        async def read(attrs: Mapping[str, Any]) -> None:
            status = await self._status_of(attrs)
            statuses[status.id] = status

        with single_errors():
            async with anyio.create_task_group() as group:
                for attrs in containers:
                    group.start_soon(read, attrs)
        for model_id in (self._starting | self._stopping) - statuses.keys():
            statuses[model_id] = self._absent_status(model_id)
        return [statuses[model_id] for model_id in sorted(statuses)]

    async def logs(self, model_id: str, tail: int = 200) -> list[str]:
        """The container's last ``tail`` log lines (stdout and stderr)."""
        attrs = await self._require(model_id)
        return await self._log_tail(attrs["Id"], tail)

    async def follow_logs(self, model_id: str, tail: int = 0) -> AsyncGenerator[str, None]:
        """Stream the container's log lines until it exits or the caller stops iterating."""
        attrs = await self._require(model_id)
        stream = await self._docker.call(
            f"open the log stream of {model_id}",
            lambda client: client.api.logs(attrs["Id"], stream=True, follow=True, tail=max(tail, 0)),
        )
        pending = b""
        try:
            while True:
                # Followers wait on their own threads, so they never starve the Docker calls.
                chunk = await anyio.to_thread.run_sync(
                    next_chunk, stream, abandon_on_cancel=True, limiter=self._followers
                )
                if chunk is None:
                    break
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    yield log_text(line)
            if pending:
                yield log_text(pending)
        finally:
            close_stream(stream)

    async def upstream_url(self, model_id: str) -> str:
        """``http://ss-{id}:8000/`` on the container network, else the published loopback port."""
        return self._upstream_of(container_labels_of(await self._require(model_id)))

    async def memory_bytes(self, model_id: str) -> int | None:
        """The container's memory usage less its inactive page cache (telemetry); None when not running."""
        attrs = await self._inspect(model_id)
        if attrs is None or container_phase(attrs) is not ContainerPhase.RUNNING:
            return None
        stats = await self._docker.call(
            f"read the memory of {model_id}", lambda client: read_stats(client, attrs["Id"])
        )
        return container_memory_bytes(stats)

    async def gpu_owner(self, model_id: str) -> GpuOwner | None:
        """The running container's full id (its processes' cgroups name it); None when not running."""
        attrs = await self._inspect(model_id)
        if attrs is None or container_phase(attrs) is not ContainerPhase.RUNNING:
            return None
        return GpuOwner(container_id=str(attrs["Id"]))

    async def aclose(self) -> None:
        """Close the Docker and HTTP clients; the containers keep running."""
        await self._docker.aclose()
        if self._owns_http:
            await self._http.aclose()

    async def _launch(self, spec: ContainerLaunch) -> Mapping[str, Any]:
        existing = await self._inspect(spec.model_id)
        if existing is not None:
            phase = container_phase(existing)
            if phase in (ContainerPhase.RUNNING, ContainerPhase.STARTING):
                return existing
            if phase is ContainerPhase.STOPPING:
                raise LaunchRejectedError(f"the container of {spec.model_id} is still being removed")
            await self._docker.call(
                f"remove the old container of {spec.model_id}",
                lambda client: remove_container(client, existing["Id"]),
            )
        await self._docker.call(
            f"provide image {spec.image}",
            lambda client: ensure_image(client, spec.image),
            timeout_s=self._config.pull_timeout_s,
        )
        await self._docker.call(
            f"provide network {self._config.network}",
            lambda client: ensure_network(client, self._config.network),
        )
        port = await self._docker.call("list the ports in use", self._choose_port)
        return await self._docker.call(
            f"create the container of {spec.model_id}",
            lambda client: create_and_start(client, create_arguments(spec, self._config, port)),
        )

    def _choose_port(self, client: DockerClient) -> int:
        taken = ports_taken_by_containers(client.api.containers(all=True))
        port = lowest_free_port(
            self._config.port_range_start, self._config.port_range_end, taken, loopback_port_free
        )
        if port is None:
            raise LaunchRejectedError(
                f"no free host port in {self._config.port_range_start}-{self._config.port_range_end}"
            )
        return port

    def _stop_all(self, client: DockerClient, model_id: str) -> None:
        # Every container carrying the model's label goes, so a duplicate left by a crash cannot linger.
        for attrs in model_containers(client, model_id, network=self._config.network):
            try:
                client.api.stop(attrs["Id"], timeout=self._config.stop_timeout_s)
            except docker.errors.NotFound:
                continue
            remove_container(client, attrs["Id"])

    async def _inspect(self, model_id: str) -> Mapping[str, Any] | None:
        containers = await self._docker.call(
            f"find the container of {model_id}",
            lambda client: model_containers(client, model_id, network=self._config.network),
        )
        # Docker lists newest first; a running container wins over a leftover one.
        running = [attrs for attrs in containers if container_phase(attrs) is ContainerPhase.RUNNING]
        candidates = running or containers
        return candidates[0] if candidates else None

    async def _require(self, model_id: str) -> Mapping[str, Any]:
        attrs = await self._inspect(model_id)
        if attrs is None:
            raise ModelNotFoundError(model_id)
        return attrs

    async def _status_of(self, attrs: Mapping[str, Any]) -> ModelStatus:
        phase = container_phase(attrs)
        labels = container_labels_of(attrs)
        healthy = phase is ContainerPhase.RUNNING and await self._healthy(self._upstream_of(labels))
        tail = await self._log_tail(attrs["Id"], FAILURE_LOG_LINES) if phase is ContainerPhase.DEAD else []
        status = status_from_container(attrs, healthy=healthy, log_tail=tail)
        self._names[status.id] = (status.served_name, status.runtime)
        if status.id in self._stopping:
            return status.model_copy(update={"state": ModelState.STOPPING, "error": None})
        return status

    def _absent_status(self, model_id: str) -> ModelStatus:
        served_name, runtime = self._names.get(model_id, ("", "vllm"))
        state = ModelState.STOPPED
        if model_id in self._stopping:
            state = ModelState.STOPPING
        elif model_id in self._starting:
            state = ModelState.STARTING
        return ModelStatus(id=model_id, served_name=served_name, state=state, runtime=runtime)

    def _upstream_of(self, labels: Mapping[str, str]) -> str:
        if self._config.use_container_network:
            return f"http://{container_name(labels[MODEL_LABEL])}:{CONTAINER_PORT}/"
        return f"http://{self._config.upstream_host}:{labels.get(PORT_LABEL, '')}/"

    async def _healthy(self, upstream: str) -> bool:
        try:
            response = await self._http.get(upstream + "health", timeout=self._config.health_timeout_s)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def _log_tail(self, container_id: str, tail: int) -> list[str]:
        if tail <= 0:
            return []
        raw = await self._docker.call(
            "read container logs", lambda client: read_logs(client, container_id, tail)
        )
        return [log_text(line) for line in raw.splitlines()]
