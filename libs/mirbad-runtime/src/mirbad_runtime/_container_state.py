"""Reading a model's status out of Docker's description of its container."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import Enum
from typing import Any

from mirbad_protocol import GpuSelection, ModelState, ModelStatus, RuntimeKind

from ._container_spec import (
    BUDGET_LABEL,
    CONFIG_HASH_LABEL,
    MODEL_LABEL,
    PORT_LABEL,
    RUNTIME_LABEL,
    SERVED_NAME_LABEL,
)
from ._driver import FAILURE_LOG_LINES

# Internal to the drivers: nothing here is part of the package's public API.
__all__: list[str] = []


_RUNTIMES: dict[str, RuntimeKind] = {"vllm": "vllm", "llamacpp": "llamacpp", "mlx": "mlx"}
_FRACTION = re.compile(r"(\.\d{6})\d+")


class ContainerPhase(Enum):
    """What Docker's container state means before the health check is asked."""

    RUNNING = "running"
    """The process runs: Ready once ``/health`` answers 200, Starting until then."""
    STARTING = "starting"
    STOPPING = "stopping"
    DEAD = "dead"
    """The process ended: Failed, with the log tail."""


_PHASES = {
    "running": ContainerPhase.RUNNING,
    "created": ContainerPhase.STARTING,
    "restarting": ContainerPhase.STARTING,
    # A paused model answers nothing, but it has not ended either.
    "paused": ContainerPhase.STARTING,
    "removing": ContainerPhase.STOPPING,
    "exited": ContainerPhase.DEAD,
    "dead": ContainerPhase.DEAD,
}


def container_labels_of(attrs: Mapping[str, Any]) -> dict[str, str]:
    """The labels of an inspected container."""
    return dict((attrs.get("Config") or {}).get("Labels") or {})


def container_phase(attrs: Mapping[str, Any]) -> ContainerPhase:
    """The phase of an inspected container; an unknown Docker state counts as still starting."""
    status = str((attrs.get("State") or {}).get("Status", ""))
    return _PHASES.get(status, ContainerPhase.STARTING)


def status_from_container(
    attrs: Mapping[str, Any], *, healthy: bool, log_tail: Sequence[str] = ()
) -> ModelStatus:
    """The model status of an inspected container.

    Args:
        attrs: ``docker inspect`` output of the container.
        healthy: whether its ``/health`` answered 200 just now (only asked while it runs).
        log_tail: its last log lines, put into the error of a dead container.
    """
    labels = container_labels_of(attrs)
    state = attrs.get("State") or {}
    phase = container_phase(attrs)
    error: str | None = None
    if phase is ContainerPhase.DEAD:
        model_state = ModelState.FAILED
        error = _failure_text(state, log_tail)
    elif phase is ContainerPhase.RUNNING:
        model_state = ModelState.READY if healthy else ModelState.STARTING
    elif phase is ContainerPhase.STOPPING:
        model_state = ModelState.STOPPING
    else:
        model_state = ModelState.STARTING
    return ModelStatus(
        id=labels.get(MODEL_LABEL, ""),
        served_name=labels.get(SERVED_NAME_LABEL, ""),
        state=model_state,
        runtime=_runtime(labels.get(RUNTIME_LABEL)),
        port=_int_or_none(labels.get(PORT_LABEL)),
        error=error,
        config_hash=labels.get(CONFIG_HASH_LABEL),
        budget_gib=_float_or_none(labels.get(BUDGET_LABEL)),
        started_at=_docker_time(state.get("StartedAt")),
        argv=_command(attrs),
        gpus=gpus_of_container(attrs),
    )


def gpus_of_container(attrs: Mapping[str, Any]) -> GpuSelection | None:
    """The GPUs an inspected container was given, read from its device requests; None for all of them.

    This is what admission charges an adopted container to: without it a container the agent did not
    start in this run would count on every GPU. A request by count (``--gpus 2``) names no GPU, so it
    counts as all of them; a container without a GPU request has none.
    """
    requests = (attrs.get("HostConfig") or {}).get("DeviceRequests") or []
    uuids: list[str] = []
    for request in requests:
        if not isinstance(request, Mapping) or not _asks_for_gpus(request):
            continue
        ids = [str(uuid) for uuid in request.get("DeviceIDs") or [] if str(uuid).strip()]
        if not ids:
            return None
        uuids.extend(uuid for uuid in ids if uuid not in uuids)
    return GpuSelection(mode="uuids", uuids=uuids) if uuids else GpuSelection(mode="none")


def _asks_for_gpus(request: Mapping[str, Any]) -> bool:
    capabilities = request.get("Capabilities") or []
    named = any("gpu" in (group or []) for group in capabilities if isinstance(group, list))
    return named or request.get("Driver") == "nvidia"


def _command(attrs: Mapping[str, Any]) -> list[str] | None:
    command = (attrs.get("Config") or {}).get("Cmd")
    if isinstance(command, list) and all(isinstance(part, str) for part in command):
        return list(command)
    return None


def _failure_text(state: Mapping[str, Any], log_tail: Sequence[str]) -> str:
    headline = f"the container exited with code {state.get('ExitCode', '?')}"
    if state.get("Error"):
        headline += f": {state['Error']}"
    lines = list(log_tail)[-FAILURE_LOG_LINES:]
    return "\n".join([headline, *lines]) if lines else headline


def _runtime(value: str | None) -> RuntimeKind:
    # Containers started before the runtime label existed are vLLM containers.
    return _RUNTIMES.get(value or "", "vllm")


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _float_or_none(value: str | None) -> float | None:
    try:
        number = float(value) if value is not None else None
    except ValueError:
        return None
    return number if number is not None and number > 0 else None


def _docker_time(value: object) -> datetime | None:
    """Docker's RFC 3339 time with nanoseconds; its zero time means "never started"."""
    if not isinstance(value, str) or value.startswith("0001-"):
        return None
    try:
        return datetime.fromisoformat(_FRACTION.sub(r"\1", value))
    except ValueError:
        return None
