"""Docker containers as host services: list them with their memory, act on them, set their restart policy.

Every container of the node's dockerd is one, except Mirbad's own (named ``mirbad``), model containers
(labelled ``mirbad.model``) and download containers (``mirbad.download``): those belong to Mirbad's own
lifecycle, and the Services page must not start or stop them behind its back. Memory comes from
one-shot stats, usage less the inactive page cache (as ``docker stats`` shows it). Which containers may
be touched at all is the master's whitelist; this module only refuses Mirbad's own kinds. GPU memory
comes from the GPU's compute processes, summed per container by their cgroups (see
:mod:`mirbad_runtime._gpu_processes`), read once per listing before Docker is asked.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import anyio

from mirbad_protocol.agent import (
    DOWNLOAD_LABEL,
    MIRBAD_CONTAINER_NAME,
    ContainerAction,
    ContainerActionResult,
    ContainerService,
    ContainerServiceList,
    RestartPolicy,
    RestartPolicyName,
)
from mirbad_protocol.support import single_errors

from ._container_spec import MODEL_LABEL
from ._docker_calls import read_stats
from ._docker_gateway import DockerGateway
from ._gpu_attribution import container_gpu_bytes
from ._gpu_processes import GpuProcessProbe
from ._memory_usage import container_memory_bytes
from .exceptions import HostContainerNotFoundError, MirbadRuntimeError, RuntimeUnavailableError

if TYPE_CHECKING:
    import docker
    from docker import DockerClient
else:
    from ._lazy_modules import docker  # imported at its first use: see the module

__all__ = ["STATS_CONCURRENCY", "ContainerServices", "is_host_service_container"]

logger = logging.getLogger(__name__)

_POLICIES: Final[frozenset[str]] = frozenset({"no", "always", "unless-stopped", "on-failure"})
_STOP_TIMEOUT_S: Final = 30  # Docker's own default is 10 s; a database deserves longer to flush

STATS_CONCURRENCY: Final = 8
"""How many one-shot stats a listing reads at once (each takes dockerd a cgroup read; dozens in a row
made a listing of a busy node slower than its bound)."""


def is_host_service_container(name: str, labels: Mapping[str, str] | None) -> bool:
    """Whether a container may be a host service: not Mirbad's own, not a model's, not a download's."""
    marks = labels or {}
    return name != MIRBAD_CONTAINER_NAME and MODEL_LABEL not in marks and DOWNLOAD_LABEL not in marks


class ContainerServices:
    """The node's containers as host services; every docker-py call off the event loop, under a deadline.

    Args:
        base_url: the Docker endpoint; None reads ``DOCKER_HOST`` (else the local socket).
        timeout_s: the agent's one Docker bound (``docker.timeout_s``): of a whole listing, of an
            inspect, and docker-py's HTTP timeout; an action gets the container's stop grace on top.
        gpu: lists the GPU's compute processes (each container's GPU memory); None: GPU memory unknown.
        gpu_timeout_s: the bound of that read; past it GPU memory is unknown.
        stats_concurrency: how many containers' one-shot stats a listing reads at once.
        docker_client: an existing docker-py client instead of one made here (this object closes it).
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        timeout_s: float = 30.0,
        gpu: GpuProcessProbe | None = None,
        gpu_timeout_s: float = 5.0,
        stats_concurrency: int = STATS_CONCURRENCY,
        docker_client: DockerClient | None = None,
    ) -> None:
        self._gateway = DockerGateway(base_url, timeout_s, docker_client)
        self._gpu = gpu
        self._gpu_timeout_s = gpu_timeout_s
        self._timeout_s = timeout_s
        # Docker's stop waits for the container to exit, up to its grace period.
        self._action_timeout_s = timeout_s + _STOP_TIMEOUT_S
        self._stats_slots = anyio.CapacityLimiter(stats_concurrency)

    @property
    def timeout_s(self) -> float:
        """The bound of a listing or an inspect (and, plus the stop grace, of an action)."""
        return self._timeout_s

    async def aclose(self) -> None:
        """Close the gateway's client."""
        await self._gateway.aclose()

    async def containers(self) -> ContainerServiceList:
        """Every container that can be a host service, by name.

        Raises:
            RuntimeUnavailableError: Docker did not answer in time or could not be reached.
        """
        gpu = await self._gpu_bytes()
        try:
            with anyio.fail_after(self._timeout_s):
                found = await self._gateway.call("list containers", _inspect_all)
                memory = await self._memory_of([details["Id"] for details in found if _running(details)])
        except TimeoutError:
            bound = self._timeout_s
            raise RuntimeUnavailableError(f"Docker did not list containers within {bound:g} s") from None
        services = [_described(details, memory.get(details["Id"]), gpu) for details in found]
        return ContainerServiceList(containers=sorted(services, key=lambda service: service.name))

    async def container(self, name: str) -> ContainerService:
        """One container by name.

        Raises:
            HostContainerNotFoundError: no such container, or one of Mirbad's own kinds.
            RuntimeUnavailableError: Docker did not answer.
        """
        gpu = await self._gpu_bytes()
        return await self._gateway.call("inspect a container", lambda client: _one(client, name, gpu))

    async def act(self, name: str, action: ContainerAction) -> ContainerActionResult:
        """Start, stop or restart the container (synchronous: Docker answers when it is done).

        Raises:
            HostContainerNotFoundError: no such container, or one of Mirbad's own kinds.
            RuntimeUnavailableError: Docker did not answer or refused the action.
        """

        def work(client: DockerClient) -> ContainerActionResult:
            container_id = _one(client, name).id
            if action == "start":
                client.api.start(container_id)
            elif action == "stop":
                client.api.stop(container_id, timeout=_STOP_TIMEOUT_S)
            else:
                client.api.restart(container_id, timeout=_STOP_TIMEOUT_S)
            return ContainerActionResult(name=name, action=action, result="ok")

        return await self._gateway.call(f"{action} a container", work, timeout_s=self._action_timeout_s)

    async def set_restart_policy(self, name: str, policy: RestartPolicy) -> ContainerService:
        """Set the container's restart policy (its autostart) with ``docker update``; the container after.

        Raises:
            HostContainerNotFoundError: no such container, or one of Mirbad's own kinds.
            RuntimeUnavailableError: Docker did not answer or refused the update.
        """

        def work(client: DockerClient) -> ContainerService:
            container_id = _one(client, name).id
            retries = policy.maximum_retry_count if policy.name == "on-failure" else 0
            # Any: the stubs' TypedDict for it is private to docker-py's stubs.
            restart: Any = {"Name": policy.name, "MaximumRetryCount": retries}
            client.api.update_container(container_id, restart_policy=restart)
            return _one(client, name, gpu)

        gpu = await self._gpu_bytes()
        return await self._gateway.call("update a container", work, timeout_s=self._action_timeout_s)

    async def _memory_of(self, container_ids: list[str]) -> dict[str, int | None]:
        # One-shot stats answer only after dockerd reads the container's cgroup: read them side by side.
        memory: dict[str, int | None] = {}

        async def read(container_id: str) -> None:
            async with self._stats_slots:
                stats = await self._gateway.call(
                    "read a container's stats", lambda client: read_stats(client, container_id)
                )
            memory[container_id] = container_memory_bytes(stats)

        with single_errors():
            async with anyio.create_task_group() as group:
                for container_id in container_ids:
                    group.start_soon(read, container_id)
        return memory

    async def _gpu_bytes(self) -> Mapping[str, int | None] | None:
        # None: GPU memory unknown (no probe, no GPU, or the read failed or was slow); else by container id.
        if self._gpu is None:
            return None
        with anyio.move_on_after(self._gpu_timeout_s):
            try:
                reading = await self._gpu.read()
            except MirbadRuntimeError as exc:
                logger.debug("no GPU memory for the container listing: %s", exc)
                return None
            return container_gpu_bytes(reading.processes) if reading is not None else None
        return None


def _inspect_all(client: DockerClient) -> list[Mapping[str, Any]]:
    found: list[Mapping[str, Any]] = []
    for summary in client.api.containers(all=True):
        name = _name(summary.get("Names"))
        if name is None or not is_host_service_container(name, summary.get("Labels")):
            continue
        try:
            found.append(client.api.inspect_container(summary["Id"]))
        except docker.errors.NotFound:
            continue  # removed between the listing and the inspect
    return found


def _one(client: DockerClient, name: str, gpu: Mapping[str, int | None] | None = None) -> ContainerService:
    try:
        details = client.api.inspect_container(name)
    except docker.errors.NotFound:
        raise HostContainerNotFoundError(name) from None
    # Docker also resolves an id prefix; only the exact name names a host service.
    if details.get("Name", "").lstrip("/") != name:
        raise HostContainerNotFoundError(name)
    labels = (details.get("Config") or {}).get("Labels")
    if not is_host_service_container(name, labels):
        raise HostContainerNotFoundError(name)
    memory = container_memory_bytes(read_stats(client, details["Id"])) if _running(details) else None
    return _described(details, memory, gpu)


def _running(details: Mapping[str, Any]) -> bool:
    return bool((details.get("State") or {}).get("Running"))


def _described(
    details: Mapping[str, Any], memory: int | None, gpu: Mapping[str, int | None] | None
) -> ContainerService:
    state = details.get("State") or {}
    running = _running(details)
    # A running container with no compute process holds no GPU memory: 0, not unknown.
    gpu_memory = gpu.get(details["Id"], 0) if running and gpu is not None else None
    return ContainerService(
        name=str(details.get("Name", "")).lstrip("/"),
        id=details["Id"],
        image=str((details.get("Config") or {}).get("Image", "")),
        state=str(state.get("Status", "unknown")),
        status=_status_text(state),
        restart_policy=_policy((details.get("HostConfig") or {}).get("RestartPolicy")),
        memory_bytes=memory if running else None,
        gpu_memory_bytes=gpu_memory,
    )


def _policy(raw: object) -> RestartPolicy:
    if not isinstance(raw, Mapping):
        return RestartPolicy()
    name = raw.get("Name") or "no"
    retries = raw.get("MaximumRetryCount")
    if name not in _POLICIES:
        name = "no"  # an unknown policy of a newer Docker reads as none rather than failing the list
    count = retries if isinstance(retries, int) and retries >= 0 else 0
    return RestartPolicy(name=_policy_name(str(name)), maximum_retry_count=count)


def _policy_name(name: str) -> RestartPolicyName:
    if name == "always":
        return "always"
    if name == "unless-stopped":
        return "unless-stopped"
    if name == "on-failure":
        return "on-failure"
    return "no"


def _status_text(state: Mapping[str, Any]) -> str:
    if state.get("Running"):
        return f"running since {state.get('StartedAt', '')}"
    if state.get("Status") == "exited":
        return f"exited ({state.get('ExitCode', '?')})"
    return str(state.get("Status", ""))


def _name(names: object) -> str | None:
    if isinstance(names, list) and names and isinstance(names[0], str):
        return names[0].lstrip("/")
    return None
