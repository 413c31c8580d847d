"""Docker containers as host services: the node agent's wire models and routes for them.

The node agent lists every container of its dockerd except Mirbad's own (named ``mirbad``), model
containers (labelled ``mirbad.model``) and download containers (``mirbad.download``), and starts,
stops, restarts them or sets their restart policy. Which containers may be touched (the whitelist) and
the autostart memory (the policy a container had before autostart was turned off) live on the master.
"""

from __future__ import annotations

import re
from typing import Annotated, Final, Literal

from pydantic import AfterValidator, Field

from ._wire import WireModel

__all__ = [
    "CONTAINER_ACTIONS",
    "DOWNLOAD_LABEL",
    "MIRBAD_CONTAINER_NAME",
    "ROUTE_HOST_CONTAINERS",
    "ROUTE_HOST_CONTAINER_ACTION",
    "ROUTE_HOST_CONTAINER_RESTART_POLICY",
    "ContainerAction",
    "ContainerActionResult",
    "ContainerService",
    "ContainerServiceList",
    "RestartPolicy",
    "RestartPolicyName",
    "container_service_name",
]

ROUTE_HOST_CONTAINERS: Final = "/host/containers"
"""GET: the node's :class:`ContainerServiceList`."""
ROUTE_HOST_CONTAINER_ACTION: Final = "/host/containers/{name:path}/{action}"
"""POST: start, stop or restart one container (:class:`ContainerActionResult`, 202)."""
ROUTE_HOST_CONTAINER_RESTART_POLICY: Final = "/host/containers/{name:path}/restart-policy"
"""PUT :class:`RestartPolicy`: the container's restart policy (its autostart); answers the container."""

DOWNLOAD_LABEL: Final = "mirbad.download"
"""The label of a download job's container: never a host service."""
MIRBAD_CONTAINER_NAME: Final = "mirbad"
"""The name of Mirbad's own container (the master in Docker): never a host service."""

ContainerAction = Literal["start", "stop", "restart"]
"""What ``POST /host/containers/{name}/{action}`` can do."""
CONTAINER_ACTIONS: Final[tuple[ContainerAction, ...]] = ("start", "stop", "restart")
"""Every container action, in the order the Services page offers them."""

RestartPolicyName = Literal["no", "always", "unless-stopped", "on-failure"]
"""Docker's restart policies; every one but ``no`` starts the container with dockerd (autostart)."""

# Docker's own container-name alphabet: no path separator, space or shell metacharacter.
_CONTAINER_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}", re.ASCII)


def container_service_name(value: str) -> str:
    """Check a container name (Docker's alphabet, at most 255 characters).

    Raises:
        ValueError: outside Docker's container-name alphabet or too long.
    """
    if not _CONTAINER_NAME.fullmatch(value):
        raise ValueError("must be a Docker container name: letters, digits and _ . - only, at most 255")
    return value


class RestartPolicy(WireModel):
    """A container's restart policy, as Docker keeps it.

    Attributes:
        name: the policy; ``no`` means no autostart.
        maximum_retry_count: the retries of ``on-failure`` (0: unlimited).
    """

    name: RestartPolicyName = "no"
    maximum_retry_count: Annotated[int, Field(ge=0)] = 0

    @property
    def autostart(self) -> bool:
        """Whether dockerd starts the container when it starts."""
        return self.name != "no"


class ContainerService(WireModel):
    """One container as a host service.

    Attributes:
        name: the container's name (without Docker's leading slash); what the whitelist holds.
        id: its full id (GPU processes name their container by it).
        image: the image it runs.
        state: Docker's state (``running``, ``exited``, ``created``, ``paused`` ...).
        status: Docker's status text (``Up 3 hours``).
        restart_policy: its restart policy (autostart).
        memory_bytes: memory from one-shot stats, usage less the inactive page cache; None when stopped.
        gpu_memory_bytes: the GPU memory of its processes (nvidia-smi's compute apps whose cgroup is
            the container's), summed; 0 when none is on the GPU; None when stopped, on a node without
            an NVIDIA GPU, or when the GPU processes could not be read.
    """

    name: Annotated[str, AfterValidator(container_service_name)]
    id: str
    image: str = ""
    state: str = "unknown"
    status: str = ""
    restart_policy: RestartPolicy = Field(default_factory=RestartPolicy)
    memory_bytes: int | None = None
    gpu_memory_bytes: int | None = None

    @property
    def autostart(self) -> bool:
        """Whether dockerd starts the container when it starts (its restart policy is not ``no``)."""
        return self.restart_policy.autostart


class ContainerServiceList(WireModel):
    """``GET /host/containers``: every container that can be a host service, by name."""

    containers: list[ContainerService] = Field(default_factory=list)


class ContainerActionResult(WireModel):
    """An action Docker carried out (container actions are synchronous, unlike systemd's)."""

    name: str
    action: ContainerAction
    result: Literal["ok"]
