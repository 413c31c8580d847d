"""Which host ports Docker containers hold or Mirbad containers have claimed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ._container_spec import MODEL_LABEL, PORT_LABEL

# Internal to the drivers.
__all__: list[str] = []


def ports_taken_by_containers(containers: Iterable[Mapping[str, Any]]) -> set[int]:
    """Host ports that Docker containers hold or that Mirbad containers have claimed.

    ``containers`` are entries of Docker's container list (``GET /containers/json?all=1``). A Mirbad
    container claims its label's port even while it is not running, so a Failed model keeps its port
    until it is stopped; any container (ours or not) holds the ports it publishes.
    """
    taken: set[int] = set()
    for container in containers:
        labels = container.get("Labels") or {}
        if MODEL_LABEL in labels:
            claimed = _as_port(labels.get(PORT_LABEL))
            if claimed is not None:
                taken.add(claimed)
        for binding in container.get("Ports") or []:
            published = _as_port(binding.get("PublicPort"))
            if published is not None:
                taken.add(published)
    return taken


def _as_port(value: object) -> int | None:
    try:
        port = int(str(value))
    except ValueError:
        return None
    return port if 0 < port < 65536 else None
